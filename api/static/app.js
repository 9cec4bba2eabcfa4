// Gauntlet dashboard: plain JS, no dependencies, nothing loaded from elsewhere.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const CHART = { width: 640, height: 280, left: 56, right: 56, top: 16, bottom: 32 };
const state = { hotkey: null, refreshTimer: null };

const $ = (id) => document.getElementById(id);
const fmt = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
const short = (hotkey) => (hotkey.length > 14 ? `${hotkey.slice(0, 6)}…${hotkey.slice(-6)}` : hotkey);

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function renderLeaderboard(body) {
  $("board-window").textContent = body.window === null ? "" : `after window ${body.window}`;
  const tbody = $("leaderboard").querySelector("tbody");
  tbody.replaceChildren();
  for (const peer of body.peers) {
    const row = document.createElement("tr");
    row.dataset.hotkey = peer.hotkey;
    if (peer.hotkey === state.hotkey) row.classList.add("selected");
    cell(row, peer.rank);
    cell(row, peer.uid);
    cell(row, short(peer.hotkey)).title = peer.hotkey;
    for (const value of [peer.mu, peer.sigma, peer.ordinal, peer.bma, peer.final_score]) cell(row, fmt(value));
    cell(row, peer.last_status ?? "–", `st-${peer.last_status}`);
    cell(row, peer.last_evaluated_window ?? "–");
    row.addEventListener("click", () => selectPeer(peer.hotkey));
    tbody.appendChild(row);
  }
}

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
  if (text !== undefined) el.textContent = text;
  return el;
}

function extent(values) {
  let min = Math.min(...values);
  let max = Math.max(...values);
  if (min === max) { min -= 1; max += 1; }
  return { min, max };
}

// A linear map from the extent onto pixels [from, to].
const linear = (e, from, to) => (v) => from + ((v - e.min) / (e.max - e.min)) * (to - from);

// Two series on one time axis, each with its own vertical scale (left: score, right: ordinal).
function drawChart(points) {
  const svg = $("chart");
  svg.replaceChildren();
  const { width, height, left, right, top, bottom } = CHART;
  if (points.length === 0) {
    svg.appendChild(svgEl("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, "no history yet"));
    return;
  }
  const xs = extent(points.map((p) => p.window));
  const xAt = linear(xs, left, width - right);
  const series = [
    { name: "score", values: points.map((p) => p.final_score), side: "left" },
    { name: "ordinal", values: points.map((p) => p.ordinal), side: "right" },
  ];
  svg.appendChild(svgEl("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }));
  for (const w of [xs.min, xs.max]) {
    svg.appendChild(svgEl("text", { x: xAt(w), y: height - 10, "text-anchor": "middle" }, `w${Math.round(w)}`));
  }
  for (const s of series) {
    const ys = extent(s.values);
    const yAt = linear(ys, height - bottom, top);
    const xLabel = s.side === "left" ? left - 6 : width - right + 6;
    const anchor = s.side === "left" ? "end" : "start";
    for (const v of [ys.min, ys.max]) {
      svg.appendChild(svgEl("text", { x: xLabel, y: yAt(v) + 4, "text-anchor": anchor }, fmt(v, 2)));
    }
    const d = points.map((p, i) => `${i === 0 ? "M" : "L"}${xAt(p.window).toFixed(1)},${yAt(s.values[i]).toFixed(1)}`);
    svg.appendChild(svgEl("path", { class: `series ${s.name}`, d: d.join(" ") }));
  }
}

async function selectPeer(hotkey) {
  state.hotkey = hotkey;
  for (const row of $("leaderboard").querySelectorAll("tbody tr")) {
    row.classList.toggle("selected", row.dataset.hotkey === hotkey);
  }
  const history = await getJson(`/v1/peers/${encodeURIComponent(hotkey)}/history?limit=500`);
  $("chart-peer").textContent = short(hotkey);
  drawChart(history.points);
}

function renderWindow(detail) {
  const summary = detail.summary;
  $("window-title").textContent = `window ${summary.window} (${summary.state})`;
  const list = $("selection");
  list.replaceChildren();
  for (const sel of detail.selection) {
    const item = document.createElement("li");
    item.textContent = `${sel.role} #${sel.rank}: uid ${sel.uid} ${short(sel.hotkey)}`;
    list.appendChild(item);
  }
  const tbody = $("submissions").querySelector("tbody");
  tbody.replaceChildren();
  for (const sub of detail.submissions) {
    const row = document.createElement("tr");
    cell(row, sub.uid);
    cell(row, short(sub.hotkey)).title = sub.hotkey;
    cell(row, sub.status, `st-${sub.status}`);
    cell(row, sub.reason ?? "");
    tbody.appendChild(row);
  }
}

async function refresh() {
  try {
    const board = await getJson("/v1/peers?limit=256");
    renderLeaderboard(board);
    if (state.hotkey === null && board.peers.length > 0) state.hotkey = board.peers[0].hotkey;
    // The newest committed window: everything about it is decided (an open one is still empty).
    const jobs = board.window === null ? [] : [getJson(`/v1/windows/${board.window}`).then(renderWindow)];
    if (state.hotkey !== null) jobs.push(selectPeer(state.hotkey));
    await Promise.all(jobs);
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    $("status").textContent = `could not load: ${err.message}`;
  }
}

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refresh, 250);  // events come in bursts: refresh once per burst
}

function listen() {
  const source = new EventSource("/v1/events");
  const live = $("live");
  source.onopen = () => { live.textContent = "live"; live.className = "live on"; };
  source.onerror = () => { live.textContent = "reconnecting"; live.className = "live off"; };
  for (const type of ["window_opened", "peer_scored", "window_committed", "weights_set"]) {
    source.addEventListener(type, scheduleRefresh);
  }
}

refresh();
listen();
