// attnviz's canvas chart (attnviz/ui/charts.py): a heatmap that stays on the page between script runs.  The
// script sends attnviz.views.canvas's bytes (a JSON header, then float32 values); this colours the values into a
// canvas of one pixel a cell (scaled by CSS, pixelated) and draws the title, token ticks, colour bar, shapes and
// annotations as SVG around it.  Hover shows the figure's hover template for the cell under the pointer; a click
// on a region (the thumbnail grid's tiles) is sent to Python as the trigger value "click"; the modebar downloads
// PNG or SVG and goes fullscreen.  Every label is set as text, never parsed as HTML.
const SVG = "http://www.w3.org/2000/svg";
const MAGIC = "AVH1";

function unpack(data) {
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data.buffer || data, data.byteOffset || 0,
                                                                    data.byteLength);
  const magic = String.fromCharCode(bytes[0], bytes[1], bytes[2], bytes[3]);
  if (magic !== MAGIC) throw new Error("not a canvas chart's bytes");
  const length = new DataView(bytes.buffer, bytes.byteOffset, 8).getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
  const start = 8 + length, count = header.rows * header.cols;
  const values = new Float32Array(bytes.slice(start, start + 4 * count).buffer);  // copied: aligned
  return {header, values};
}

function parseColor(color) {
  const rgb = /^rgba?\(([^)]+)\)$/.exec(color.trim());
  if (rgb) return rgb[1].split(",").slice(0, 3).map((v) => Math.round(parseFloat(v)));
  const hex = color.trim().replace("#", "");
  const full = hex.length === 3 ? [...hex].map((c) => c + c).join("") : hex;
  return [0, 2, 4].map((i) => parseInt(full.slice(i, i + 2), 16));
}

function colorTable(scale) {
  // 256 RGB entries, linear in RGB between the scale's stops (as Plotly colours a heatmap)
  const stops = scale.map(([at, color]) => [at, parseColor(color)]);
  const table = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = i / 255;
    let k = 1;
    while (k < stops.length - 1 && stops[k][0] < t) k++;
    const [a0, c0] = stops[k - 1], [a1, c1] = stops[k];
    const f = a1 > a0 ? Math.min(1, Math.max(0, (t - a0) / (a1 - a0))) : 0;
    for (let j = 0; j < 3; j++) table[3 * i + j] = c0[j] + f * (c1[j] - c0[j]);
  }
  return table;
}

function paint(canvas, header, values) {
  const {rows, cols, zmin, zmax} = header;
  canvas.width = cols;
  canvas.height = rows;
  const context = canvas.getContext("2d");
  const image = context.createImageData(cols, rows);
  const pixels = image.data, table = colorTable(header.colorscale);
  const span = zmax > zmin ? 255 / (zmax - zmin) : 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v !== v) continue;  // NaN: a gap (alpha 0), the background shows
    const k = 3 * Math.max(0, Math.min(255, Math.round((v - zmin) * span)));
    pixels[4 * i] = table[k];
    pixels[4 * i + 1] = table[k + 1];
    pixels[4 * i + 2] = table[k + 2];
    pixels[4 * i + 3] = 255;
  }
  context.putImageData(image, 0, 0);
}

let measurer = null;
function textWidth(text, size, font) {
  measurer = measurer || document.createElement("canvas").getContext("2d");
  measurer.font = `${size}px ${font}`;
  return measurer.measureText(text).width;
}

const TICK_CHARACTERS = 14;  // a longer token's tick is cut with "…" (the hover shows it whole)

function tickText(text) {
  const characters = Array.from(text);  // code points: an emoji is never cut in half
  return characters.length > TICK_CHARACTERS ? characters.slice(0, TICK_CHARACTERS - 1).join("") + "…" : text;
}

function niceTicks(low, high, count = 5) {
  const span = high - low;
  if (!(span > 0)) return [low];
  const raw = span / count, power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => span / s <= count) || 10 * power;
  const ticks = [];
  for (let v = Math.ceil(low / step - 1e-9) * step; v <= high + 1e-9 * step; v += step) ticks.push(+v.toFixed(12));
  return ticks;
}

function geometry(header, width, height, font) {
  // the plot area (left, top, width, height) in px, and the bands around it
  const size = 11, m = header.margin;
  const titleBand = header.title.length ? 10 + 18 * header.title.length : 0;
  const xa = header.xaxis, ya = header.yaxis;
  let top = titleBand, left = 4, right = 4;
  if (xa.visible && xa.ticks.length) {
    const longest = Math.max(...xa.ticks.map(([, t]) => textWidth(tickText(t), size, font)));
    const angle = Math.abs(xa.angle || 0) * Math.PI / 180;
    top += longest * Math.sin(angle) + size * Math.cos(angle) + 6;
  }
  if (xa.visible && xa.title) top += 18;
  if (ya.visible && ya.ticks.length) left += Math.max(...ya.ticks.map(([, t]) => textWidth(tickText(t), size, font))) + 6;
  if (ya.visible && ya.title) left += 18;
  if (header.colorbar) {
    const labels = niceTicks(header.zmin, header.zmax).map((v) => textWidth(formatNumber(v), size, font));
    const title = header.colorbar.title ? textWidth(header.colorbar.title, size, font) : 0;
    right += Math.max(header.colorbar.thickness + 8 + Math.max(...labels, 0), title + 4) + 6;
  }
  top = Math.max(Math.min(top, 0.45 * height), m.t);  // the map keeps most of the room, whatever the labels
  left = Math.max(Math.min(left, 0.3 * width), m.l);
  right = Math.max(right, m.r);
  const bottom = Math.max(m.b, header.masked ? 24 : 0);
  let plotWidth = Math.max(10, width - left - right), plotHeight = Math.max(10, height - top - bottom);
  if (header.square) {  // cells are square: the plot keeps the map's aspect, centred
    const cell = Math.min(plotWidth / header.cols, plotHeight / header.rows);
    const w = cell * header.cols, h = cell * header.rows;
    left += (plotWidth - w) / 2;
    plotWidth = w;
    plotHeight = h;
  }
  return {left, top, width: plotWidth, height: plotHeight, titleBand, full: width, fullHeight: height};
}

function formatNumber(v) {
  return Math.abs(v) >= 1000 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(1) : String(+v.toPrecision(4));
}

function element(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function decorations(header, g, colors) {
  // (below, above): the SVG behind the canvas (background, shapes below) and in front of it (everything else)
  const {rows, cols} = header;
  const cellW = g.width / cols, cellH = g.height / rows;
  const px = (x) => g.left + (x + 0.5) * cellW;
  const py = (y) => header.reversed ? g.top + (y + 0.5) * cellH : g.top + g.height - (y + 0.5) * cellH;
  const attrs = {width: g.full, height: g.fullHeight, viewBox: `0 0 ${g.full} ${g.fullHeight}`};
  const below = element("svg", {...attrs, class: "attnviz-below"});
  const above = element("svg", {...attrs, class: "attnviz-above main-svg"});
  below.appendChild(element("rect", {x: 0, y: 0, width: g.full, height: g.fullHeight, fill: colors.paper}));
  below.appendChild(element("rect", {x: g.left, y: g.top, width: g.width, height: g.height, fill: header.background}));
  for (const s of header.shapes) {
    const x0 = px(Math.min(s.x0, s.x1)), x1 = px(Math.max(s.x0, s.x1));
    const ys = [py(s.y0), py(s.y1)];
    const rect = element("rect", {x: x0, y: Math.min(...ys), width: x1 - x0, height: Math.abs(ys[1] - ys[0]),
                                  fill: s.fill || "none", class: "shape"});
    if (s.line) {
      rect.setAttribute("stroke", s.line);
      rect.setAttribute("stroke-width", s.width);
    }
    (s.below ? below : above).appendChild(rect);
  }
  const text = {fill: colors.text, "font-family": colors.font};
  header.title.forEach((line, i) => above.appendChild(element("text", {
    ...text, class: i === 0 ? "gtitle" : "gsubtitle", x: g.full / 2, y: 20 + 18 * i, "text-anchor": "middle",
    "font-size": i === 0 ? 14 : 11}, line)));
  const xa = header.xaxis, ya = header.yaxis;
  if (xa.visible) {
    const ticks = element("g", {class: "xaxis"});
    const angle = xa.angle || 0;
    for (const [at, label] of xa.ticks) {
      const x = px(at), y = g.top - 4;
      const tick = element("g", {class: "xtick"});
      tick.appendChild(element("text", {...text, x, y, "font-size": 11, "text-anchor": angle ? "start" : "middle",
                                        transform: angle ? `rotate(${angle} ${x} ${y})` : ""}, tickText(label)));
      ticks.appendChild(tick);
    }
    if (xa.title) ticks.appendChild(element("text", {...text, class: "xtitle", x: g.left + g.width / 2,
                                                      y: g.titleBand + 14, "text-anchor": "middle", "font-size": 12},
                                            xa.title));
    above.appendChild(ticks);
  }
  if (ya.visible) {
    const ticks = element("g", {class: "yaxis"});
    for (const [at, label] of ya.ticks) {
      const tick = element("g", {class: "ytick"});
      tick.appendChild(element("text", {...text, x: g.left - 4, y: py(at) + 4, "font-size": 11, "text-anchor": "end"},
                               tickText(label)));
      ticks.appendChild(tick);
    }
    if (ya.title) {
      const x = 12, y = g.top + g.height / 2;
      ticks.appendChild(element("text", {...text, class: "ytitle", x, y, "text-anchor": "middle", "font-size": 12,
                                         transform: `rotate(-90 ${x} ${y})`}, ya.title));
    }
    above.appendChild(ticks);
  }
  for (const note of header.annotations) {
    above.appendChild(element("text", {...text, class: "annotation-text", x: px(note.x),
                                       y: py(note.y) - 3,
                                       "text-anchor": "middle", "font-size": note.size}, note.text));
  }
  if (header.colorbar) {
    const bar = header.colorbar, length = g.height * (bar.len || 1);
    const x = g.left + g.width + 10, y = g.top + (g.height - length) / 2;
    const id = `attnviz-scale-${Math.random().toString(36).slice(2)}`;
    const gradient = element("linearGradient", {id, x1: 0, y1: 1, x2: 0, y2: 0});
    for (const [at, color] of header.colorscale) gradient.appendChild(element("stop", {offset: at, "stop-color": color}));
    const defs = element("defs");
    defs.appendChild(gradient);
    const group = element("g", {class: "colorbar"});
    group.appendChild(defs);
    group.appendChild(element("rect", {x, y, width: bar.thickness, height: length, fill: `url(#${id})`}));
    const span = header.zmax - header.zmin || 1;
    for (const v of niceTicks(header.zmin, header.zmax)) {
      const ty = y + length - ((v - header.zmin) / span) * length;
      group.appendChild(element("text", {...text, x: x + bar.thickness + 4, y: ty + 4, "font-size": 11},
                                formatNumber(v)));
    }
    if (bar.title) group.appendChild(element("text", {...text, x: x, y: y - 10, "font-size": 11}, bar.title));
    above.appendChild(group);
  }
  if (header.masked) {
    const y = g.top + g.height + 16, x = g.left + g.width - 60;
    const legend = element("g", {class: "legend"});
    legend.appendChild(element("rect", {x, y: y - 9, width: 10, height: 10, fill: header.masked}));
    legend.appendChild(element("text", {...text, x: x + 14, y, "font-size": 11}, "masked"));
    above.appendChild(legend);
  }
  return {below, above};
}

function fillTemplate(template, fields) {
  // Plotly's hover template, the placeholders attnviz's figures use (%{x}, %{y}, %{z:.4f}, %{customdata});
  // lines split before the values go in, so a label can never add a line or markup
  return template.replace(/<extra>.*?<\/extra>/g, "").split("<br>").map((line) =>
    line.replace(/%\{(\w+)(?::\.(\d+)f)?\}/g, (match, name, digits) => {
      const value = fields[name];
      if (value === undefined) return match;
      return digits !== undefined && typeof value === "number" ? value.toFixed(Number(digits)) : String(value);
    }).replace(/<[^>]*>/g, ""));
}

function themed(root) {
  const style = getComputedStyle(root);
  return {
    text: style.getPropertyValue("--st-text-color").trim() || style.color || "#31333f",
    paper: style.getPropertyValue("--st-background-color").trim() || "white",
    font: style.getPropertyValue("--st-font").trim() || style.fontFamily || "sans-serif",
  };
}

function download(blob, filename) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filename;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

function standaloneSvg(gd, scale) {
  // the chart as one SVG: both layers and the map as an embedded PNG, upscaled without smoothing
  const {g, canvas, below, above} = gd.__attnviz;
  const upscaled = document.createElement("canvas");
  upscaled.width = Math.max(1, Math.round(g.width * scale));
  upscaled.height = Math.max(1, Math.round(g.height * scale));
  const context = upscaled.getContext("2d");
  context.imageSmoothingEnabled = false;
  context.drawImage(canvas, 0, 0, upscaled.width, upscaled.height);
  const svg = element("svg", {xmlns: SVG, width: g.full, height: g.fullHeight, viewBox: `0 0 ${g.full} ${g.fullHeight}`});
  for (const node of below.childNodes) svg.appendChild(node.cloneNode(true));
  svg.appendChild(element("image", {x: g.left, y: g.top, width: g.width, height: g.height,
                                    preserveAspectRatio: "none", href: upscaled.toDataURL("image/png")}));
  for (const node of above.childNodes) svg.appendChild(node.cloneNode(true));
  return new XMLSerializer().serializeToString(svg);
}

function exportImage(gd) {
  const options = (gd.__attnviz.header.config || {}).toImageButtonOptions || {};
  const format = options.format === "svg" ? "svg" : "png", scale = options.scale || 1;
  const filename = `${options.filename || "attnviz"}.${format}`;
  const text = standaloneSvg(gd, format === "svg" ? 2 : scale);
  if (format === "svg") return download(new Blob([text], {type: "image/svg+xml"}), filename);
  const {g} = gd.__attnviz;
  const image = new Image();
  image.onload = () => {
    const canvas = document.createElement("canvas");
    canvas.width = Math.round(g.full * scale);
    canvas.height = Math.round(g.fullHeight * scale);
    canvas.getContext("2d").drawImage(image, 0, 0, canvas.width, canvas.height);
    canvas.toBlob((blob) => download(blob, filename), "image/png");
  };
  image.src = URL.createObjectURL(new Blob([text], {type: "image/svg+xml"}));
}

const CAMERA = "M9 3 7.2 5H4a2 2 0 0 0-2 2v11a2 2 0 0 0 2 2h16a2 2 0 0 0 2-2V7a2 2 0 0 0-2-2h-3.2L15 3H9zm3 5a4.5 4.5 0 1 1 0 9 4.5 4.5 0 0 1 0-9z";
const EXPAND = "M3 3h7v2H5v5H3V3zm11 0h7v7h-2V5h-5V3zM3 14h2v5h5v2H3v-7zm16 0h2v7h-7v-2h5v-5z";

function button(title, path, onClick) {
  const link = document.createElement("a");
  link.className = "modebar-btn";
  link.dataset.title = title;
  link.title = title;
  link.setAttribute("role", "button");
  link.setAttribute("aria-label", title);
  link.tabIndex = 0;  // reachable with the keyboard: Enter or Space presses it
  link.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      onClick();
    }
  });
  const icon = element("svg", {viewBox: "0 0 24 24", width: 16, height: 16});
  icon.appendChild(element("path", {d: path, fill: "currentColor"}));
  link.appendChild(icon);
  link.addEventListener("click", (event) => {
    event.preventDefault();
    onClick();
  });
  return link;
}

function cellAt(gd, event) {
  const {header} = gd.__attnviz;
  const box = gd.__attnviz.area.getBoundingClientRect();
  const col = Math.floor(((event.clientX - box.left) / box.width) * header.cols);
  const row = Math.floor(((event.clientY - box.top) / box.height) * header.rows);
  if (col < 0 || row < 0 || col >= header.cols || row >= header.rows) return null;
  return {col, row: header.reversed ? row : header.rows - 1 - row};
}

function regionAt(header, cell) {
  return header.regions.find(([x0, y0, w, h]) => cell.col >= x0 && cell.col < x0 + w && cell.row >= y0
                                                 && cell.row < y0 + h);
}

function hover(gd, event) {
  const state = gd.__attnviz, header = state.header, tip = state.tip;
  const cell = cellAt(gd, event);
  let lines = null;
  if (cell && header.regions.length) {
    const region = regionAt(header, cell);
    if (region && header.region_hover) lines = fillTemplate(header.region_hover, {customdata: region[4]});
    state.area.style.cursor = region && header.clicks ? "pointer" : "default";
  } else if (cell && header.hover) {
    const z = state.values[cell.row * header.cols + cell.col];
    if (z === z || header.hoverongaps) {
      lines = fillTemplate(header.hover, {x: header.x ? header.x[cell.col] : cell.col,
                                          y: header.y ? header.y[cell.row] : cell.row, z});
    }
  }
  if (!lines) {
    tip.style.display = "none";
    return;
  }
  tip.replaceChildren(...lines.map((line) => Object.assign(document.createElement("div"), {textContent: line})));
  tip.style.display = "block";
  const root = gd.getBoundingClientRect();
  let x = event.clientX - root.left + 12, y = event.clientY - root.top + 12;
  if (x + tip.offsetWidth > root.width) x = event.clientX - root.left - tip.offsetWidth - 12;
  if (y + tip.offsetHeight > root.height) y = event.clientY - root.top - tip.offsetHeight - 12;
  tip.style.left = `${Math.max(0, x)}px`;
  tip.style.top = `${Math.max(0, y)}px`;
}

function build(gd) {
  // the chart's fixed parts, once: both SVG layers, the canvas in its plot area, the hover box, the modebar
  const area = document.createElement("div");
  area.className = "attnviz-plot nsewdrag";
  const canvas = document.createElement("canvas");
  canvas.className = "attnviz-map";
  area.appendChild(canvas);
  const tip = document.createElement("div");
  tip.className = "hovertext";
  tip.dataset.testid = "attnvizHover";
  const modebar = document.createElement("div");
  modebar.className = "modebar";
  modebar.appendChild(button("Download plot", CAMERA, () => exportImage(gd)));
  modebar.appendChild(button("Fullscreen", EXPAND, () => (document.fullscreenElement ? document.exitFullscreen()
                                                                                    : gd.requestFullscreen())));
  gd.__attnviz = {area, canvas, tip, modebar, below: element("svg"), above: element("svg")};
  gd.append(gd.__attnviz.below, area, gd.__attnviz.above, tip, modebar);
  area.addEventListener("pointermove", (event) => hover(gd, event));
  area.addEventListener("pointerleave", () => { tip.style.display = "none"; });
  area.addEventListener("click", (event) => {
    const state = gd.__attnviz, cell = cellAt(gd, event);
    if (!state.header.clicks || !cell) return;
    const region = regionAt(state.header, cell);
    if (region) gd.__attnvizTrigger("click", {customdata: region[4]});
  });
  const observer = new ResizeObserver(() => {
    if (!gd.isConnected) return observer.disconnect();  // the chart left the page (its size went to 0)
    if (gd.__attnviz.header && gd.clientWidth !== gd.__attnviz.width) layout(gd);
  });
  observer.observe(gd);
}

function layout(gd) {
  // the SVG layers and the plot area for the chart's width (the canvas keeps its pixels)
  const state = gd.__attnviz, header = state.header;
  const colors = themed(gd.parentElement || gd);
  const width = gd.clientWidth || 600;
  const height = document.fullscreenElement === gd ? gd.clientHeight : header.height;
  gd.style.height = document.fullscreenElement === gd ? "" : `${header.height}px`;
  const g = geometry(header, width, height, colors.font);
  const {below, above} = decorations(header, g, colors);
  state.below.replaceWith(below);
  state.above.replaceWith(above);
  Object.assign(state, {below, above, g, width});
  gd.setAttribute("aria-label", header.title.join(" — "));  // role="figure": a screen reader reads the title
  Object.assign(state.area.style, {left: `${g.left}px`, top: `${g.top}px`, width: `${g.width}px`,
                                   height: `${g.height}px`});
}

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let gd = parentElement.querySelector(":scope > .attnviz-chart");
  if (!gd) {
    gd = document.createElement("div");
    gd.className = "attnviz-chart";
    gd.dataset.testid = "attnvizChart";
    gd.dataset.draws = "0";
    gd.setAttribute("role", "figure");
    parentElement.appendChild(gd);
    build(gd);
  }
  gd.__attnvizTrigger = setTriggerValue;  // the newest run's callback
  try {
    const {header, values} = unpack(data);
    if (gd.__attnviz.header && gd.__attnviz.header.digest === header.digest) return;
    Object.assign(gd.__attnviz, {header, values});
    paint(gd.__attnviz.canvas, header, values);
    layout(gd);
    gd.dataset.draws = String(Number(gd.dataset.draws) + 1);
    gd.dataset.drawn = "true";
  } catch (error) {
    gd.dataset.drawn = "error";
    gd.textContent = "This chart could not be drawn: " + error.message;
  }
}
