// SVG charts in plain JS: line charts and stacked bars over windows. No dependencies.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PAD = { left: 56, right: 56, top: 16, bottom: 32 };
const PALETTE = ["#4fb3ff", "#ffb454", "#c792ea", "#6cc56c", "#f07178", "#89ddff", "#e6c05c", "#a6accd"];
export const STATUS_COLOURS = {
  ok: "#6cc56c", missing: "#e6c05c", invalid: "#f07178", late: "#ff8f40", early: "#ff8f40",
  not_attempted: "#8a96a3", skipped: "#8a96a3",
};

export const fmt = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));

export function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
  if (text !== undefined) el.textContent = text;
  return el;
}

function size(svg) {
  const box = svg.viewBox.baseVal;
  return { width: box.width, height: box.height };
}

function extent(values) {
  let min = Math.min(...values);
  let max = Math.max(...values);
  if (min === max) { min -= 1; max += 1; }
  return { min, max };
}

// A linear map from the extent onto pixels [from, to].
const linear = (e, from, to) => (v) => from + ((v - e.min) / (e.max - e.min)) * (to - from);

// Replaces the chart's content by one centred message (e.g. "no windows yet").
export function message(svg, text) {
  const { width, height } = size(svg);
  svg.replaceChildren(svgEl("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty" }, text));
}

// Labels name the first and last window drawn (not the padded extent of a single point).
function xAxis(svg, windows, xAt) {
  const { width, height } = size(svg);
  svg.appendChild(svgEl("line", { class: "axis", x1: PAD.left, y1: height - PAD.bottom, x2: width - PAD.right, y2: height - PAD.bottom }));
  for (const w of new Set([windows[0], windows[windows.length - 1]])) {
    svg.appendChild(svgEl("text", { x: xAt(w), y: height - 10, "text-anchor": "middle" }, `w${Math.round(w)}`));
  }
}

function yLabels(svg, values, yAt, side) {
  const { width } = size(svg);
  const x = side === "left" ? PAD.left - 6 : width - PAD.right + 6;
  const anchor = side === "left" ? "end" : "start";
  for (const v of new Set([Math.min(...values), Math.max(...values)])) {
    svg.appendChild(svgEl("text", { x, y: yAt(v) + 4, "text-anchor": anchor }, fmt(v, 2)));
  }
}

// Line series over windows; each series has {name, values, side: "left"|"right"}, one y scale each.
// Points whose value is null are skipped (the line continues over the gap).
export function lines(svg, windows, series, empty = "no data yet") {
  svg.replaceChildren();
  if (windows.length === 0) { message(svg, empty); return; }
  const { width, height } = size(svg);
  const xs = extent(windows);
  const xAt = linear(xs, PAD.left, width - PAD.right);
  xAxis(svg, windows, xAt);
  for (const s of series) {
    const points = windows.map((w, i) => [w, s.values[i]]).filter(([, v]) => v !== null && v !== undefined);
    if (points.length === 0) continue;
    const ys = extent(points.map(([, v]) => v));
    const yAt = linear(ys, height - PAD.bottom, PAD.top);
    yLabels(svg, points.map(([, v]) => v), yAt, s.side ?? "left");
    const d = points.map(([w, v], i) => `${i === 0 ? "M" : "L"}${xAt(w).toFixed(1)},${yAt(v).toFixed(1)}`);
    svg.appendChild(svgEl("path", { class: `series ${s.name}`, d: d.join(" ") }));
    for (const [w, v] of points) {
      const dot = svgEl("circle", { class: `dot ${s.name}`, cx: xAt(w).toFixed(1), cy: yAt(v).toFixed(1), r: 2.5 });
      dot.appendChild(svgEl("title", {}, `window ${w}: ${fmt(v, 4)}`));
      svg.appendChild(dot);
    }
  }
}

// Stacked bars, one per window: rows[i] maps a key to a value. Returns {key: colour} for a legend.
export function stacked(svg, windows, rows, colours = {}, empty = "no data yet") {
  svg.replaceChildren();
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].sort();
  const colourOf = Object.fromEntries(keys.map((k, i) => [k, colours[k] ?? PALETTE[i % PALETTE.length]]));
  if (windows.length === 0) { message(svg, empty); return colourOf; }
  const { width, height } = size(svg);
  const totals = rows.map((r) => Object.values(r).reduce((a, b) => a + b, 0));
  const ys = { min: 0, max: Math.max(...totals, 1e-9) };
  const yAt = linear(ys, height - PAD.bottom, PAD.top);
  const slot = (width - PAD.left - PAD.right) / windows.length;
  const barWidth = Math.max(1, Math.min(40, slot * 0.7));
  const xAt = (w) => PAD.left + slot * (windows.indexOf(w) + 0.5);
  xAxis(svg, windows, xAt);
  yLabels(svg, [0, ys.max], yAt, "left");
  windows.forEach((w, i) => {
    let base = 0;
    for (const key of keys) {
      const value = rows[i][key] ?? 0;
      if (value <= 0) continue;
      const rect = svgEl("rect", {
        class: `bar bar-${key}`, x: (xAt(w) - barWidth / 2).toFixed(1), width: barWidth.toFixed(1),
        y: yAt(base + value).toFixed(1), height: Math.max(0.5, yAt(base) - yAt(base + value)).toFixed(1),
        fill: colourOf[key],
      });
      rect.appendChild(svgEl("title", {}, `window ${w}: ${key} ${fmt(value, 2)}`));
      svg.appendChild(rect);
      base += value;
    }
  });
  return colourOf;
}

// A legend of coloured keys into a <p>; colours are set through the DOM (the CSP forbids inline styles).
export function legend(element, colourOf) {
  element.replaceChildren();
  for (const [key, colour] of Object.entries(colourOf)) {
    const swatch = document.createElement("span");
    swatch.className = "key";
    swatch.style.background = colour;
    element.append(swatch, key);
  }
}
