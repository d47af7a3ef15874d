// attnviz's chart component (attnviz/ui/charts.py): a Plotly figure that stays on the page between script runs.
// A new figure for the same key is drawn into the same <div> with Plotly.react (the axes, modebar and listeners
// are kept), instead of Streamlit unmounting the chart and building it again.  Plotly.js is Streamlit's own
// (data.streamlit_plotly), else the plotly Python package's bundle served by this Streamlit server (data.plotly):
// loaded once per tab.  Clicks on points with customdata are sent to Python as the trigger value "click".
function loadPlotly(streamlitChunk, bundle) {
  // Streamlit's own Plotly.js first (the module its st.plotly_chart loads, cached by the browser and compiled
  // once; importing it again, or while it loads, costs nothing more), else the plotly package's bundle.
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__attnvizPlotly) {
    window.__attnvizPlotly = (async () => {
      if (streamlitChunk) {
        try {
          await import(new URL(streamlitChunk, document.baseURI).href);
        } catch (error) {
          // another Streamlit version's chunk: the bundle below
        }
      }
      if (window.Plotly) return window.Plotly;
      await new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = new URL(bundle, document.baseURI).href;
        script.onload = resolve;
        script.onerror = () => reject(new Error("Plotly.js did not load"));
        document.head.appendChild(script);
      });
      return window.Plotly;
    })().catch((error) => {
      window.__attnvizPlotly = null;
      throw error;
    });
  }
  return window.__attnvizPlotly;
}

function themed(layout, root) {
  // the page's font and colours (Streamlit's theme, light or dark) where the figure does not set its own
  const style = getComputedStyle(root);
  const text = style.getPropertyValue("--st-text-color").trim() || style.color;
  const background = style.getPropertyValue("--st-background-color").trim();
  const font = style.getPropertyValue("--st-font").trim() || style.fontFamily;
  layout.font = {family: font, color: text, ...(layout.font || {})};
  if (background && layout.paper_bgcolor === undefined) layout.paper_bgcolor = background;
  return layout;
}

const FULLSCREEN = {
  name: "Fullscreen", title: "Fullscreen",
  icon: {width: 512, height: 512, path: "M32 32h160v64H96v96H32V32zm288 0h160v160h-64V96h-96V32zM32 320h64v96h96v64H32V320zm384 0h64v160H320v-64h96V320z"},
  click: (gd) => (document.fullscreenElement ? document.exitFullscreen() : gd.requestFullscreen()),
};

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let gd = parentElement.querySelector(":scope > .attnviz-chart");
  if (!gd) {
    gd = document.createElement("div");
    gd.className = "attnviz-chart";
    gd.dataset.testid = "attnvizChart";
    gd.style.width = "100%";
    parentElement.appendChild(gd);
  }
  gd.__attnvizTrigger = setTriggerValue;  // the newest run's callback
  if (gd.__attnvizSpec === data.spec && gd.__attnvizConfig === data.config) return;
  gd.__attnvizSpec = data.spec;
  gd.__attnvizConfig = data.config;
  const drawing = (gd.__attnvizDrawing || 0) + 1;
  gd.__attnvizDrawing = drawing;
  gd.dataset.drawn = "false";
  loadPlotly(data.streamlit_plotly, data.plotly).then((Plotly) => {
    if (gd.__attnvizDrawing !== drawing) return null;  // a newer figure arrived meanwhile
    const figure = JSON.parse(data.spec);
    const config = {displaylogo: false, responsive: true, ...JSON.parse(data.config)};
    config.modeBarButtonsToAdd = [FULLSCREEN, ...(config.modeBarButtonsToAdd || [])];
    config.modeBarButtonsToRemove = ["lasso2d", "select2d", ...(config.modeBarButtonsToRemove || [])];
    return Plotly.react(gd, figure.data, themed(figure.layout || {}, parentElement), config).then(() => {
      if (data.clicks && !gd.__attnvizListening) {
        gd.on("plotly_click", (event) => {
          const point = event && event.points && event.points[0];
          if (point && point.customdata !== undefined) gd.__attnvizTrigger("click", {customdata: point.customdata});
        });
        gd.__attnvizListening = true;
      }
      if (gd.__attnvizDrawing === drawing) gd.dataset.drawn = "true";
    });
  }).catch((error) => {
    gd.textContent = "This chart could not be drawn: " + error.message;
  });
}
