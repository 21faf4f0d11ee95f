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
    const ts = data.samples.map((s) => s.ts);
    const line = (name, field, color, extra) => Object.assign(
      { type: "scatter", mode: "lines", line: { shape: "hv", color: color }, name: name, x: ts, y: data.samples.map((s) => s[field]) },
      extra || {}
    );
    window.Plotly.newPlot(document.getElementById("savings-gpus-chart"), [
      line("Baseline (whole GPUs)", "baseline_gpus", palette[2]),
      line("GPUs used", "gpus_used", palette[0]),
      line("GPUs saved", "gpus_saved", palette[1], { fill: "tozeroy" }),
    ], layout("GPUs"), THEME.config());
    window.Plotly.newPlot(document.getElementById("savings-cost-chart"), [
      line("$ / h saved", "usd_per_hour", palette[1]),
      line("kWh / h saved", "kwh_per_hour", palette[3], { yaxis: "y2" }),
    ], layout("$ / h", { yaxis2: { title: { text: "kWh / h" }, overlaying: "y", side: "right", rangemode: "tozero" } }), THEME.config());
  }

  document.addEventListener("DOMContentLoaded", draw);
})();
