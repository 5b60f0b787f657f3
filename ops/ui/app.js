// Baton's dashboard: the locks as the event stream (/v1/events) tells them,
// with the heartbeat freshness from a one-second poll of /v1/locks (events
// carry no heartbeats) and the server's figures from /metrics.
import { barChart, lineChart, parseMetrics, histogramQuantile } from "./charts.js";

const $ = (id) => document.getElementById(id);
const EXIT_TYPES = ["released", "expired", "force_released", "kicked", "left"];
const HISTORY_PER_LOCK = 100;
const HISTORY_PRELOAD = 2000; // events asked for at the start, across all locks

const state = {
  csrf: "",              // the login session's CSRF token, if logged in
  locks: new Map(),      // name -> {name, holder, waiters[], history[], holds[], waits[]}
  seq: 0,
  sort: { key: "name", dir: 1 },
  filter: "",
  source: null,          // the EventSource
  grants: [],            // [{t, perSec}] for the server page
  lastGrants: null,      // {t, total}
  authed: false,         // whether /v1/ may be asked (no token, or logged in)
  loaded: false,         // the stream's first snapshot has come: until then nothing is known
};

// A session as the page keeps it: sinceAt/seenAt are local clock times
// (Date.now() based), so the server's and the browser's clocks need not agree.
function local(sess, now = Date.now()) {
  return {
    id: sess.id, owner: sess.owner, remote: sess.remote, lease: sess.lease_ms,
    token: sess.token, sinceAt: now - (sess.since_ms || 0), seenAt: now - (sess.silent_ms || 0),
  };
}

function lockOf(name) {
  let l = state.locks.get(name);
  if (!l) {
    l = { name, holder: null, waiters: [], history: [], holds: [], waits: [] };
    state.locks.set(name, l);
  }
  return l;
}

// ---- the event stream ----

function applySnapshot(data) {
  const now = Date.now();
  const old = state.locks;
  state.locks = new Map();
  for (const l of data.locks) {
    const m = lockOf(l.name);
    const prev = old.get(l.name);
    if (prev) { m.history = prev.history; m.holds = prev.holds; m.waits = prev.waits; }
    m.holder = l.holder ? local(l.holder, now) : null;
    m.waiters = l.waiters.map((w) => local(w, now));
  }
  state.seq = data.seq;
  state.loaded = true;
}

function applyEvent(ev) {
  if (ev.seq <= state.seq) return; // already in the snapshot
  state.seq = ev.seq;
  const now = Date.now();
  const l = lockOf(ev.lock);
  const s = ev.session;
  recordHistory(l, ev);
  if (ev.type === "queued") {
    l.waiters.push(local(s, now));
  } else if (ev.type === "granted") {
    l.waiters = l.waiters.filter((w) => w.id !== s.id);
    l.holder = local({ ...s, since_ms: 0 }, now); // silent_ms: since its last heartbeat as a waiter
  } else if (EXIT_TYPES.includes(ev.type)) {
    if (l.holder && l.holder.id === s.id) {
      l.holder = null;
    } else {
      l.waiters = l.waiters.filter((w) => w.id !== s.id);
    }
  }
  scheduleRender();
}

// recordHistory adds ev to its lock's history and charts: hold times from
// the events that end a holder, wait times from promotions (since_ms).
function recordHistory(l, ev) {
  const s = ev.session;
  l.history.unshift({ at: ev.at, type: ev.type, session: s });
  if (l.history.length > HISTORY_PER_LOCK) l.history.length = HISTORY_PER_LOCK;
  if (ev.type === "granted" && s.since_ms > 0) pushBounded(l.waits, s.since_ms);
  if (EXIT_TYPES.includes(ev.type) && s.token) pushBounded(l.holds, s.since_ms);
}

function pushBounded(a, v) {
  a.push(v);
  if (a.length > 60) a.shift();
}

function connect() {
  if (state.source) state.source.close();
  const es = new EventSource(`/v1/events?snapshot=1&history=${HISTORY_PRELOAD}`);
  state.source = es;
  const onState = (e) => { applySnapshot(JSON.parse(e.data)); scheduleRender(); };
  es.addEventListener("snapshot", onState);
  es.addEventListener("resync", onState);
  // The latest events before the snapshot: the history and charts of a
  // lock's page start filled.
  es.addEventListener("history", (e) => {
    for (const ev of JSON.parse(e.data).events) recordHistory(lockOf(ev.lock), ev);
    scheduleRender();
  });
  for (const t of ["queued", "granted", ...EXIT_TYPES]) {
    es.addEventListener(t, (e) => applyEvent(JSON.parse(e.data)));
  }
  // overflow: the server ends the stream; EventSource reconnects by itself
  // with Last-Event-ID and the server sends what was missed (or a resync).
  es.addEventListener("open", () => setLive(true));
  es.addEventListener("error", async () => {
    setLive(false);
    // Refused (401; or 502/503 from a follower while the cluster elects a
    // leader): EventSource gives up, so start again after a second.
    if (es.readyState === EventSource.CLOSED && state.source === es) {
      es.close();
      state.source = null;
      setTimeout(start, 1000);
    }
  });
}

function setLive(on) {
  const el = $("live");
  el.textContent = on ? "live" : "reconnecting…";
  el.className = "live " + (on ? "on" : "off");
}

// Heartbeats are not events: a poll refreshes the silent times.
async function pollFreshness() {
  // Not while the stream is down: the server (or a follower's leader) is away.
  if (document.hidden || !state.authed || !state.source || state.source.readyState !== EventSource.OPEN) return;
  const r = await api("GET", "/v1/locks");
  if (!r.ok) return;
  const now = Date.now();
  for (const l of r.body.locks) {
    const m = state.locks.get(l.name);
    if (!m) continue;
    if (m.holder && l.holder && m.holder.id === l.holder.id) m.holder.seenAt = now - l.holder.silent_ms;
    const byId = new Map(l.waiters.map((w) => [w.id, w]));
    for (const w of m.waiters) {
      const p = byId.get(w.id);
      if (p) w.seenAt = now - p.silent_ms;
    }
  }
}

// ---- API calls ----

// Requests under way, so that a logout can let them finish first: one that
// reached the server after the logout would be refused, a console error.
const inflight = new Set();
function tracked(p) {
  inflight.add(p);
  p.finally(() => inflight.delete(p)).catch(() => {});
  return p;
}

async function api(method, path) {
  const headers = {};
  if (method !== "GET" && state.csrf) headers["X-Baton-CSRF"] = state.csrf;
  let res;
  try {
    res = await tracked(fetch(path, { method, headers, credentials: "same-origin" }));
  } catch (err) {
    return { ok: false, status: 0, body: { error: String(err) } };
  }
  let body = null;
  const type = res.headers.get("Content-Type") || "";
  if (type.startsWith("application/json")) body = await res.json();
  else body = await res.text();
  if (res.status === 401) await start();
  return { ok: res.ok, status: res.status, body };
}

// ---- rendering ----

// Renders are coalesced: at most one per RENDER_EVERY_MS however fast events
// come, so a busy server does not keep the page redrawing every frame.
const RENDER_EVERY_MS = 200;
let renderQueued = false;
let lastRender = 0;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  const wait = Math.max(0, lastRender + RENDER_EVERY_MS - performance.now());
  setTimeout(() => requestAnimationFrame(() => {
    renderQueued = false;
    lastRender = performance.now();
    render();
  }), wait);
}

function route() {
  const h = location.hash || "#/";
  if (h.startsWith("#/lock/")) return { view: "lock", name: decodeURIComponent(h.slice(7)) };
  if (h === "#/server") return { view: "server" };
  return { view: "locks" };
}

// render redraws the current view. Controls carry a data-focus key, so
// keyboard focus survives the redraw.
function render() {
  const f = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.focus : undefined;
  shown = new Map();
  renderView();
  if (f !== undefined) {
    const again = [...document.querySelectorAll("[data-focus]")].find((e) => e.dataset.focus === f);
    if (again && again !== document.activeElement) again.focus();
  }
}

function renderView() {
  const r = route();
  for (const v of ["locks", "lock", "server"]) $("view-" + v).hidden = v !== r.view;
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === r.view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (r.view === "locks") renderLocks();
  else if (r.view === "lock") renderLock(r.name);
  else renderServer();
}

function fmtDur(ms) {
  if (ms < 0) ms = 0;
  if (ms > 0 && ms < 1) return `${Math.round(ms * 1000)} µs`; // handover latencies are sub-millisecond
  if (ms < 10 && ms !== Math.round(ms)) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} m`;
}

// INVISIBLE matches what names and owner texts may hold but a page must not
// render as such: the bidirectional controls (U+202E turns "gpj.exe"
// around) and the C1 controls. They are shown escaped, as a terminal shows
// a control character.
const INVISIBLE = /[\u0080-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

function escapeCode(c) { return "\\u" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0"); }

// plain is text with every invisible character escaped, for attributes and
// dialog texts.
function plain(text) { return String(text).replace(INVISIBLE, escapeCode); }

// setText puts text in e, each invisible character as its escape in a
// marked span, so that it cannot be taken for the same characters typed.
function setText(e, text) {
  text = String(text);
  if (text.search(INVISIBLE) < 0) { e.textContent = text; return; }
  const kids = [];
  let last = 0;
  for (const m of text.matchAll(INVISIBLE)) {
    if (m.index > last) kids.push(text.slice(last, m.index));
    const esc = document.createElement("span");
    esc.className = "esc";
    esc.title = "an invisible control character in the name, shown escaped";
    esc.textContent = escapeCode(m[0]);
    kids.push(esc);
    last = m.index + m[0].length;
  }
  if (last < text.length) kids.push(text.slice(last));
  e.replaceChildren(...kids);
}

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") setText(e, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

function lockHref(name) { return "#/lock/" + encodeURIComponent(name); }

// freshness draws silent time against the lease: amber past half (a beat,
// due every quarter lease, is missed), red past 80% (where the client's
// own Lock.Context is cancelled).
function freshness(s, now) {
  shown.set(s.id, s);
  const meter = el("span", { class: "meter", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(s.lease),
    "aria-label": "silent time against the lease" }, el("span"));
  const f = el("span", { class: "fresh", "data-fresh": s.id }, meter, el("small"));
  setFreshness(f, s, now);
  return f;
}

function setFreshness(f, s, now) {
  const silent = now - s.seenAt;
  const frac = Math.min(1, silent / s.lease);
  const meter = f.firstChild;
  meter.className = "meter" + (frac >= 0.8 ? " red" : frac >= 0.5 ? " amber" : "");
  meter.setAttribute("aria-valuenow", String(Math.round(silent)));
  meter.firstChild.style.width = (frac * 100).toFixed(1) + "%";
  f.lastChild.textContent = `${fmtDur(silent)} / ${fmtDur(s.lease)}`;
}

// shown holds the sessions whose times are on the page, by id: the clock
// tick updates those cells in place (tick), so that between events no
// element is replaced under the user's pointer or focus.
let shown = new Map();

// since is a cell of the time a session has held or waited, kept current by tick.
function since(tag, attrs, s, now) {
  shown.set(s.id, s);
  return el(tag, { ...attrs, "data-since": s.id, text: fmtDur(now - s.sinceAt) });
}

function tick() {
  const now = Date.now();
  for (const e of document.querySelectorAll("[data-since]")) {
    const s = shown.get(e.dataset.since);
    if (s) e.textContent = fmtDur(now - s.sinceAt);
  }
  for (const e of document.querySelectorAll("[data-fresh]")) {
    const s = shown.get(e.dataset.fresh);
    if (s) setFreshness(e, s, now);
  }
  if (server && server.upAt) {
    for (const e of document.querySelectorAll("[data-uptime]")) e.textContent = fmtDur(now - server.upAt);
  }
}

function sortValue(l, key, now) {
  switch (key) {
    case "owner": return l.holder ? l.holder.owner : "";
    case "token": return l.holder ? l.holder.token : -1;
    case "held": return l.holder ? now - l.holder.sinceAt : -1;
    case "fresh": return l.holder ? (now - l.holder.seenAt) / l.holder.lease : -1;
    case "waiters": return l.waiters.length;
    default: return l.name;
  }
}

function visibleLocks() {
  const now = Date.now();
  const { key, dir } = state.sort;
  const out = [...state.locks.values()].filter((l) => (l.holder || l.waiters.length) && l.name.startsWith(state.filter));
  out.sort((a, b) => {
    const x = sortValue(a, key, now), y = sortValue(b, key, now);
    return (x < y ? -1 : x > y ? 1 : 0) * dir || (a.name < b.name ? -1 : 1);
  });
  return out;
}

function renderLocks() {
  const now = Date.now();
  const locks = visibleLocks();
  const body = $("locks-body");
  const rows = locks.map((l) => {
    const h = l.holder;
    const tp = h ? tokenParts(h.token) : null;
    return el("tr", { "data-lock": l.name },
      el("td", {}, el("a", { href: lockHref(l.name), text: l.name, "data-focus": "lock:" + l.name })),
      el("td", {}, h ? el("span", { class: "who" }, el("span", { text: h.owner || "(no owner)" }), el("small", { text: h.remote })) : el("span", { class: "muted", text: "free (granting)" })),
      el("td", { class: "num opt", text: h ? String(h.token) : "", title: tp ? `epoch ${tp.epoch}, grant ${tp.grant}` : "" }),
      h ? since("td", { class: "num" }, h, now) : el("td"),
      el("td", {}, h ? freshness(h, now) : ""),
      el("td", { class: "num", text: String(l.waiters.length) }));
  });
  body.replaceChildren(...rows);
  // Before the first snapshot nothing is known: "no lock is held" would be
  // a claim, and a wrong one while locks are held.
  $("locks-loading").hidden = state.loaded;
  $("locks-table").hidden = !state.loaded;
  $("lock-count").textContent = state.loaded ? `(${locks.length}${state.filter ? " shown" : ""})` : "";
  $("locks-empty").hidden = !state.loaded || locks.length > 0;
  for (const th of document.querySelectorAll("#locks-table th")) {
    if (th.dataset.key === state.sort.key) th.setAttribute("aria-sort", state.sort.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
}

function renderLock(name) {
  const now = Date.now();
  const l = state.locks.get(name) || { name, holder: null, waiters: [], history: [], holds: [], waits: [] };
  setText($("lock-title"), name);
  const h = l.holder;
  const holder = $("holder");
  if (!state.loaded) {
    holder.replaceChildren(el("p", { class: "muted", role: "status", text: "loading…" }));
  } else if (h) {
    const parts = tokenParts(h.token);
    holder.replaceChildren(
      el("dl", { class: "kv" },
        el("dt", { text: "Owner" }), el("dd", { text: h.owner || "(none)" }),
        el("dt", { text: "Remote" }), el("dd", { text: h.remote }),
        el("dt", { text: "Session" }), el("dd", { text: h.id }),
        el("dt", { text: "Token" }), el("dd", { text: String(h.token) }),
        el("dt", { text: "Token's parts" }), el("dd", { id: "token-parts", text: parts ? `epoch ${parts.epoch} · grant ${parts.grant}` : "–" }),
        el("dt", { text: "Held for" }), since("dd", {}, h, now),
        el("dt", { text: "Heartbeat" }), el("dd", {}, freshness(h, now))),
      el("p", { class: "muted token-parts", text: TOKEN_HELP }),
      el("button", { type: "button", class: "danger", id: "force-release", "data-focus": "release", onclick: () => forceRelease(name, h) }, "Force-release…"));
  } else {
    holder.replaceChildren(el("p", { class: "muted", text: "Nobody holds this lock." }));
  }
  $("queue-count").textContent = state.loaded ? `(${l.waiters.length})` : "";
  $("queue-empty").hidden = !state.loaded || l.waiters.length > 0;
  $("queue-body").replaceChildren(...l.waiters.map((w, i) => el("tr", { "data-session": w.id },
    el("td", { class: "num", text: String(i + 1) }),
    el("td", { text: w.owner || "(none)" }),
    el("td", { class: "opt", text: w.remote }),
    el("td", { class: "opt num", text: w.id }),
    since("td", { class: "num" }, w, now),
    el("td", {}, el("button", { type: "button", "data-focus": "kick:" + w.id, onclick: () => kick(name, w), "aria-label": plain(`Kick waiter ${w.owner || w.id}`) }, "Kick…")))));
  $("history").replaceChildren(...l.history.map((e) => el("li", {},
    el("span", { class: "tag " + e.type, text: e.type.replace("_", " ") }), " ",
    el("span", { text: `${new Date(e.at).toLocaleTimeString()} · ${e.session.owner || "(no owner)"} · session ${e.session.id}` +
      (e.session.token ? ` · token ${e.session.token}` : "") +
      (e.type === "granted" && e.session.since_ms ? ` · waited ${fmtDur(e.session.since_ms)}` : "") +
      (EXIT_TYPES.includes(e.type) && e.session.token ? ` · held ${fmtDur(e.session.since_ms)}` : "") }))));
  $("hold-chart").replaceChildren(barChart(l.holds, fmtDur, "No holder has ended in the recent history.", null,
    { x: "holders that ended, oldest → newest", y: "held for" }));
  $("wait-chart").replaceChildren(barChart(l.waits, fmtDur, "No waiter was promoted in the recent history.", null,
    { x: "promoted waiters, oldest → newest", y: "waited" }));
  $("hold-hist").replaceChildren(...lockHistogram(name, "baton_hold_seconds"));
  $("wait-hist").replaceChildren(...lockHistogram(name, "baton_wait_seconds"));
}

// lockHistogram draws the server's per-lock histogram (baton_hold_seconds
// or baton_wait_seconds with a lock label) when the server exports it.
function lockHistogram(name, metric) {
  const axes = metric === "baton_hold_seconds" ? { x: "held for, up to", y: "holders" } : { x: "waited, up to", y: "waiters" };
  if (!metrics) return [];
  const buckets = (metrics.get(metric + "_bucket") || [])
    .filter((b) => b.labels.lock === name && b.labels.le !== "+Inf")
    .sort((a, b) => Number(a.labels.le) - Number(b.labels.le));
  if (!buckets.length) return [];
  const counts = buckets.map((b, i) => b.value - (i ? buckets[i - 1].value : 0));
  const total = buckets[buckets.length - 1].value;
  return [el("p", { class: "muted", text: `Since the server started (${metric}, ${total} observed):` }),
    barChart(counts, String, "None observed yet.", buckets.map((b) => fmtDur(Number(b.labels.le) * 1000)), axes)];
}

let metrics = null;
let cluster = null;
// server is what this node says of itself in /metrics: its version and
// lock protocol address (baton_server_info), and upAt, the local time it
// started (process_start_time_seconds against the answer's Date, both the
// server's clock).
let server = null;

// TOKEN_HELP explains a fencing token where one is shown.
const TOKEN_HELP = "A fencing token is epoch × 2^40 + grant: the epoch rises at every server start (in a cluster, with every new leader), " +
  "the grant counts the grants within it, so every grant's token is larger than all before it. Give it to the resource the lock guards, " +
  "and have it refuse tokens lower than the highest it has seen.";

// tokenParts splits a token into its epoch and its grant within the epoch;
// null when the number is past what a JavaScript number holds exactly.
function tokenParts(token) {
  if (typeof token !== "number" || !Number.isSafeInteger(token)) return null;
  const epoch = Math.floor(token / 2 ** 40);
  return { epoch, grant: token - epoch * 2 ** 40 };
}

// serverFrom reads the server's own facts from a scrape answered at date.
function serverFrom(m, date) {
  const info = (m.get("baton_server_info") || [])[0];
  if (!info) return null;
  const started = (m.get("process_start_time_seconds") || [])[0];
  const at = Date.parse(date || "");
  const up = started && !Number.isNaN(at) ? Math.max(0, at - started.value * 1000) : null;
  return { version: info.labels.version || "?", commit: info.labels.commit || "", addr: info.labels.addr || "?", upAt: up === null ? 0 : Date.now() - up };
}

// renderServerInfo is the header's line: address, version and uptime.
function renderServerInfo() {
  const e = $("server-info");
  if (!server || !state.authed) { e.replaceChildren(); return; }
  e.replaceChildren(`${server.addr} · baton ${server.version}`,
    server.upAt ? el("span", {}, " · up ", el("span", { "data-uptime": "" }, fmtDur(Date.now() - server.upAt))) : "");
  e.title = `lock protocol on ${server.addr}; baton ${server.version}${server.commit ? ` (commit ${server.commit})` : ""}`;
}
// clusterHealth is the leader's view of the cluster (its members' health):
// this node's own on the leader, sent on by a follower otherwise.
let clusterHealth = null;

function renderServer() {
  const stats = [];
  if (server) {
    stats.push(["Version", server.version], ["Lock protocol", server.addr],
      ["Uptime", server.upAt ? el("span", { "data-uptime": "" }, fmtDur(Date.now() - server.upAt)) : "–"]);
  }
  if (metrics) {
    const sessions = metrics.get("baton_sessions") || [];
    const holding = sessions.find((s) => s.labels.state === "holding");
    const waiting = sessions.find((s) => s.labels.state === "waiting");
    const lat = histogramQuantile(metrics, "baton_handover_latency_seconds", [0.5, 0.99]);
    stats.push(["Sessions holding", holding ? holding.value : 0], ["Sessions waiting", waiting ? waiting.value : 0],
      ["Locks", sumOf(metrics, "baton_locks")], ["Grants", sumOf(metrics, "baton_grants_total")],
      ["Handover p50", lat ? fmtDur(lat[0] * 1000) : "–"], ["Handover p99", lat ? fmtDur(lat[1] * 1000) : "–"]);
    const buckets = (metrics.get("baton_handover_latency_seconds_bucket") || []).filter((b) => b.labels.le !== "+Inf");
    const counts = buckets.map((b, i) => b.value - (i ? buckets[i - 1].value : 0));
    $("handover-chart").replaceChildren(barChart(counts, String, "No handover yet.",
      buckets.map((b) => fmtDur(Number(b.labels.le) * 1000)), { x: "handover latency, up to", y: "handovers" }));
  }
  $("stats").replaceChildren(...stats.map(([k, v]) => el("div", { class: "stat" }, el("span", { class: "muted", text: k }),
    v instanceof Node ? el("b", {}, v) : el("b", { text: String(v) }))));
  $("grants-chart").replaceChildren(lineChart(state.grants.map((g) => g.perSec), "Collecting…", { x: "the last five minutes, oldest → now", y: "grants/s" }));
  renderCluster();
}

// leaderHref is the dashboard of the cluster's leader, if it is not this node.
function leaderHref(c) {
  if (!c || c.role === "leader" || c.role === "standalone" || !c.leader || !c.leader.ops_addr) return "";
  return `${location.protocol}//${c.leader.ops_addr}/`;
}

// renderBanner says, on a follower, where the locks come from: the
// follower sends /v1/ (the stream and the actions too) on to the leader.
function renderBanner() {
  const b = $("banner");
  const c = state.authed ? cluster : null;
  if (!c || c.role === "leader" || c.role === "standalone") { b.hidden = true; return; }
  const href = leaderHref(c);
  const kids = c.leader
    ? [`Node ${c.node_id} is a ${c.role}: the locks and actions on this page are the leader's (${c.leader.id}), sent on by this node. `,
      href ? el("a", { href: href + location.hash, text: `Open the leader's dashboard` }) : ""]
    : [`Node ${c.node_id} is a ${c.role} and knows no leader: the cluster is electing one, or has no quorum.`];
  b.replaceChildren(...kids);
  b.hidden = false;
}

function renderCluster() {
  const health = clusterHealth;
  const note = $("node-note");
  const href = leaderHref(cluster);
  note.hidden = !href;
  if (href) {
    note.replaceChildren(`The figures above are this node's (${cluster.node_id}, a ${cluster.role}: no sessions); the leader's are on `,
      el("a", { href: href + "#/server", text: "its server page" }), ".");
  }
  const box = $("cluster");
  if (!cluster || cluster.role === "standalone") {
    box.replaceChildren(el("p", { class: "muted", text: "Standalone server (no replicated mode)." }));
    return;
  }
  const c = cluster;
  box.replaceChildren(
    el("dl", { class: "kv" },
      el("dt", { text: "This node" }), el("dd", { text: `${c.node_id} (${c.role})` }),
      el("dt", { text: "Leader" }), el("dd", { text: c.leader ? `${c.leader.id} at ${c.leader.addr} (ops ${c.leader.ops_addr})` : "none known" }),
      el("dt", { text: "Lease bound" }), el("dd", { text: fmtDur(c.lease_bound_ms) }),
      el("dt", { text: "Term / epoch" }), el("dd", { text: `${c.term} / ${c.epoch}` }),
      el("dt", { text: "Grace" }), el("dd", { text: c.grace_remaining_ms > 0 ? `${fmtDur(c.grace_remaining_ms)} left` : "none" })),
    clusterHealthLine(health),
    el("div", { class: "wrap" }, el("table", { id: "members" },
      el("thead", {}, el("tr", {}, ...["Member", "Role", "Raft address", "Voter", "Health", "For", "Last contact", "Log lag"].map((t) => el("th", { text: t })))),
      el("tbody", {}, ...((health || c).members || []).map(memberRow)))));
}

// clusterHealthLine sums up the leader's view of its members' health.
function clusterHealthLine(h) {
  if (!h || typeof h.healthy !== "boolean") return el("p", { class: "muted", text: "Member health: unknown (only the leader knows it, and none answered)." });
  const voters = (h.members || []).filter((m) => m.voter).length;
  return el("p", { class: h.healthy ? "" : "bad", id: "cluster-health",
    text: `Cluster ${h.healthy ? "healthy" : "UNHEALTHY"}: ${h.voters_healthy} of ${voters} voters healthy; it can lose ${Math.max(h.failure_tolerance, 0)} more.` });
}

// memberRow is one member, an unhealthy one marked in red with its last contact.
function memberRow(m) {
  const h = m.health;
  let state = "unknown", since = "–", contact = "–", lag = "–";
  if (h) {
    state = h.healthy ? "healthy" : (h.reachable ? "unhealthy (behind)" : "unreachable");
    since = fmtDur(h.since_ms);
    contact = m.role === "leader" ? "–" : (h.last_contact_ms === null ? "never" : `${fmtDur(h.last_contact_ms)} ago`);
    lag = String(h.index_lag);
  }
  return el("tr", { "data-member": m.id, class: h && !h.healthy ? "bad" : "" },
    el("td", { text: m.id }), el("td", { text: m.role || "follower" }), el("td", { text: m.raft_addr }),
    el("td", { text: m.voter ? "yes" : "no" }), el("td", { text: state }), el("td", { text: since }),
    el("td", { text: contact }), el("td", { text: lag }));
}

function sumOf(m, name) { return (m.get(name) || []).reduce((a, s) => a + s.value, 0); }

async function pollServer() {
  if (document.hidden || !state.authed) return;
  try {
    const res = await tracked(fetch("/metrics"));
    if (res.ok) {
      metrics = parseMetrics(await res.text());
      server = serverFrom(metrics, res.headers.get("Date"));
      renderServerInfo();
      const now = Date.now(), total = sumOf(metrics, "baton_grants_total");
      if (state.lastGrants) {
        const dt = (now - state.lastGrants.t) / 1000;
        state.grants.push({ t: now, perSec: Math.max(0, (total - state.lastGrants.total) / dt) });
        if (state.grants.length > 150) state.grants.shift();
      }
      state.lastGrants = { t: now, total };
    }
  } catch { /* the next poll tries again */ }
  // Every poll, not only on the server page: a follower says so in a banner.
  if (!state.authed) return; // logged out while /metrics was asked
  const r = await api("GET", "/v1/cluster");
  cluster = r.ok && r.body && typeof r.body === "object" ? r.body : null;
  clusterHealth = cluster && cluster.role === "leader" ? cluster : null;
  if (cluster && cluster.role !== "leader" && cluster.role !== "standalone" && cluster.leader) {
    const l = await api("GET", "/v1/cluster?view=leader");
    clusterHealth = l.ok && l.body && typeof l.body === "object" ? l.body : null;
  }
  renderBanner();
  if (route().view === "server") renderServer();
}

// ---- actions ----

function confirmDialog(title, text, ok) {
  const d = $("confirm");
  setText($("confirm-title"), title);
  setText($("confirm-text"), text);
  $("confirm-ok").textContent = ok;
  d.returnValue = "";
  d.showModal();
  return new Promise((resolve) => d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true }));
}

function toast(text) {
  const t = $("toast");
  setText(t, text);
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}

async function forceRelease(name, h) {
  if (!await confirmDialog(`Force-release ${name}?`,
    `The holder ${h.owner || "(no owner)"} (session ${h.id}, token ${h.token}) gets FORCE_RELEASED and the next waiter is granted the lock at once. Its work may still be running: only the fencing token protects the resource then.`,
    "Force-release")) return;
  const r = await api("POST", `/v1/locks/${encodeURIComponent(name)}/release`);
  toast(r.ok ? `Released ${name} from session ${r.body.id}` : `Release failed: ${r.body && r.body.error || r.status}`);
}

async function kick(name, w) {
  if (!await confirmDialog(`Kick a waiter of ${name}?`,
    `Waiter ${w.owner || "(no owner)"} (session ${w.id}) gets KICKED and leaves the queue.`, "Kick")) return;
  const r = await api("POST", `/v1/sessions/${encodeURIComponent(w.id)}/kick`);
  toast(r.ok ? `Kicked session ${w.id}` : `Kick failed: ${r.body && r.body.error || r.status}`);
}

// ---- login ----

async function start() {
  let s;
  try {
    s = await (await fetch("/ui/session", { credentials: "same-origin" })).json();
  } catch {
    setLive(false);
    setTimeout(start, 2000);
    return;
  }
  state.csrf = s.csrf || "";
  $("logout").hidden = !s.auth_required || !s.logged_in;
  state.authed = !s.auth_required || s.logged_in;
  if (!state.authed) {
    if (state.source) { state.source.close(); state.source = null; }
    state.locks = new Map();
    state.loaded = false;
    metrics = null;
    cluster = null;
    server = null;
    renderServerInfo();
    renderBanner();
    for (const v of ["locks", "lock", "server"]) $("view-" + v).hidden = true;
    $("login").hidden = false;
    $("live").textContent = "logged out";
    $("live").className = "live";
    $("token").focus();
    return;
  }
  $("login").hidden = true;
  connect();
  render();
  pollServer();
}

$("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const res = await fetch("/ui/login", {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: $("token").value }),
  });
  $("token").value = "";
  if (!res.ok) {
    $("login-error").textContent = (await res.json()).error || `login failed (${res.status})`;
    return;
  }
  $("login-error").textContent = "";
  await start();
});

$("logout").addEventListener("click", async () => {
  // No stream or poll asks /v1/ while the logout is under way.
  state.authed = false;
  if (state.source) { state.source.close(); state.source = null; }
  await Promise.allSettled([...inflight]);
  await fetch("/ui/logout", { method: "POST", credentials: "same-origin" });
  await start();
});

$("filter").addEventListener("input", (e) => { state.filter = e.target.value; scheduleRender(); });
for (const th of document.querySelectorAll("#locks-table th")) {
  th.querySelector("button").addEventListener("click", () => {
    const key = th.dataset.key;
    state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
    scheduleRender();
  });
}
window.addEventListener("hashchange", () => { render(); if (route().view === "server") pollServer(); });

// Times and bars move with the clock, not only with events: in place,
// except when the table is sorted by a time, whose order moves too.
setInterval(() => {
  if (!state.source) return;
  if (route().view === "locks" && ["held", "fresh"].includes(state.sort.key) && !document.querySelector("dialog[open]")) scheduleRender();
  else tick();
}, 250);
// The poll runs every eighth of the shortest lease shown (250 ms to 1 s),
// so the bar's staleness stays small against the lease: a healthy holder
// (a beat every quarter lease) stays green; amber means a missed beat.
(async function freshnessLoop() {
  await pollFreshness().catch(() => {});
  let lease = Infinity;
  for (const l of state.locks.values()) {
    if (l.holder) lease = Math.min(lease, l.holder.lease);
  }
  setTimeout(freshnessLoop, Math.max(250, Math.min(1000, lease / 8)));
})();
setInterval(pollServer, 2000);
start();
