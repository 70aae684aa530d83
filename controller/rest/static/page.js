// The Sparkpoint status page: polls the controller's REST API every two
// seconds and redraws in place. Plain DOM and SVG, no library; every value
// from the API goes in as text, never as markup.
"use strict";

const REFRESH_MS = 2000;
const COLORS = ["#2f6fdd", "#e0762b", "#2a9d8f", "#9b5de5", "#d1495b", "#6c8a1f", "#0b7285", "#b5838d"];
const SVG = "http://www.w3.org/2000/svg";
const history = { since: 0, window: 600, workers: {} };   // worker -> {progress: [], checkpoints: []}

// -- small helpers ---------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") node.textContent = value;
    else if (key === "class" && !node.namespaceURI.endsWith("svg")) node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function number(value, digits = 0, minDigits = digits) {
  return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: minDigits });
}

// Input lag: bytes of the log, records of Kafka (the consumer lag of each partition).
function inputLag(lagBytes, kafkaLag) {
  const records = Object.values(kafkaLag).reduce((sum, n) => sum + n, 0);
  if (!Object.keys(kafkaLag).length) return bytes(lagBytes);
  const text = `${number(records)} record${records === 1 ? "" : "s"}`;
  return lagBytes ? `${bytes(lagBytes)} · ${text}` : text;
}

function bytes(value) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(value), i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${number(v, i === 0 ? 0 : 1)} ${units[i]}`;
}

function age(seconds) {
  if (seconds < 1) return "just now";
  if (seconds < 90) return `${number(seconds, 0)} s ago`;
  if (seconds < 5400) return `${number(seconds / 60, 0)} min ago`;
  return `${number(seconds / 3600, 1)} h ago`;
}

function duration(seconds) {
  return seconds < 1 ? `${number(seconds * 1000, 0)} ms` : `${number(seconds, seconds < 10 ? 1 : 0)} s`;
}

function time(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleString("en-GB", { hour12: false });
}

function pill(state) {
  return el("span", { class: "pill", "data-state": state, text: state });
}

function fill(tbody, rows, columns, empty) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "empty", colspan: columns, text: empty }))]));
}

function workerColor(workerId, workers) {
  const index = workers.indexOf(workerId);
  return COLORS[(index < 0 ? 0 : index) % COLORS.length];
}

// -- the API token -----------------------------------------------------------------------
// The page itself is open; its data needs the REST token (SP_API_TOKEN_FILE). The page
// asks for it when the controller refuses the page's calls, and keeps it for this tab
// only (session storage): never in an address, so never in the browser's history.
const TOKEN_KEY = "sparkpoint-api-token";

function askForToken(refused) {
  const form = document.getElementById("token-form");
  if (!form.hidden) return;
  if (refused) sessionStorage.removeItem(TOKEN_KEY);
  form.hidden = false;
  document.getElementById("token-input").focus();
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token-input");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  document.getElementById("token-form").hidden = true;
  refreshNow();
});

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

class Unauthorized extends Error {}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json", ...authHeaders() }, cache: "no-store" });
  if (response.status === 401) throw new Unauthorized(path);
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

// -- header ----------------------------------------------------------------------------
function renderHeader(status, savepoints) {
  const state = document.getElementById("pipeline-state");
  state.textContent = status.state;
  state.dataset.state = status.state;
  document.getElementById("fact-workers").textContent = `${status.workers_registered} / ${status.workers_expected}`;
  const ready = status.standbys.filter((s) => s.state === "ready").length;
  document.getElementById("fact-standbys").textContent =
    status.standbys.length ? `${status.standbys.length} · ${ready} ready` : "0";
  document.getElementById("fact-rate").textContent = number(status.rows_per_second, 1);
  document.getElementById("fact-lag").textContent =
    inputLag(status.lag_bytes, Object.assign({}, ...status.workers.map((w) => w.kafka_lag)));
  const newest = savepoints.length ? savepoints[savepoints.length - 1] : null;
  document.getElementById("fact-savepoints").textContent = newest ? `${savepoints.length} · ${newest.state}` : "0";
}

// -- the pipeline graph ------------------------------------------------------------------
// Rows each node dropped behind its watermark, over every worker's queries.
function lateRows(status) {
  const late = new Map();
  for (const q of status.workers.flatMap((w) => w.queries)) {
    for (const [node, rows] of Object.entries(q.late_rows || {})) late.set(node, (late.get(node) || 0) + rows);
  }
  return late;
}

function renderGraph(pipeline, late) {
  const box = document.getElementById("graph");
  document.getElementById("fingerprint").textContent = pipeline.fingerprint ? `fingerprint ${pipeline.fingerprint}` : "";
  if (!pipeline.nodes.length) {
    box.replaceChildren(el("p", { class: "muted", text: "No worker has registered yet." }));
    return;
  }
  // Columns by depth: a node sits one column right of its deepest input.
  const byName = new Map(pipeline.nodes.map((n) => [n.name, n]));
  const depth = new Map();
  const depthOf = (node) => {
    if (!depth.has(node.name)) {
      depth.set(node.name, 0);
      const inputs = node.inputs.filter((name) => byName.has(name));
      depth.set(node.name, inputs.length ? 1 + Math.max(...inputs.map((name) => depthOf(byName.get(name)))) : 0);
    }
    return depth.get(node.name);
  };
  const columns = [];
  for (const node of pipeline.nodes) (columns[depthOf(node)] ||= []).push(node);
  const W = 168, H = 50, GAP_X = 64, GAP_Y = 18, PAD = 10;
  const rows = Math.max(...columns.map((c) => c.length));
  const width = PAD * 2 + columns.length * W + (columns.length - 1) * GAP_X;
  const height = PAD * 2 + rows * H + (rows - 1) * GAP_Y;
  const at = new Map();
  columns.forEach((column, c) => column.forEach((node, r) => {
    const offset = (rows - column.length) * (H + GAP_Y) / 2;
    at.set(node.name, { x: PAD + c * (W + GAP_X), y: PAD + offset + r * (H + GAP_Y) });
  }));
  const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                              "aria-label": "pipeline graph" });
  for (const node of pipeline.nodes) {
    for (const input of node.inputs) {
      if (!at.has(input)) continue;
      const a = at.get(input), b = at.get(node.name);
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mid = (x1 + x2) / 2;
      svg.append(el("svg:path", { class: "edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2 - 6},${y2}` }));
      svg.append(el("svg:path", { d: `M${x2 - 7},${y2 - 4} L${x2},${y2} L${x2 - 7},${y2 + 4}`, fill: "#9aa6ba" }));
    }
  }
  for (const node of pipeline.nodes) {
    const { x, y } = at.get(node.name);
    const classes = ["node", node.stateful && "stateful", node.finished && "finished"].filter(Boolean).join(" ");
    const dropped = late.get(node.name) ? ` · ${number(late.get(node.name))} late` : "";
    const badge = node.finished ? "FINISHED ✓" : node.stateful ? `STATE${dropped}` : "";
    const title = node.name.length > 22 ? `${node.name.slice(0, 21)}…` : node.name;
    svg.append(el("svg:g", { class: classes, "data-node": node.name, transform: `translate(${x},${y})` },
      el("svg:title", { text: `${node.name} (${node.kind})` }),
      el("svg:rect", { width: W, height: H, rx: 8 }),
      el("svg:text", { class: "title", x: 12, y: 21, text: title }),
      el("svg:text", { class: "kind", x: 12, y: 38, text: node.kind }),
      badge ? el("svg:text", { class: "badge", x: W - 10, y: 38, "text-anchor": "end", text: badge }) : null));
  }
  box.replaceChildren(svg);
}

// -- tables ------------------------------------------------------------------------------
function renderWorkers(status) {
  const rows = status.workers.map((w) => {
    const checkpoint = w.last_checkpoint
      ? el("td", {}, `#${w.last_checkpoint.checkpoint_id} · ${age(w.last_checkpoint.age_s)}`,
           el("span", { class: "sub", text: `${bytes(w.last_checkpoint.size_bytes)}, took ${duration(w.last_checkpoint.duration_ms / 1000)}` }))
      : el("td", { class: "muted", text: "none yet" });
    const r = w.recovery;
    let recovery;
    if (r.active) {
      recovery = el("td", { class: "recovery" }, el("span", { class: "bar" }, el("span", { style: `width:${r.caught_up_pct}%` })),
                    `${number(r.caught_up_pct, 1)} %`,
                    el("span", { class: "sub", text: `replaying from checkpoint #${r.restored_checkpoint_id}` }));
    } else if (r.restored_checkpoint_id) {
      recovery = el("td", { class: "recovery", text: `restored #${r.restored_checkpoint_id}` },
                    el("span", { class: "sub", text: r.duration_s ? `caught up in ${duration(r.duration_s)}` : "" }));
    } else {
      recovery = el("td", { class: "recovery muted", text: "–" });
    }
    const rs = w.restarts;
    const restarted = rs.count ? ` · ${rs.count} restart${rs.count === 1 ? "" : "s"}` : "";
    const errors = [w.checkpoint_error, ...w.queries.filter((q) => q.error).map((q) => `${q.name}: ${q.error}`),
                    rs.last_error && `last restart (${rs.same_in_a_row}× in a row): ${rs.last_error}`]
      .filter(Boolean);
    return el("tr", { "data-worker": w.worker_id, "data-state": w.state },
      el("td", {}, el("span", { class: "name", text: w.worker_id }),
         el("span", { class: "sub", text: `index ${w.worker_index} · ${w.registrations} registration${w.registrations === 1 ? "" : "s"}${restarted}` }),
         ...(w.waiting_for ? [el("span", { class: "waiting", text: `waiting for ${w.waiting_for}` })] : []),
         ...errors.map((e) => el("span", { class: "error", text: e }))),
      el("td", { class: "state" }, pill(w.state)),
      el("td", { class: "num batch", text: w.batch_id < 0 ? "–" : number(w.batch_id) }),
      el("td", { class: "num", text: number(w.rows_per_second, 1) }),
      el("td", { class: "num lag", text: inputLag(w.lag_bytes, w.kafka_lag) },
         ...Object.entries(w.kafka_lag).map(([partition, records]) =>
           el("span", { class: "sub", "data-partition": partition, text: `${partition} ${number(records)}` }))),
      checkpoint,
      recovery,
      el("td", { class: "num", text: age(w.heartbeat_age_s) }));
  });
  fill(document.querySelector("#workers tbody"), rows, 8, "No worker has registered yet.");
}

function renderSinks(status) {
  const rows = status.workers.flatMap((w) => w.sinks.map((s) => {
    const state = el("td", {}, pill(s.state));
    if (s.state === "waiting") {
      state.append(el("span", { class: "sub", text: `for ${duration(s.waiting_s)}, retry in ${duration(s.next_retry_in_s)}` }),
                   el("span", { class: "error", text: s.error }));
    }
    return el("tr", { "data-sink": `${w.worker_id}/${s.name}` },
      el("td", { text: w.worker_id }),
      el("td", { class: "name", text: s.name }),
      el("td", {}, s.target, el("span", { class: "sub", text: s.contract })),
      state,
      el("td", { text: s.published_batch_id < 0 ? "nothing yet" : `batch ${number(s.published_batch_id)}` },
         el("span", { class: "sub", text: s.published_checkpoint_id ? `checkpoint #${s.published_checkpoint_id}` : "" })),
      el("td", { class: "num", text: number(s.pending_batches) }),
      el("td", { class: "num", text: `${number(s.lag_batches)} batches` }),
      el("td", { class: "num", text: number(s.retries) }));
  }));
  fill(document.querySelector("#sinks tbody"), rows, 8, "No sink stages its output yet.");
}

function renderSavepoints(savepoints) {
  const rows = savepoints.slice().reverse().map((s) => el("tr", { "data-savepoint": s.id },
    el("td", { class: "name", text: s.id }),
    el("td", { text: s.label || "–" }),
    el("td", {}, pill(s.state), s.failure ? el("span", { class: "error", text: s.failure }) : null),
    el("td", { text: time(s.created_at) }),
    el("td", { text: Object.entries(s.checkpoints).map(([index, id]) => `${index}:${id}`).join("  ") || "–" })));
  fill(document.querySelector("#savepoints tbody"), rows, 5, "No savepoints. Take one with: sparkpoint savepoint create LABEL");
}

// -- charts --------------------------------------------------------------------------------
function niceMax(value) {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((m) => m >= value);
}

function tickStep(span) {
  return [10, 15, 30, 60, 120, 300, 600].find((step) => span / step <= 6) || 600;
}

function ago(seconds) {
  return seconds >= 60 ? `-${number(seconds / 60, seconds % 60 ? 1 : 0)} min` : `-${number(seconds)} s`;
}

// Lines (or dots) over time. The time axis ends now and starts at the oldest
// sample, at least a minute and at most the history's window back.
function lineChart(svg, series, now, format, dots) {
  const W = 560, H = 220, L = 56, R = 14, T = 12, B = 40;
  const oldest = Math.min(now, ...series.flatMap((s) => s.points.map((p) => p[0])));
  const span = Math.min(history.window, Math.max(60, now - oldest));
  const start = now - span;
  const values = series.flatMap((s) => s.points.filter((p) => p[0] >= start).map((p) => p[1]));
  const top = niceMax(Math.max(0, ...values) * 1.1);
  const x = (t) => L + (t - start) / span * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const parts = [];
  for (let i = 0; i <= 4; i++) {
    const v = top * i / 4;
    parts.push(el("svg:line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }),
               el("svg:text", { class: "axis", x: L - 6, y: y(v) + 3, "text-anchor": "end", text: format(v) }));
  }
  const step = tickStep(span);
  for (let back = 0; back <= span + 0.001; back += step) {
    parts.push(el("svg:text", { class: "axis", x: x(now - back), y: H - B + 14, "text-anchor": back === 0 ? "end" : "middle",
                                text: back === 0 ? "now" : ago(back) }));
  }
  if (!values.length) parts.push(el("svg:text", { class: "nodata", x: (L + W - R) / 2, y: H / 2, "text-anchor": "middle", text: "no data yet" }));
  series.forEach((s, i) => {
    const points = s.points.filter((p) => p[0] >= start);
    if (points.length > 1) {
      parts.push(el("svg:polyline", { class: "series", stroke: s.color,
                                      points: points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ") }));
    }
    if (dots || points.length === 1) {
      for (const p of points) parts.push(el("svg:circle", { cx: x(p[0]), cy: y(p[1]), r: 3, fill: s.color }));
    }
    const lx = L + i * 110;
    parts.push(el("svg:rect", { x: lx, y: H - 14, width: 10, height: 10, rx: 2, fill: s.color }),
               el("svg:text", { class: "legend-text", x: lx + 14, y: H - 5, text: s.name }));
  });
  svg.replaceChildren(...parts);
}

async function refreshHistory() {
  const answer = await getJson(`/history?since=${history.since}`);
  history.window = answer.window_s;
  for (const [worker, samples] of Object.entries(answer.workers)) {
    const kept = (history.workers[worker] ||= { progress: [], checkpoints: [] });
    kept.progress.push(...samples.progress);
    kept.checkpoints.push(...samples.checkpoints);
    for (const key of ["progress", "checkpoints"]) {
      kept[key] = kept[key].filter((s) => s.at >= answer.now - history.window);
    }
  }
  history.since = answer.now;
  return answer.now;
}

function renderCharts(status, now) {
  const workers = status.workers.map((w) => w.worker_id);
  const series = (key, pick) => workers.map((w) => ({
    name: w, color: workerColor(w, workers),
    points: ((history.workers[w] || {})[key] || []).map((s) => [s.at, pick(s)]),
  }));
  lineChart(document.getElementById("chart-rate"), series("progress", (s) => s.rows_per_second), now,
            (v) => number(v, 2, 0), false);
  lineChart(document.getElementById("chart-checkpoints"), series("checkpoints", (s) => s.duration_s), now,
            (v) => duration(v), true);
}

// -- the loop -------------------------------------------------------------------------------
async function refresh() {
  const banner = document.getElementById("offline");
  try {
    const [status, pipeline, savepoints] = await Promise.all([getJson("/status"), getJson("/pipeline"), getJson("/savepoints")]);
    const now = await refreshHistory();
    renderHeader(status, savepoints);
    renderGraph(pipeline, lateRows(status));
    renderWorkers(status);
    renderSinks(status);
    renderSavepoints(savepoints);
    renderCharts(status, now);
    banner.hidden = true;
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString("en-GB", { hour12: false })}`;
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  } catch (error) {
    if (error instanceof Unauthorized) {
      const refused = Boolean(sessionStorage.getItem(TOKEN_KEY));
      banner.textContent = refused
        ? "The controller refused that token: paste the one in its SP_API_TOKEN_FILE (make up's: .secrets/api-token)."
        : "The controller needs its API token: paste the one in its SP_API_TOKEN_FILE (make up's: .secrets/api-token).";
      askForToken(refused);
    } else {
      banner.textContent = `Cannot reach the controller (${error.message}); retrying every ${REFRESH_MS / 1000} s.`;
    }
    banner.hidden = false;
  } finally {
    clearTimeout(scheduled);          // one timer, even after a refresh the token form started early
    scheduled = setTimeout(refresh, REFRESH_MS);
  }
}

let scheduled = null;
function refreshNow() {
  clearTimeout(scheduled);
  refresh();
}

refresh();
