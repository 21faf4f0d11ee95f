/* The look every gpuplane plotly chart shares (static/js/charts.js, static/js/decision_matrix.js),
   so that pages look alike: window.gpuplanePlotlyTheme.

   Plain values, no plotly calls: templates/_plotly_scripts.html loads it before plotly.js, and the
   chart scripts read it when they start. */
(function () {
  "use strict";

  // Mode-bar buttons that do nothing useful on these charts.
  const MODE_BAR_REMOVED = ["select2d", "lasso2d", "autoScale2d", "toggleSpikelines"];

  window.gpuplanePlotlyTheme = Object.freeze({
    // One colour per GPU index (charts.js) or score plugin (decision_matrix.js); readable on white.
    PALETTE: ["#4348d1", "#2f9e6e", "#d9731f", "#0b7fab", "#b8457e", "#7a6a00", "#6d2a8c", "#3a4556"],
    // The page's font and text colour (static/css/gpuplane.css). Not frozen: layouts hold it and
    // plotly may write into a layout it is given.
    FONT: {
      family: 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif',
      size: 12,
      color: "#1c2433",
    },
    GRID: "#eef0f4",
    AXIS_LINE: "#c4ccd8",
    MUTED: "#566173",

    /* plotly's config for a chart: responsive, no logo, without the shared unwanted mode-bar
       buttons and the `extraRemoved` ones. A new object each call: plotly may keep a reference. */
    config(extraRemoved = []) {
      return {
        responsive: true,
        displaylogo: false,
        modeBarButtonsToRemove: [...MODE_BAR_REMOVED, ...extraRemoved],
      };
    },
  });
})();
