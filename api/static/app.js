// Gauntlet dashboard: plain JS, no dependencies, nothing loaded from elsewhere.
//
// The page polls the API every few seconds, and refreshes at once when an event arrives. The badge
// says which is true: "live" only while the event stream is open AND the API relays events from
// Redis (/readyz says redis "up"); "polling" when it refreshes on its timer; "stale" when the newest
// data is old (no successful refresh for a while, or /readyz says the newest commit is too old);
// "error" when the API or its database cannot be read.
"use strict";

import { STATUS_COLOURS, fmt, legend, lines, message, stacked } from "./charts.js";

const POLL_MS = 5000;       // refresh period without live events
const LIVE_POLL_MS = 30000; // a slow safety refresh while events flow
const STALE_AFTER_MS = 3 * POLL_MS;
const state = {
  hotkey: null, refreshTimer: null, pollTimer: null, streamOpen: false, redisUp: false,
  lastOk: null, failure: null, readiness: null, statusFilter: "",
};

const $ = (id) => document.getElementById(id);
const short = (hotkey) => (hotkey.length > 14 ? `${hotkey.slice(0, 6)}…${hotkey.slice(-6)}` : hotkey);

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

// /readyz answers 503 with a JSON body when not ready: that body is the information we want.
async function getReadiness() {
  const response = await fetch("/readyz", { headers: { Accept: "application/json" } });
  if (response.status !== 200 && response.status !== 503) throw new Error(`/readyz: HTTP ${response.status}`);
  return response.json();
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function emptyRow(tbody, columns, text) {
  const row = document.createElement("tr");
  const td = cell(row, text, "empty");
  td.colSpan = columns;
  tbody.replaceChildren(row);
}

function renderLeaderboard(body) {
  $("board-window").textContent = body.window === null ? "" : `after window ${body.window}`;
  const tbody = $("leaderboard").querySelector("tbody");
  if (body.window === null) { emptyRow(tbody, 10, "no windows yet"); return; }
  if (body.peers.length === 0) { emptyRow(tbody, 10, "no peers match"); return; }
  tbody.replaceChildren();
  for (const peer of body.peers) {
    const row = document.createElement("tr");
    row.dataset.hotkey = peer.hotkey;
    if (peer.hotkey === state.hotkey) row.classList.add("selected");
    cell(row, peer.rank);
    cell(row, peer.uid);
    cell(row, peer.label ? `${short(peer.hotkey)} (${peer.label})` : short(peer.hotkey)).title = peer.hotkey;
    for (const value of [peer.mu, peer.sigma, peer.ordinal, peer.bma, peer.final_score]) cell(row, fmt(value));
    cell(row, peer.last_status ?? "–", `st-${peer.last_status}`);
    cell(row, peer.last_evaluated_window ?? "–");
    row.addEventListener("click", () => selectPeer(peer.hotkey));
    tbody.appendChild(row);
  }
}

function renderTrends(trends) {
  const rows = trends.windows;
  const windows = rows.map((t) => t.window);
  const empty = "no windows yet";
  lines($("loss-chart"), windows, [{ name: "loss", values: rows.map((t) => t.heldout_loss) }], empty);
  legend($("status-legend"), stacked($("status-chart"), windows, rows.map((t) => t.statuses), STATUS_COLOURS, empty));
  legend($("timing-legend"), stacked($("timing-chart"), windows, rows.map((t) => t.timings), {}, empty));
}

function renderWeights(body) {
  const tbody = $("weights").querySelector("tbody");
  if (body.weight_sets.length === 0) { emptyRow(tbody, 5, "no weights set yet"); return; }
  tbody.replaceChildren();
  for (const ws of body.weight_sets) {
    const row = document.createElement("tr");
    cell(row, ws.window);
    cell(row, ws.block ?? "–");
    cell(row, ws.outcome, `outcome-${ws.outcome}`).title = ws.error ?? "";
    cell(row, ws.uids.length);
    const top = ws.uids.map((uid, i) => [uid, ws.weights[i]]).sort((a, b) => b[1] - a[1]).slice(0, 3);
    cell(row, top.map(([uid, w]) => `${uid}: ${fmt(w, 3)}`).join(", "));
    tbody.appendChild(row);
  }
}

async function selectPeer(hotkey) {
  state.hotkey = hotkey;
  for (const row of $("leaderboard").querySelectorAll("tbody tr")) {
    row.classList.toggle("selected", row.dataset.hotkey === hotkey);
  }
  // One peer's history failing (a hotkey no path can name, such as "a/b" or "..") must not fail
  // the page: the peer is selected by default when it ranks first.
  let points = [];
  let empty = "no history yet";
  try {
    points = (await getJson(`/v1/peers/${encodeURIComponent(hotkey)}/history?limit=500`)).points;
  } catch {
    empty = "history unavailable";
  }
  $("chart-peer").textContent = short(hotkey);
  lines($("chart"), points.map((p) => p.window), [
    { name: "score", values: points.map((p) => p.final_score), side: "left" },
    { name: "ordinal", values: points.map((p) => p.ordinal), side: "right" },
  ], empty);
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

// Who evaluated the window's peers: one row per worker (one "in-process" row without a pool).
function renderWorkers(detail) {
  $("workers-window").textContent = `window ${detail.summary.window}`;
  const tbody = $("workers").querySelector("tbody");
  if (detail.workers.length === 0) { emptyRow(tbody, 5, "no workers recorded for this window"); return; }
  tbody.replaceChildren();
  for (const w of detail.workers) {
    const row = document.createElement("tr");
    row.dataset.worker = w.name;
    cell(row, w.name);
    const where = [w.device, w.host].filter((part) => part).join(" @ ");
    cell(row, where || "–").title = w.pid === null ? "" : `pid ${w.pid}`;
    cell(row, w.peers);
    cell(row, w.seconds_per_peer === null ? "–" : fmt(w.seconds_per_peer, 3));
    cell(row, w.failures, w.failures > 0 ? "failures" : "");
    tbody.appendChild(row);
  }
}

function renderNoWindows() {
  $("workers-window").textContent = "";
  emptyRow($("workers").querySelector("tbody"), 5, "no windows yet");
  $("window-title").textContent = "no windows yet";
  $("selection").replaceChildren();
  emptyRow($("submissions").querySelector("tbody"), 4, "no windows yet");
  message($("chart"), "no windows yet");
}

function peersPath() {
  const filter = state.statusFilter ? `&status=${encodeURIComponent(state.statusFilter)}` : "";
  return `/v1/peers?limit=256${filter}`;
}

async function refresh() {
  try {
    const readiness = await getReadiness();
    state.readiness = readiness;
    state.redisUp = readiness.redis === "up";
    if (!readiness.database) throw new Error("the database cannot be reached");
    const [board, trends, weights] = await Promise.all([
      getJson(peersPath()), getJson("/v1/trends?windows=100"), getJson("/v1/weights?limit=20"),
    ]);
    renderLeaderboard(board);
    renderTrends(trends);
    renderWeights(weights);
    if (state.hotkey === null && board.peers.length > 0) state.hotkey = board.peers[0].hotkey;
    if (board.window === null) {
      renderNoWindows();
    } else {
      // The newest committed window: everything about it is decided (an open one is still empty).
      const jobs = [getJson(`/v1/windows/${board.window}`).then((d) => { renderWindow(d); renderWorkers(d); })];
      if (state.hotkey !== null) jobs.push(selectPeer(state.hotkey));
      await Promise.all(jobs);
    }
    state.lastOk = Date.now();
    state.failure = null;
    $("status").textContent = board.window === null
      ? `no windows yet · checked ${new Date().toLocaleTimeString()}`
      : `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    state.failure = err.message;
    $("status").textContent = `could not load: ${err.message}`;
  }
  showBadge();
  schedulePoll();
}

// The badge's one source of truth: what actually happened, not what was hoped for.
function badgeState() {
  if (state.failure !== null) return ["error", `error: ${state.failure}`];
  if (state.lastOk === null) return ["polling", "loading"];
  if (Date.now() - state.lastOk > STALE_AFTER_MS) return ["stale", "stale: no fresh data"];
  if (state.readiness && state.readiness.status === "stale") return ["stale", `stale: ${state.readiness.reason}`];
  if (state.streamOpen && state.redisUp) return ["live", "live"];
  return ["polling", `polling every ${POLL_MS / 1000} s`];
}

function showBadge() {
  const [name, title] = badgeState();
  const badge = $("live");
  badge.dataset.state = name;
  badge.className = `live state-${name}`;
  badge.textContent = name;
  badge.title = title;
}

function schedulePoll() {
  clearTimeout(state.pollTimer);
  const live = state.streamOpen && state.redisUp;
  state.pollTimer = setTimeout(refresh, live ? LIVE_POLL_MS : POLL_MS);
}

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refresh, 250);  // events come in bursts: refresh once per burst
}

function listen() {
  const source = new EventSource("/v1/events");
  source.onopen = () => { state.streamOpen = true; showBadge(); };
  source.onerror = () => { state.streamOpen = false; showBadge(); schedulePoll(); };
  for (const type of ["window_opened", "peer_scored", "window_committed", "weights_set"]) {
    source.addEventListener(type, scheduleRefresh);
  }
}

$("status-filter").addEventListener("change", (e) => { state.statusFilter = e.target.value; refresh(); });
setInterval(showBadge, 1000);  // turns the badge stale when refreshes stop succeeding
refresh();
listen();
