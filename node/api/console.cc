#include "node/api/console.h"

#include <string_view>

namespace ringlimit::node {

namespace http = boost::beast::http;

namespace {

// The whole page. Every value from the API is put in the DOM with textContent or setAttribute, never as
// markup. Hooks the tests read: #members tr[data-member][data-state], #ring path.arc[data-owner],
// #owner, #preference li, #states tr, #handoffs .handoff, #events li, #status.
constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ringlimit console</title>
<style>
  :root { --bg:#0f1419; --panel:#182028; --line:#2a3540; --text:#d8e0e8; --dim:#8a98a8; --ok:#4cc38a;
          --warn:#e0b341; --bad:#e5534b; --accent:#58a6ff; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.4 system-ui, sans-serif; background:var(--bg); color:var(--text); }
  header { display:flex; gap:16px; align-items:baseline; padding:12px 20px; border-bottom:1px solid var(--line); }
  header h1 { margin:0; font-size:18px; }
  header .dim { color:var(--dim); }
  #status.live { color:var(--ok); } #status.down { color:var(--bad); }
  main { display:grid; grid-template-columns: 380px 1fr; gap:16px; padding:16px 20px; }
  section { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:12px 14px; overflow-x:auto; }
  section h2 { margin:0 0 8px; font-size:13px; text-transform:uppercase; letter-spacing:.06em; color:var(--dim); }
  .wide { grid-column: 1 / -1; }
  .stack { display:flex; flex-direction:column; gap:16px; }
  table { width:100%; border-collapse:collapse; font-variant-numeric: tabular-nums; }
  th, td { text-align:left; padding:4px 6px; border-bottom:1px solid var(--line); white-space:nowrap; font-size:13px; }
  th { color:var(--dim); font-weight:500; }
  .state { padding:1px 8px; border-radius:10px; font-size:12px; }
  .state.alive { background:#173d2a; color:var(--ok); } .state.suspect { background:#4a3b12; color:var(--warn); }
  .state.dead, .state.left { background:#4a1d1b; color:var(--bad); }
  .state.joining, .state.leaving { background:#1c3350; color:var(--accent); }
  .swatch { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:6px; }
  #legend div { margin:2px 0; }
  .handoff { margin:6px 0; }
  .bar { height:8px; background:var(--line); border-radius:4px; overflow:hidden; margin-top:3px; }
  .bar > div { height:100%; background:var(--accent); }
  #events { margin:0; padding-left:18px; max-height:220px; overflow:auto; }
  #events li { color:var(--dim); } #events li b { color:var(--text); font-weight:500; }
  form { display:flex; gap:8px; margin-bottom:8px; }
  input { flex:1; background:var(--bg); color:var(--text); border:1px solid var(--line); border-radius:6px; padding:6px 8px; }
  button { background:var(--accent); color:#06121f; border:0; border-radius:6px; padding:6px 12px; cursor:pointer; }
  .spark { vertical-align:middle; }
  .none { color:var(--dim); }
</style>
</head>
<body>
<header>
  <h1>ringlimit</h1>
  <span class="dim">node <b id="node">?</b></span>
  <span class="dim">ring <b id="fingerprint">-</b></span>
  <span id="status">connecting</span>
</header>
<main>
  <section class="wide">
    <h2>Members</h2>
    <table id="members">
      <thead><tr><th>id</th><th>state</th><th>http / peer</th><th>incarnation</th><th>share</th>
        <th>clock offset</th><th>decisions/s</th><th>allowed</th><th>denied</th><th>p99</th><th>last minutes</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section>
    <h2>Ring</h2>
    <svg id="ring" viewBox="-110 -110 220 220" width="340" height="340" role="img" aria-label="token ring"></svg>
    <div id="legend"></div>
  </section>
  <div class="stack">
    <section>
      <h2>Handoffs and re-replication</h2>
      <div id="handoffs"><span class="none">none in progress</span></div>
    </section>
    <section>
      <h2>Membership events</h2>
      <ol id="events" reversed></ol>
    </section>
  </div>
  <section class="wide">
    <h2>Look up a key</h2>
    <form id="lookup"><input id="key" name="key" placeholder="key, e.g. user:42" autocomplete="off"><button>Look up</button></form>
    <div id="placement"></div>
  </section>
</main>
<script>
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#58a6ff", "#4cc38a", "#e0b341", "#d2a8ff", "#ff7b72", "#39c5cf", "#f0883e", "#a5d6ff",
                 "#7ee787", "#ffa198", "#e2c5ff", "#79c0ff"];
const HISTORY = 180;  // samples kept per member for the sparkline (3 minutes at 1 s)
const colours = new Map();
const previous = new Map();  // member id -> {at, allowed, denied, counts}
const rates = new Map();     // member id -> [decisions/s ...]
let lastStates = null;
const doneBefore = new Map();  // member id -> its last handoffs_done
let fingerprint = "";
let lookedUp = null;

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function colourOf(id) {
  if (!colours.has(id)) colours.set(id, PALETTE[colours.size % PALETTE.length]);
  return colours.get(id);
}
async function getJson(url) {
  const response = await fetch(url, {cache: "no-store"});
  if (!response.ok) throw new Error(url + ": HTTP " + response.status);
  return response.json();
}
function point(fraction, radius) {
  const angle = fraction * 2 * Math.PI - Math.PI / 2;
  return [radius * Math.cos(angle), radius * Math.sin(angle)];
}
function arcPath(from, to, outer, inner) {
  const large = to - from > 0.5 ? 1 : 0;
  const [x1, y1] = point(from, outer), [x2, y2] = point(to, outer);
  const [x3, y3] = point(to, inner), [x4, y4] = point(from, inner);
  return `M${x1} ${y1}A${outer} ${outer} 0 ${large} 1 ${x2} ${y2}L${x3} ${y3}A${inner} ${inner} 0 ${large} 0 ${x4} ${y4}Z`;
}

function drawRing(arcs, members) {
  const ring = document.getElementById("ring");
  ring.replaceChildren();
  ring.appendChild(svg("circle", {r: 100, fill: "none", stroke: "#2a3540"}));
  for (const arc of arcs) {
    const path = svg("path", {d: arcPath(arc.from, Math.max(arc.to, arc.from + 0.0005), 100, 72),
                              fill: colourOf(arc.owner), class: "arc", "data-owner": arc.owner});
    const title = svg("title");
    title.textContent = arc.owner;
    path.appendChild(title);
    ring.appendChild(path);
  }
  const legend = document.getElementById("legend");
  legend.replaceChildren();
  for (const m of members.filter(m => m.share > 0)) {
    const row = el("div");
    row.appendChild(el("span", {class: "swatch", style: "background:" + colourOf(m.id)}));
    row.appendChild(document.createTextNode(m.id + " \u2014 " + (100 * m.share).toFixed(1) + "%"));
    legend.appendChild(row);
  }
  if (lookedUp) markKey(lookedUp);
}

function markKey(placement) {
  const ring = document.getElementById("ring");
  for (const old of ring.querySelectorAll(".key")) old.remove();
  const fraction = Number(BigInt(placement.token)) / 18446744073709551616;
  const [x1, y1] = point(fraction, 60), [x2, y2] = point(fraction, 108);
  ring.appendChild(svg("line", {x1, y1, x2, y2, stroke: "#ffffff", "stroke-width": 2, class: "key"}));
  const label = svg("text", {x: 0, y: 4, "text-anchor": "middle", fill: "#d8e0e8", "font-size": 9, class: "key"});
  label.textContent = placement.key.length > 18 ? placement.key.slice(0, 17) + "\u2026" : placement.key;
  ring.appendChild(label);
  placement.preference_list.forEach((m, i) => {
    const [cx, cy] = point(fraction, 64 - 8 * (i + 1));
    ring.appendChild(svg("circle", {cx, cy, r: 3, fill: colourOf(m.id), class: "key"}));
  });
}

function p99(deltas, bounds) {
  const total = deltas.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const target = Math.ceil(total * 0.99);
  let seen = 0;
  for (let i = 0; i < deltas.length; i++) {
    seen += deltas[i];
    if (seen >= target) return i < bounds.length ? "\u2264 " + bounds[i] + " ms" : "> " + bounds[bounds.length - 1] + " ms";
  }
  return null;
}

function sparkline(values) {
  const s = svg("svg", {class: "spark", width: 120, height: 22, viewBox: "0 0 120 22"});
  const max = Math.max(1, ...values);
  const points = values.map((v, i) => `${(i * 120 / (HISTORY - 1)).toFixed(1)},${(21 - 20 * v / max).toFixed(1)}`);
  s.appendChild(svg("polyline", {points: points.join(" "), fill: "none", stroke: "#58a6ff", "stroke-width": 1.5}));
  return s;
}

async function memberStats(m, now) {
  const cells = {rate: "\u2013", allowed: "\u2013", denied: "\u2013", p99: "\u2013"};
  if (m.state !== "alive" && m.state !== "leaving") return cells;
  let stats;
  try {
    stats = await getJson("http://" + m.http_address + "/v1/stats");
  } catch (e) {
    return cells;
  }
  const before = previous.get(m.id);
  previous.set(m.id, {at: now, allowed: stats.decisions.allowed, denied: stats.decisions.denied,
                      counts: stats.latency.counts});
  cells.allowed = stats.decisions.allowed.toLocaleString("en");
  cells.denied = stats.decisions.denied.toLocaleString("en");
  const series = rates.get(m.id) || [];
  if (before) {
    const seconds = Math.max(0.001, (now - before.at) / 1000);
    const decided = stats.decisions.allowed + stats.decisions.denied - before.allowed - before.denied;
    const rate = Math.max(0, decided / seconds);
    cells.rate = rate.toFixed(rate < 10 ? 1 : 0);
    series.push(rate);
    const deltas = stats.latency.counts.map((c, i) => Math.max(0, c - (before.counts[i] || 0)));
    cells.p99 = p99(deltas, stats.latency.bounds_ms) || "\u2013";
  }
  while (series.length > HISTORY) series.shift();
  rates.set(m.id, series);
  return cells;
}

async function renderMembers(view, now) {
  const rows = await Promise.all(view.members.map(async m => [m, await memberStats(m, now)]));
  const body = document.querySelector("#members tbody");
  body.replaceChildren();
  for (const [m, cells] of rows) {
    const tr = el("tr", {"data-member": m.id, "data-state": m.state});
    const id = el("td");
    id.appendChild(el("span", {class: "swatch", style: "background:" + colourOf(m.id)}));
    id.appendChild(document.createTextNode(m.id + (m.id === view.node_id ? " (this node)" : "")));
    tr.appendChild(id);
    const state = el("td");
    state.appendChild(el("span", {class: "state " + m.state}, m.state));
    tr.appendChild(state);
    tr.appendChild(el("td", {}, m.http_address + " / " + m.peer_address));
    tr.appendChild(el("td", {}, String(m.incarnation)));
    tr.appendChild(el("td", {}, (100 * m.share).toFixed(1) + "%"));
    tr.appendChild(el("td", {}, m.clock_offset_ms === undefined ? "\u2013" : m.clock_offset_ms.toFixed(2) + " ms"));
    tr.appendChild(el("td", {}, cells.rate));
    tr.appendChild(el("td", {}, cells.allowed));
    tr.appendChild(el("td", {}, cells.denied));
    tr.appendChild(el("td", {}, cells.p99));
    const trend = el("td");
    trend.appendChild(sparkline(rates.get(m.id) || []));
    tr.appendChild(trend);
    body.appendChild(tr);
  }
}

function noteEvent(id, text) {
  const events = document.getElementById("events");
  const li = el("li");
  li.appendChild(document.createTextNode(new Date().toISOString().slice(11, 19) + " "));
  li.appendChild(el("b", {}, id));
  li.appendChild(document.createTextNode(" " + text));
  events.prepend(li);
  while (events.children.length > 100) events.lastChild.remove();
}

function noteEvents(view) {
  const states = new Map(view.members.map(m => [m.id, m.state]));
  const add = noteEvent;
  if (lastStates === null) {
    for (const [id, state] of states) add(id, "is " + state);
  } else {
    for (const [id, state] of states) {
      if (!lastStates.has(id)) add(id, "appeared, " + state);
      else if (lastStates.get(id) !== state) add(id, lastStates.get(id) + " \u2192 " + state);
    }
    for (const id of lastStates.keys()) if (!states.has(id)) add(id, "forgotten");
  }
  lastStates = states;
}

async function renderHandoffs(view) {
  const views = await Promise.all(view.members.filter(m => m.state === "alive" || m.state === "leaving").map(async m => {
    if (m.id === view.node_id) return [m.id, view];
    try { return [m.id, await getJson("http://" + m.http_address + "/v1/cluster")]; } catch (e) { return [m.id, null]; }
  }));
  const box = document.getElementById("handoffs");
  box.replaceChildren();
  let completed = 0, keys = 0, rereplicated = 0;
  for (const [id, v] of views) {
    if (!v || !v.handoffs_done) continue;
    const done = v.handoffs_done;
    completed += done.completed;
    keys += done.keys;
    rereplicated += done.rereplicated_keys;
    const before = doneBefore.get(id);
    if (before && done.completed > before.completed) {
      noteEvent(id, "handed off " + (done.completed - before.completed) + " range set(s), " +
                    (done.keys - before.keys) + " keys");
    }
    doneBefore.set(id, done);
  }
  const totals = el("div", {id: "handoff-totals", "data-completed": String(completed)},
                    "completed since start: " + completed + " handoff(s), " + keys + " keys handed off, " +
                    rereplicated + " re-replicated");
  totals.className = "none";
  const phases = {pushing: 0.33, flushing: 0.66, "done-sent": 0.9, waiting: 0.2};
  for (const [id, v] of views) {
    if (!v || !v.handoffs) continue;
    for (const h of v.handoffs) {
      const item = el("div", {class: "handoff", "data-node": id});
      const verb = h.direction === "out" ? " \u2192 " : " \u2190 ";
      // Outgoing: keys sent of keys to send (counted when the push started); incoming: keys received so far.
      const out = h.direction === "out";
      const keysText = (out && h.keys_total > 0 ? h.keys + " of " + h.keys_total + " keys (" + h.keys_left + " left)"
                                                : h.keys + " keys") +
                       (out && h.bytes > 0 ? ", " + (h.bytes / 1e6).toFixed(1) + " MB" : "");
      const share = out ? h.done : (phases[h.phase] || 0.5);
      item.appendChild(el("div", {}, id + verb + h.peer + ": " + h.ranges + " ranges (" + (100 * h.share).toFixed(1) +
                                        "%), " + keysText + ", " + h.phase + ", " + h.seconds.toFixed(1) + " s" +
                                        (out ? ", " + Math.round(100 * h.done) + "% done" : "")));
      const bar = el("div", {class: "bar"});
      bar.appendChild(el("div", {style: "width:" + Math.round(100 * share) + "%"}));
      item.appendChild(bar);
      box.appendChild(item);
    }
  }
  if (!box.querySelector(".handoff")) box.appendChild(el("div", {class: "none"}, "none in progress"));
  box.appendChild(totals);
}

async function lookup(key) {
  const box = document.getElementById("placement");
  box.replaceChildren();
  if (!key) return;
  let placement;
  try {
    placement = await getJson("/v1/ring?key=" + encodeURIComponent(key));
  } catch (e) {
    box.appendChild(el("span", {class: "none"}, String(e.message)));
    return;
  }
  lookedUp = placement;
  markKey(placement);
  const line = el("div");
  line.appendChild(document.createTextNode("owner "));
  line.appendChild(el("b", {id: "owner"}, placement.owner));
  line.appendChild(document.createTextNode(" \u00b7 token " + placement.token));
  box.appendChild(line);
  const list = el("ol", {id: "preference"});
  for (const m of placement.preference_list) list.appendChild(el("li", {"data-member": m.id}, m.id + " (" + m.state + ", " + m.http_address + ")"));
  box.appendChild(list);
  const owner = placement.preference_list[0];
  if (!owner) return;
  let keys;
  try {
    keys = await getJson("http://" + owner.http_address + "/v1/keys/" + encodeURIComponent(key));
  } catch (e) {
    box.appendChild(el("span", {class: "none"}, "states: " + e.message));
    return;
  }
  const table = el("table", {id: "states"});
  const head = el("tr");
  for (const h of ["name", "algorithm", "limit", "window", "remaining", "reset", "mode"]) head.appendChild(el("th", {}, h));
  table.appendChild(head);
  for (const s of keys.states || []) {
    const tr = el("tr", {"data-name": s.name});
    for (const v of [s.name, s.algorithm, s.limit, s.window_ms + " ms", s.remaining, s.reset_ms + " ms", s.mode]) tr.appendChild(el("td", {}, String(v)));
    table.appendChild(tr);
  }
  if (!(keys.states || []).length) box.appendChild(el("div", {class: "none"}, "no states stored for this key on its owner"));
  else box.appendChild(table);
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const now = Date.now();
    const view = await getJson("/v1/cluster");
    document.getElementById("node").textContent = view.node_id;
    document.title = "ringlimit \u2014 " + view.node_id;
    noteEvents(view);
    if (view.ring_fingerprint !== fingerprint) {
      const arcs = await getJson("/v1/ring/arcs");
      fingerprint = view.ring_fingerprint;
      document.getElementById("fingerprint").textContent = fingerprint;
      drawRing(arcs.arcs, view.members);
    }
    await Promise.all([renderMembers(view, now), renderHandoffs(view)]);
    status.textContent = "live";
    status.className = "live";
  } catch (e) {
    status.textContent = "unreachable: " + e.message;
    status.className = "down";
  }
  setTimeout(poll, 1000);
}

document.getElementById("lookup").addEventListener("submit", event => {
  event.preventDefault();
  const key = document.getElementById("key").value;
  lookup(key);
});
const initial = new URLSearchParams(location.search).get("key");
if (initial) {
  document.getElementById("key").value = initial;
  lookup(initial);
}
poll();
</script>
</body>
</html>
)html";

}  // namespace

HttpResponse HandleConsole() {
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "text/html; charset=utf-8");
  response.set(http::field::cache_control, "no-store");
  // The page may talk to the other members' read-only endpoints (their stats), nothing else.
  response.set(
      "Content-Security-Policy",
      "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; "
      "connect-src *");
  response.body() = std::string(kPage);
  response.prepare_payload();
  return response;
}

}  // namespace ringlimit::node
