/* gpuplane decision matrix chart, drawn with plotly.js (served by gpuplane from the installed
   plotly package).

   Every [data-decision-chart="ID"] element gets horizontal stacked bars: one bar per node, one
   segment per score plugin, segment length = the plugin's weighted points, so a bar's length is
   the node's total. The data is the stored decision matrix (core ScheduleResult.to_dict()) that the page
   embedded with json_script under the element's ID; the plugins' titles and raw units in words
   (scheduler/plugin_labels.py) are under ID + "-labels". The chosen node comes first, then the other
   feasible nodes by rank, at most data-top of them; the table under the chart has every row. */
(function () {
  "use strict";

  // The colours, font and config of static/js/charts.js (static/js/plotly_theme.js), so pages look
  // alike. Bars have a fixed range: zoom and pan only get in the way.
  const THEME = window.gpuplanePlotlyTheme;
  const { PALETTE, FONT, GRID, AXIS_LINE, MUTED } = THEME;
  const CONFIG = THEME.config(["zoom2d", "pan2d"]);
  const BAR_PX = 30;
  const CHROME_PX = 96; // legend, axis and margins around the bars

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  /* Feasible rows to chart: the chosen node first, then by rank; at most `top`. */
  function topRows(matrix, top) {
    const chosen = matrix.outcome === "placed" ? matrix.node : null;
    const feasible = (matrix.rows || []).filter((row) => row.feasible && row.scores && row.scores.length);
    feasible.sort((a, b) => {
      if ((a.node === chosen) !== (b.node === chosen)) return a.node === chosen ? -1 : 1;
      return (a.rank ?? Infinity) - (b.rank ?? Infinity);
    });
    return { rows: feasible.slice(0, top), chosen };
  }

  /* Plugins heaviest weight first, ties by name, like the table's columns (stored JSON may not
     keep the profile's key order). */
  function plugins(matrix, rows) {
    const weights = matrix.weights || {};
    const names = Object.keys(weights).sort((a, b) => weights[b] - weights[a] || (a < b ? -1 : a > b ? 1 : 0));
    // Rows stored by an older profile may name a plugin the weights do not: keep it too.
    rows.forEach((row) => row.scores.forEach((s) => { if (!names.includes(s.plugin)) names.push(s.plugin); }));
    return names;
  }

  function draw(element) {
    const source = document.getElementById(element.dataset.decisionChart);
    if (!source || !window.Plotly) return;
    const matrix = JSON.parse(source.textContent);
    const labelSource = document.getElementById(`${element.dataset.decisionChart}-labels`);
    const pluginLabels = labelSource ? JSON.parse(labelSource.textContent) : {};
    const title = (plugin) => (pluginLabels[plugin] && pluginLabels[plugin].title) || plugin;
    const unit = (plugin) => (pluginLabels[plugin] && pluginLabels[plugin].unit ? ` ${pluginLabels[plugin].unit}` : "");
    const top = Number(element.dataset.top) || 10;
    const { rows, chosen } = topRows(matrix, top);
    if (!rows.length) {
      element.closest("figure")?.setAttribute("hidden", "");
      return;
    }
    // Node names are the category axis; the chosen one is marked in its tick label.
    const labels = rows.map((row) => (row.node === chosen ? `<b>${escapeHtml(row.node)}</b> ✓` : escapeHtml(row.node)));
    const traces = plugins(matrix, rows).map((plugin, i) => {
      const cells = rows.map((row) => row.scores.find((s) => s.plugin === plugin) || null);
      return {
        type: "bar",
        orientation: "h",
        name: plugin in (matrix.weights || {}) ? `${escapeHtml(title(plugin))} × ${Number(matrix.weights[plugin]).toFixed(2)}` : escapeHtml(title(plugin)),
        y: rows.map((row) => row.node),
        x: cells.map((cell) => (cell ? cell.weighted : 0)),
        customdata: cells.map((cell) => (cell ? [cell.raw, cell.normalized, cell.weight] : [null, null, null])),
        marker: { color: PALETTE[i % PALETTE.length], line: { color: "#ffffff", width: 1 } },
        hovertemplate:
          `<b>%{y}</b><br>${escapeHtml(title(plugin))}: %{x:.1f} points<br>` +
          `raw %{customdata[0]}${escapeHtml(unit(plugin))} · normalized %{customdata[1]}/100 × %{customdata[2]}<extra></extra>`,
      };
    });
    const annotations = rows.map((row) => ({
      x: row.total,
      y: row.node,
      text: `<b>${Number(row.total).toFixed(1)}</b>`,
      xanchor: "left",
      xshift: 6,
      showarrow: false,
      font: { ...FONT, color: row.node === chosen ? "#115c32" : MUTED },
    }));
    const maxTotal = Math.max(...rows.map((row) => row.total || 0), 1);
    const layout = {
      barmode: "stack",
      bargap: 0.28,
      height: CHROME_PX + BAR_PX * rows.length,
      margin: { l: 10, r: 20, t: 10, b: 36 },
      font: FONT,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      showlegend: true,
      legend: { orientation: "h", traceorder: "normal", x: 0, y: 1, yanchor: "bottom", font: { ...FONT, size: 11 } },
      xaxis: {
        title: { text: "weighted points (total = bar length)", font: { ...FONT, size: 11, color: MUTED } },
        range: [0, maxTotal * 1.1],
        gridcolor: GRID,
        linecolor: AXIS_LINE,
        zeroline: false,
        fixedrange: true,
      },
      yaxis: {
        type: "category",
        autorange: "reversed",
        automargin: true,
        tickvals: rows.map((row) => row.node),
        ticktext: labels,
        linecolor: AXIS_LINE,
        fixedrange: true,
      },
      annotations,
      hoverlabel: { font: FONT },
    };
    // Reserve the final height before drawing, so the page below does not jump.
    element.style.minHeight = `${layout.height}px`;
    window.Plotly.newPlot(element, traces, layout, CONFIG);
  }

  function init() {
    document.querySelectorAll("[data-decision-chart]").forEach(draw);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
