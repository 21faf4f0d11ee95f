/* gpuplane scaling timeline, drawn with plotly.js (served by gpuplane from the installed plotly
   package).

   The [data-scaling-timeline="ID"] element gets the deployment's replicas over time (a step line)
   and the metrics that drove each decision (requests waiting and arriving per second) on a
   second axis; changes are marked, their hover text the policy's reason. The data is the page's
   json_script under ID: [{at, replicas, action, outcome, policy, reason, queue, arrival_rps,
   ttft_p95_s}] oldest first. */
(function () {
  "use strict";

  const THEME = window.gpuplanePlotlyTheme;
  const { PALETTE, FONT, GRID, AXIS_LINE, MUTED } = THEME;
  const CONFIG = THEME.config();

  function draw(element) {
    const source = document.getElementById(element.dataset.scalingTimeline);
    if (!source) return;
    const events = JSON.parse(source.textContent);
    const at = events.map((e) => e.at);
    const changes = events.filter((e) => e.action === "up" || e.action === "down");
    const traces = [
      { x: at, y: events.map((e) => e.replicas), name: "replicas", type: "scatter", mode: "lines",
        line: { shape: "hv", color: PALETTE[0], width: 3 } },
      { x: at, y: events.map((e) => e.queue), name: "requests waiting", yaxis: "y2", type: "scatter",
        mode: "lines", line: { color: PALETTE[2], width: 1.5 } },
      { x: at, y: events.map((e) => e.arrival_rps), name: "arrivals / s", yaxis: "y2", type: "scatter",
        mode: "lines", line: { color: PALETTE[1], width: 1.5, dash: "dot" } },
      { x: changes.map((e) => e.at), y: changes.map((e) => e.replicas), name: "scaling decision",
        type: "scatter", mode: "markers", marker: { size: 10, color: changes.map((e) => (e.action === "up" ? PALETTE[3] : PALETTE[4])) },
        text: changes.map((e) => `${e.policy}: ${e.action} to ${e.replicas} (${e.outcome})<br>${e.reason}`),
        hoverinfo: "text+x" },
    ];
    const layout = {
      font: FONT, margin: { l: 48, r: 56, t: 12, b: 40 }, height: 320, showlegend: true,
      legend: { orientation: "h", y: -0.2 },
      xaxis: { type: "date", gridcolor: GRID, linecolor: AXIS_LINE },
      yaxis: { title: { text: "replicas" }, rangemode: "tozero", dtick: 1, gridcolor: GRID, linecolor: AXIS_LINE },
      yaxis2: { title: { text: "requests", font: { color: MUTED } }, overlaying: "y", side: "right",
                rangemode: "tozero", showgrid: false },
    };
    window.Plotly.newPlot(element, traces, layout, CONFIG);
  }

  function start() {
    document.querySelectorAll("[data-scaling-timeline]").forEach(draw);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
