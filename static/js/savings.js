/* The savings page's charts (templates/savings/savings.html): baseline vs used GPUs per model,
   and the samples of the last 24 h (GPUs, $ / h and kWh / h saved). Data: the page's
   #savings-data JSON; the figures are the API's (GET /api/v1/savings/). */
(function () {
  "use strict";

  const THEME = window.gpuplanePlotlyTheme;

  function layout(yTitle, extra) {
    return Object.assign({
      font: THEME.FONT,
      margin: { l: 56, r: 16, t: 8, b: 40 },
      height: 260,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      xaxis: { gridcolor: THEME.GRID, linecolor: THEME.AXIS_LINE },
      yaxis: { title: { text: yTitle }, gridcolor: THEME.GRID, linecolor: THEME.AXIS_LINE, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.2 },
    }, extra || {});
  }

  function plotlyTime(ms) {
    return new Date(ms).toISOString().replace("T", " ").slice(0, 19);
  }

  // A time axis that reads as clock times at any span: plotly's own autorange around one sample
  // zooms to fractions of a second ("05:27:30.3665"). The range is padded by at least 5 minutes.
  function timeAxisFor(ts) {
    const times = ts.map((t) => new Date(t.replace(" ", "T") + "Z").getTime());
    const first = Math.min.apply(null, times), last = Math.max.apply(null, times);
    const pad = Math.max(5 * 60 * 1000, 0.05 * (last - first));
    return {
      type: "date", range: [plotlyTime(first - pad), plotlyTime(last + pad)], gridcolor: THEME.GRID, linecolor: THEME.AXIS_LINE,
      hoverformat: "%Y-%m-%d %H:%M:%S UTC",
      tickformatstops: [
        { dtickrange: [null, 60 * 1000], value: "%H:%M:%S" },
        { dtickrange: [60 * 1000, 24 * 3600 * 1000], value: "%H:%M" },
        { dtickrange: [24 * 3600 * 1000, null], value: "%b %d" },
      ],
    };
  }

  function draw() {
    const source = document.getElementById("savings-data");
    if (!source || !window.Plotly) return;
    const data = JSON.parse(source.textContent);
    const palette = THEME.PALETTE;

    const modelChart = document.getElementById("savings-model-chart");
    if (modelChart && data.by_model.length) {
      const names = data.by_model.map((m) => m.gpu_model || "Unknown model");
      window.Plotly.newPlot(modelChart, [
        { type: "bar", name: "Baseline (whole GPUs)", x: names, y: data.by_model.map((m) => m.baseline_gpus), marker: { color: palette[2] } },
        { type: "bar", name: "GPUs used", x: names, y: data.by_model.map((m) => m.gpus_used), marker: { color: palette[0] } },
      ], layout("GPUs", { barmode: "group" }), THEME.config());
    }

    if (!data.samples.length) return;
    // Plotly reads "YYYY-MM-DD HH:MM:SS" (no zone): each sample's time in UTC, as the axis says.
    const ts = data.samples.map((s) => plotlyTime(new Date(s.ts).getTime()));
    // Markers too: one sample (a fresh install) is a point to read, not an invisible line.
    const line = (name, field, color, extra) => Object.assign(
      { type: "scatter", mode: "lines+markers", marker: { size: 5, color: color }, line: { shape: "hv", color: color },
        name: name, x: ts, y: data.samples.map((s) => s[field]) },
      extra || {}
    );
    const timeAxis = timeAxisFor(ts);
    window.Plotly.newPlot(document.getElementById("savings-gpus-chart"), [
      line("Baseline (whole GPUs)", "baseline_gpus", palette[2]),
      line("GPUs used", "gpus_used", palette[0]),
      line("GPUs saved", "gpus_saved", palette[1], { fill: "tozeroy" }),
    ], layout("GPUs", { xaxis: timeAxis }), THEME.config());
    window.Plotly.newPlot(document.getElementById("savings-cost-chart"), [
      line("$ / h saved", "usd_per_hour", palette[1]),
      line("kWh / h saved", "kwh_per_hour", palette[3], { yaxis: "y2" }),
    ], layout("$ / h", { xaxis: timeAxis, yaxis2: { title: { text: "kWh / h" }, overlaying: "y", side: "right", rangemode: "tozero" } }), THEME.config());
  }

  document.addEventListener("DOMContentLoaded", draw);
})();
