/* gpuplane charts, drawn with plotly.js (served by gpuplane from the installed plotly package).

   - [data-telemetry] sections (node and GPU pages): four time-series charts (utilization, memory
     used, power, temperature), one line per GPU, from the series API (nodes/api/series.py) for the
     range picked in the section's range links.
   - [data-heatmap] card (overview): one tile per node, coloured by its GPUs' mean latest
     utilization, a click opening the node's page; first drawn from the JSON the server embedded
     (#heatmap-data), then refreshed from /api/v1/heatmap/ (both cached per poll interval).

   Both refresh themselves every data-interval-s seconds (the telemetry poll interval), so pages
   fill as samples arrive without a reload; refreshes pause while the tab is hidden. Requests use
   the page's session cookie. */
(function () {
  "use strict";

  const METRICS = {
    utilization_pct: { unit: "%", scale: 1, digits: 0, range: [0, 100] },
    memory_used_mib: { unit: "GB", scale: 1 / 1024, digits: 1 },  /* GB = 1024 MiB, as on every page */
    power_w: { unit: "W", scale: 1, digits: 0 },
    temperature_c: { unit: "°C", scale: 1, digits: 0 },
  };
  // Colours, font and config shared with the decision matrix (static/js/plotly_theme.js). PALETTE
  // has one colour per GPU index, the same on every chart and page.
  const THEME = window.gpuplanePlotlyTheme;
  const { PALETTE, FONT, GRID, AXIS_LINE, MUTED } = THEME;
  const CONFIG = THEME.config();
  // Indigo, deeper with load; orange from 85 %, where the inventory tables turn their bars "hot".
  const HEAT_SCALE = [
    [0, "#eef0fd"],
    [0.5, "#8a8ef0"],
    [0.85, "#3b3fc4"],
    [0.85, "#e8914a"],
    [1, "#c2551a"],
  ];
  const NO_DATA = "#d5dae3";

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  /* An ISO 8601 instant as "YYYY-MM-DD HH:MM:SS" in the browser's time zone; plotly draws date
     strings as given, so converting here puts the axes in the viewer's local time. */
  function localTime(iso) {
    const d = new Date(iso);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  /* Like nodes.figures.format_gb: "0.5 GB", "39.5 GB", "80 GB" (1 GB = 1024 MiB). */
  function formatMiB(mib) {
    return `${(mib / 1024).toFixed(1).replace(/\.0$/, "")} GB`;
  }

  function clock(date) {
    return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  }

  function medianStepMs(times) {
    const steps = [];
    for (let i = 1; i < times.length; i += 1) steps.push(times[i] - times[i - 1]);
    steps.sort((a, b) => a - b);
    return steps.length ? steps[Math.floor(steps.length / 2)] : 0;
  }

  /* x/y arrays for one metric; a hole longer than 3 usual steps gets a null point so that the line
     breaks there instead of drawing a straight bridge over a time with no samples. */
  function lineXY(points, field) {
    const spec = METRICS[field];
    const times = points.map((p) => Date.parse(p.ts));
    const gapMs = 3 * medianStepMs(times);
    const x = [];
    const y = [];
    points.forEach((point, i) => {
      if (i > 0 && gapMs > 0 && times[i] - times[i - 1] > gapMs) {
        x.push(localTime(new Date((times[i] + times[i - 1]) / 2).toISOString()));
        y.push(null);
      }
      const value = point[field];
      x.push(localTime(point.ts));
      y.push(value === null || value === undefined ? null : value * spec.scale);
    });
    return { x, y };
  }

  /* [{label, index, points}] for a node payload (every GPU, by index) or a GPU payload, whose
     index the page gives (data-gpu-index) so that a GPU has the same colour on every page. */
  function seriesOf(payload, gpuIndex) {
    if (payload.gpus) {
      return Object.values(payload.gpus)
        .map((gpu) => ({ label: `GPU ${gpu.index}`, index: gpu.index, points: gpu.points }))
        .sort((a, b) => a.index - b.index);
    }
    return [{ label: `GPU ${gpuIndex}`, index: gpuIndex, points: payload.points }];
  }

  function chartLayout(field, showLegend, revision) {
    const spec = METRICS[field];
    return {
      autosize: true,
      height: 250,
      margin: { l: 48, r: 14, t: 8, b: showLegend ? 58 : 32 },
      font: FONT,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "#ffffff",
      hovermode: "x unified",
      hoverlabel: { font: { family: FONT.family, size: 12 } },
      showlegend: showLegend,
      legend: { orientation: "h", x: 0, y: -0.2, yanchor: "top", font: { size: 11, color: MUTED } },
      xaxis: { type: "date", gridcolor: GRID, linecolor: AXIS_LINE, tickfont: { color: MUTED }, showspikes: false },
      yaxis: {
        gridcolor: GRID,
        linecolor: AXIS_LINE,
        tickfont: { color: MUTED },
        zeroline: false,
        rangemode: "tozero",
        ...(spec.range ? { range: spec.range, autorange: false } : { autorange: true }),
      },
      // Keeps a zoom the viewer made across refreshes; a new range resets it.
      uirevision: revision,
    };
  }

  function chartTraces(series, field) {
    const spec = METRICS[field];
    return series.map((s) => {
      const { x, y } = lineXY(s.points, field);
      return {
        type: "scatter",
        mode: s.points.length < 3 ? "lines+markers" : "lines",
        name: s.label,
        x,
        y,
        line: { width: 1.8, color: PALETTE[s.index % PALETTE.length] },
        marker: { size: 5 },
        hovertemplate: `${s.label}: %{y:.${spec.digits}f} ${spec.unit}<extra></extra>`,
      };
    });
  }

  const UNIT_WORDS = { s: "second", m: "minute", h: "hour" };

  /* "raw" -> "Raw samples"; a rollup bucket such as "5m" -> "5-minute averages". */
  function resolutionText(resolution) {
    if (resolution === "raw") return "Raw samples";
    const match = /^(\d+)([smh])$/.exec(resolution);
    return match ? `${match[1]}-${UNIT_WORDS[match[2]]} averages` : `${resolution} averages`;
  }

  // --- time-series sections -------------------------------------------------------------------

  function TelemetryPanel(section) {
    this.section = section;
    this.url = section.dataset.seriesUrl;
    this.range = section.dataset.range;
    this.intervalMs = Math.max(5, Number(section.dataset.intervalS) || 30) * 1000;
    this.hasSamples = section.dataset.hasSamples === "true";
    this.gpuIndex = Number(section.dataset.gpuIndex) || 0;
    this.request = 0;
    this.meta = section.querySelector("[data-telemetry-meta]");
    this.empty = section.querySelector("[data-telemetry-empty]");
    this.emptyNever = section.querySelector("[data-empty-never]");
    this.emptyRange = section.querySelector("[data-empty-range]");
    this.emptyError = section.querySelector("[data-empty-error]");
    this.charts = section.querySelector("[data-telemetry-charts]");
    this.links = Array.from(section.querySelectorAll("a[data-range]"));
    this.links.forEach((link) => link.addEventListener("click", (event) => this.choose(event, link.dataset.range)));
  }

  TelemetryPanel.prototype.choose = function (event, range) {
    event.preventDefault();
    this.range = range;
    this.links.forEach((link) => {
      if (link.dataset.range === range) link.setAttribute("aria-current", "true");
      else link.removeAttribute("aria-current");
    });
    const url = new URL(window.location.href);
    url.searchParams.set("range", range);
    window.history.replaceState(null, "", url);
    this.load();
  };

  TelemetryPanel.prototype.load = async function () {
    const request = ++this.request;
    let payload;
    try {
      const response = await fetch(`${this.url}?range=${encodeURIComponent(this.range)}`, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (response.status === 503) {
        // The time-series store (Prometheus) cannot answer: say why, on an empty chart.
        const body = await response.json().catch(() => ({}));
        if (request === this.request) this.unavailable(body.detail || "The telemetry store is unavailable.");
        return;
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      payload = await response.json();
    } catch (error) {
      this.meta.textContent = `Could not load telemetry (${error.message}); retrying shortly.`;
      return;
    }
    // A range picked while this request was in flight has started a newer one: let that win.
    if (request === this.request) this.render(payload);
  };

  TelemetryPanel.prototype.unavailable = function (reason) {
    this.charts.hidden = true;
    this.empty.hidden = false;
    this.emptyNever.hidden = true;
    this.emptyRange.hidden = true;
    this.emptyError.hidden = false;
    this.emptyError.querySelector("[data-empty-reason]").textContent = reason;
    this.meta.textContent = `Retrying every ${this.intervalMs / 1000} s.`;
    this.section.dataset.loaded = "true";
  };

  TelemetryPanel.prototype.render = function (payload) {
    const series = seriesOf(payload, this.gpuIndex);
    const any = series.some((s) => s.points.length > 0);
    this.hasSamples = this.hasSamples || any;
    this.empty.hidden = any;
    this.emptyNever.hidden = this.hasSamples;
    this.emptyRange.hidden = !this.hasSamples;
    this.emptyError.hidden = true;
    // Unhide before drawing: plotly sizes a chart from its container's width.
    this.charts.hidden = !any;
    this.section.dataset.loaded = "true";
    if (!any) {
      this.meta.textContent = "";
      return;
    }
    const showLegend = series.length > 1;
    this.charts.querySelectorAll("[data-metric]").forEach((el) => {
      const field = el.dataset.metric;
      window.Plotly.react(el, chartTraces(series, field), chartLayout(field, showLegend, payload.range), CONFIG);
    });
    this.meta.textContent = `${resolutionText(payload.resolution)} · updated ${clock(new Date())}`;
  };

  // --- overview heatmap -------------------------------------------------------------------------

  const STATE_LABELS = { ready: "schedulable", cordoned: "cordoned", notready: "not ready" };

  // Up to this many nodes, tiles are big enough to carry the node's name and utilization.
  const LABELLED_TILES = 64;

  /* How many tiles per line: up to 8 labelled tiles, else about 2.5 times as wide as tall. */
  function tileColumns(n) {
    if (n <= LABELLED_TILES) return Math.max(1, Math.min(n, 8));
    return Math.min(n, Math.max(16, Math.ceil(Math.sqrt(n * 2.5))));
  }

  /* The node map: one tile per node, in the payload's (name) order, left to right and top to
     bottom. Rows come as arrays under data.columns (nodes/fleet.py), links from one template. */
  function heatmapFigure(data) {
    const col = Object.fromEntries(data.columns.map((name, i) => [name, i]));
    const nodes = data.nodes;
    const columns = tileColumns(nodes.length);
    const lines = Math.ceil(nodes.length / columns);
    const x = Array.from({ length: columns }, (_, i) => i);
    const y = Array.from({ length: lines }, (_, i) => i);
    const blank = () => Array.from({ length: lines }, () => new Array(columns).fill(null));
    const util = blank();
    const silent = blank();
    const text = Array.from({ length: lines }, () => new Array(columns).fill(""));
    const names = blank();
    const small = nodes.length <= LABELLED_TILES;
    const annotations = [];
    nodes.forEach((row, k) => {
      const line = Math.floor(k / columns);
      const i = k % columns;
      const name = row[col.name];
      const gpus = row[col.gpus];
      const reporting = row[col.reporting];
      const mean = row[col.utilization_pct];
      const power = row[col.power_w];
      names[line][i] = name;
      if (small) {
        const figure = mean === null ? "no telemetry" : `${mean.toFixed(0)} %`;
        const dark = mean !== null && mean >= 50;
        annotations.push({
          x: i, y: line, text: `${name}<br><b>${figure}</b>`, showarrow: false, captureevents: false,
          font: { size: 11, color: dark ? "#ffffff" : "#1f2430" },
        });
      }
      const state = row[col.state] === "ready" ? "" : ` · ${STATE_LABELS[row[col.state]] || row[col.state]}`;
      const head = `<b>${name}</b>${state}<br>${gpus} GPU${gpus === 1 ? "" : "s"} · allocated ${row[col.allocated]} GPU-eq.`;
      if (mean === null) {
        silent[line][i] = 1;
        text[line][i] = `${head}<br>No telemetry yet`;
        return;
      }
      util[line][i] = mean;
      const watts = power === null ? "" : `<br>power ${power >= 1000 ? `${(power / 1000).toFixed(1)} kW` : `${power.toFixed(0)} W`}`;
      text[line][i] = `${head}<br>mean utilization ${mean.toFixed(0)} % (${reporting} of ${gpus} reporting)${watts}`;
    });
    const cells = { x, y, text, customdata: names, xgap: 2, ygap: 2, hoverinfo: "text", hoverongaps: false, type: "heatmap" };
    const traces = [
      { ...cells, z: silent, zmin: 0, zmax: 1, colorscale: [[0, NO_DATA], [1, NO_DATA]], showscale: false, name: "no telemetry" },
      {
        ...cells,
        z: util,
        zmin: 0,
        zmax: 100,
        colorscale: HEAT_SCALE,
        name: "utilization",
        colorbar: { title: { text: "%", side: "top" }, thickness: 12, outlinewidth: 0, tickfont: { color: MUTED } },
      },
    ];
    const hidden = { showticklabels: false, showgrid: false, zeroline: false, fixedrange: true, ticks: "" };
    const layout = {
      autosize: true,
      height: Math.max(small ? 70 : 190, lines * (small ? 58 : 14) + 12),
      margin: { l: 4, r: 4, t: 6, b: 6 },
      font: FONT,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      xaxis: { ...hidden, range: [-0.5, columns - 0.5] },
      yaxis: { ...hidden, autorange: "reversed" },
      annotations,
      uirevision: "heatmap",
    };
    return { traces, layout };
  }

  function Heatmap(card) {
    this.card = card;
    this.chart = card.querySelector("[data-heatmap-chart]");
    this.meta = card.querySelector("[data-heatmap-meta]");
    this.empty = card.querySelector("[data-heatmap-empty]");
    this.url = card.dataset.refreshUrl;
    this.intervalMs = Math.max(5, Number(card.dataset.intervalS) || 30) * 1000;
    this.nodeUrl = "";
  }

  Heatmap.prototype.render = function (data) {
    const figure = heatmapFigure(data);
    this.nodeUrl = data.node_url;
    const first = !this.chart.classList.contains("js-plotly-plot");
    window.Plotly.react(this.chart, figure.traces, figure.layout, { ...CONFIG, displayModeBar: false });
    if (first) {
      // Clicking a tile opens that node's page, which lists its GPUs.
      this.chart.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        const name = point && point.customdata;
        if (name) window.location.assign(this.nodeUrl.replace("{name}", encodeURIComponent(name)));
      });
    }
    this.empty.hidden = data.reporting_gpus > 0;
    const nodes = `${data.nodes.length} node${data.nodes.length === 1 ? "" : "s"}`;
    this.meta.textContent = `${nodes} · ${data.reporting_gpus} of ${data.gpus} GPUs reporting · updated ${clock(new Date())}`;
    this.card.dataset.loaded = "true";
  };

  Heatmap.prototype.load = async function () {
    try {
      const response = await fetch(this.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      this.render(await response.json());
    } catch (error) {
      this.meta.textContent = `Could not refresh (${error.message}); retrying shortly.`;
    }
  };

  // --- start ------------------------------------------------------------------------------------

  /* Calls load() every intervalMs while the tab is visible, and at once when it becomes visible
     again after a refresh was due. */
  function keepFresh(widget) {
    let last = Date.now();
    const tick = () => {
      if (document.hidden) return;
      last = Date.now();
      widget.load();
    };
    window.setInterval(tick, widget.intervalMs);
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && Date.now() - last >= widget.intervalMs) tick();
    });
  }

  function start() {
    if (!window.Plotly) {
      document.querySelectorAll("[data-telemetry-meta], [data-heatmap-meta]").forEach((el) => {
        el.textContent = "Charts are unavailable: plotly.js did not load.";
      });
      return;
    }
    document.querySelectorAll("[data-telemetry]").forEach((section) => {
      const panel = new TelemetryPanel(section);
      panel.load();
      keepFresh(panel);
    });
    document.querySelectorAll("[data-heatmap]").forEach((card) => {
      const embedded = document.getElementById("heatmap-data");
      if (!card.querySelector("[data-heatmap-chart]") || !embedded) return;
      const heatmap = new Heatmap(card);
      heatmap.render(JSON.parse(embedded.textContent));
      keepFresh(heatmap);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
