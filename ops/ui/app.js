// Baton's dashboard: the locks as the event stream (/v1/events) tells them,
// with the heartbeat freshness from a one-second poll of /v1/locks (events
// carry no heartbeats) and the server's figures from /metrics.
import { barChart, lineChart, parseMetrics, histogramQuantile } from "./charts.js";
import { HIDDEN } from "./hidden.js";

const $ = (id) => document.getElementById(id);
const EXIT_TYPES = ["released", "expired", "force_released", "kicked", "left", "superseded"];
const HISTORY_PER_LOCK = 100;
const HISTORY_PRELOAD = 2000; // events asked for at the start, across all locks

const state = {
  csrf: "",              // the login session's CSRF token, if logged in
  locks: new Map(),      // name -> {name, holders[], waiters[], limit, history[], holds[], waits[]}
  seq: 0,
  sort: { key: "name", dir: 1 },
  filter: "",
  source: null,          // the EventSource
  grants: [],            // [{t, perSec}] for the server page
  lastGrants: null,      // {t, total}
  authed: false,         // whether /v1/ may be asked (no token, or logged in)
  loaded: false,         // the stream's first snapshot has come: until then nothing is known
  graceUntil: 0,         // Date.now() at which the server's grace ends; 0 outside one
};

// A session as the page keeps it: sinceAt/seenAt are local clock times
// (Date.now() based), so the server's and the browser's clocks need not agree.
function local(sess, now = Date.now()) {
  return {
    id: sess.id, owner: sess.owner, remote: sess.remote, lease: sess.lease_ms, shared: !!sess.shared,
    token: tokenOf(sess), sinceAt: now - (sess.since_ms || 0), seenAt: now - (sess.silent_ms || 0),
    // Protocol version 3: listed by a planned handover and not back yet;
    // the epoch a resumed claim came from (0: never resumed).
    pending: !!sess.pending, resumedFrom: Number(sess.resumed_from_epoch) || 0,
  };
}

// tokenOf is a holder's token as a decimal string (undefined for a
// waiter): token_str, exact. The number token, which JSON.parse rounds
// past 2^53, only from a server too old to send token_str.
function tokenOf(sess) {
  if (typeof sess.token_str === "string") return sess.token_str;
  return typeof sess.token === "number" ? String(sess.token) : undefined;
}

// A lock as the page keeps it: holders in grant order (several when its
// claims are shared), waiters in queue order, and limit, the limit in force
// for its shared claims (null when it has none).
function emptyLock(name) {
  return { name, holders: [], waiters: [], limit: null, history: [], holds: [], waits: [] };
}

function lockOf(name) {
  let l = state.locks.get(name);
  if (!l) {
    l = emptyLock(name);
    state.locks.set(name, l);
  }
  return l;
}

// holdersOf is a LOCK's holders from the API: "holders", or "holder" alone
// from a server that predates shared claims.
function holdersOf(l) {
  if (l.holders && l.holders.length) return l.holders;
  return l.holder ? [l.holder] : [];
}

// hasShared tells whether any session of l, holding or waiting, is shared:
// only then is there a limit in force.
function hasShared(l) { return l.holders.some((s) => s.shared) || l.waiters.some((s) => s.shared); }

// ---- the event stream ----

function applySnapshot(data) {
  const now = Date.now();
  const old = state.locks;
  state.locks = new Map();
  for (const l of data.locks) {
    const m = lockOf(l.name);
    const prev = old.get(l.name);
    if (prev) { m.history = prev.history; m.holds = prev.holds; m.waits = prev.waits; }
    m.holders = holdersOf(l).map((h) => local(h, now));
    m.waiters = l.waiters.map((w) => local(w, now));
    m.limit = l.limit ?? null;
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
    l.holders = l.holders.filter((h) => h.id !== s.id);
    l.holders.push(local({ ...s, since_ms: 0 }, now)); // silent_ms: since its last heartbeat as a waiter
  } else if (ev.type === "resumed") {
    // The claim went on on a new session: in the place of the one it
    // left (a connection, a pending claim), or, taken back after a crash,
    // at its token's or ticket's place, which the lock's view tells.
    const gone = (x) => x.id !== s.id && x.id !== ev.replaces;
    const list = tokenOf(s) ? "holders" : "waiters";
    const at = l[list].findIndex((x) => x.id === ev.replaces);
    l.holders = l.holders.filter(gone);
    l.waiters = l.waiters.filter(gone);
    const fresh = local(s, now);
    if (at >= 0) l[list].splice(Math.min(at, l[list].length), 0, fresh);
    else {
      l[list].push(fresh);
      refreshLock(l.name);
    }
  } else if (EXIT_TYPES.includes(ev.type)) {
    l.holders = l.holders.filter((h) => h.id !== s.id);
    l.waiters = l.waiters.filter((w) => w.id !== s.id);
  }
  // The name's last shared session gone, its limit is gone too; a shared
  // session whose limit the events do not tell has it asked for.
  if (!hasShared(l)) l.limit = null;
  else if (l.limit === null) fetchLimit(l.name);
  scheduleRender();
}

// fetchLimit asks the server for the limit in force of name, once at a
// time per name: events carry sessions, not the name's limit.
const limitAsked = new Set();
async function fetchLimit(name) {
  if (limitAsked.has(name) || !state.authed) return;
  limitAsked.add(name);
  try {
    const r = await api("GET", `/v1/locks/${encodeURIComponent(name)}`);
    const l = state.locks.get(name);
    if (r.ok && l && hasShared(l) && r.body && typeof r.body.limit === "number") {
      l.limit = r.body.limit;
      scheduleRender();
    }
  } finally {
    limitAsked.delete(name);
  }
}

// refreshLock asks the server for lock name's holders and waiters in their
// order, once at a time per name: a claim taken back after a crash takes
// its place by its token or ticket, which events do not carry.
const refreshAsked = new Set();
async function refreshLock(name) {
  if (refreshAsked.has(name) || !state.authed) return;
  refreshAsked.add(name);
  try {
    const r = await api("GET", `/v1/locks/${encodeURIComponent(name)}`);
    const l = state.locks.get(name);
    if (r.ok && l && r.body && Array.isArray(r.body.waiters)) {
      const now = Date.now();
      l.holders = holdersOf(r.body).map((h) => local(h, now));
      l.waiters = r.body.waiters.map((w) => local(w, now));
      scheduleRender();
    }
  } finally {
    refreshAsked.delete(name);
  }
}

// recordHistory adds ev to its lock's history and charts: hold times from
// the events that end a holder, wait times from promotions (since_ms).
function recordHistory(l, ev) {
  const s = ev.session;
  l.history.unshift({ at: ev.at, type: ev.type, session: s });
  if (l.history.length > HISTORY_PER_LOCK) l.history.length = HISTORY_PER_LOCK;
  if (ev.type === "granted" && s.since_ms > 0) pushBounded(l.waits, s.since_ms);
  if (EXIT_TYPES.includes(ev.type) && tokenOf(s)) pushBounded(l.holds, s.since_ms);
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
  for (const t of ["queued", "granted", "resumed", ...EXIT_TYPES]) {
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
  // The server's grace (a crash grace, a new leader's failover grace): it
  // grants nothing until then, which is why waiters wait with no holder.
  const grace = Number(r.body.grace_remaining_ms) || 0;
  state.graceUntil = grace > 0 ? now + grace : 0;
  renderGrace(now);
  let limitChanged = false;
  for (const l of r.body.locks) {
    const m = state.locks.get(l.name);
    if (!m) continue;
    const byId = new Map([...holdersOf(l), ...l.waiters].map((s) => [s.id, s]));
    for (const s of [...m.holders, ...m.waiters]) {
      const p = byId.get(s.id);
      if (p) s.seenAt = now - p.silent_ms;
    }
    if (hasShared(m) && typeof l.limit === "number" && m.limit !== l.limit) {
      m.limit = l.limit;
      limitChanged = true;
    }
  }
  // Bars move in place; the slots are in the rows, drawn anew.
  if (limitChanged) scheduleRender();
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

// HIDDEN (hidden.js, which the server makes from the rule of the operator
// commands) matches what names and owner texts may hold but a page must
// not render as such: controls, bidirectional overrides (U+202E turns
// "gpj.exe" around), zero-width and other format characters, spaces other
// than U+0020, variation selectors, Hangul fillers and the other
// default-ignorable code points, private-use and unassigned ones. Each is
// shown escaped, as the terminal commands show it, so that no name can
// look like another or reorder what is around it.
function escapeCode(c) {
  const cp = c.codePointAt(0);
  return cp > 0xffff ? "\\U" + cp.toString(16).toUpperCase().padStart(8, "0")
    : "\\u" + cp.toString(16).toUpperCase().padStart(4, "0");
}

// plain is text with every hidden character escaped, for attributes and
// dialog texts.
function plain(text) { return String(text).replace(HIDDEN, escapeCode); }

// setText puts text in e, each invisible character as its escape in a
// marked span, so that it cannot be taken for the same characters typed.
function setText(e, text) {
  text = String(text);
  if (text.search(HIDDEN) < 0) { e.textContent = text; return; }
  const kids = [];
  let last = 0;
  for (const m of text.matchAll(HIDDEN)) {
    if (m.index > last) kids.push(text.slice(last, m.index));
    const esc = document.createElement("span");
    esc.className = "esc";
    esc.title = "a character that would not show as itself (invisible, a control or a look-alike space), shown escaped";
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

// renderGrace shows, while the server's grace lasts, when grants resume.
function renderGrace(now) {
  const e = $("grace");
  const left = state.graceUntil - now;
  if (!state.graceUntil || left <= 0 || !state.authed) { e.hidden = true; return; }
  e.textContent = `grace: grants resume in ${fmtDur(left)}. The server grants no lock until then (after a restart or a failover, ` +
    "the holders of before may still be running), so waiters wait with no holder.";
  e.hidden = false;
}

function tick() {
  const now = Date.now();
  renderGrace(now);
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

// slots is "3 / 5": a lock's holders against the limit in force for its
// shared claims, or against 1 when it has none (an exclusive claim holds
// a name alone: a semaphore of 1). "?" while the limit is being asked.
function slots(l) {
  const limit = l.limit !== null ? l.limit : hasShared(l) ? "?" : 1;
  return `${l.holders.length} / ${limit}`;
}

// staleness is how far a session is into its lease without a heartbeat (0-1+).
function staleness(s, now) { return (now - s.seenAt) / s.lease; }

function sortValue(l, key, now) {
  const h = l.holders[0];
  switch (key) {
    case "owner": return h ? h.owner : "";
    case "token": return h && h.token ? BigInt(h.token) : -1n; // compared as integers, exactly
    case "held": return h ? now - h.sinceAt : -1;
    case "fresh": return h ? Math.max(...l.holders.map((x) => staleness(x, now))) : -1; // the most silent holder
    case "slots": return l.holders.length / (l.limit || 1);
    case "waiters": return l.waiters.length;
    default: return l.name;
  }
}

function visibleLocks() {
  const now = Date.now();
  const { key, dir } = state.sort;
  const out = [...state.locks.values()].filter((l) => (l.holders.length || l.waiters.length) && l.name.startsWith(state.filter));
  out.sort((a, b) => {
    const x = sortValue(a, key, now), y = sortValue(b, key, now);
    return (x < y ? -1 : x > y ? 1 : 0) * dir || (a.name < b.name ? -1 : 1);
  });
  return out;
}

// LIST_HOLDERS is how many holders of one lock the table lists; the lock's
// page lists them all.
const LIST_HOLDERS = 5;

// kindTag marks a session's kind of claim where it tells something: every
// session of a name that has shared claims (a reader beside a writer), none
// on a plain mutex.
function kindTag(l, s) {
  if (l.limit === null && !hasShared(l)) return null;
  return el("span", { class: "tag kind " + (s.shared ? "shared" : "exclusive"), text: s.shared ? "shared" : "exclusive" });
}

// v3Tags mark a claim of protocol version 3 that a change of server
// carried: pending (listed by a planned handover, not back yet: it keeps
// its slot or place without a connection), or resumed, and from which
// epoch. None for any other session.
function v3Tags(s) {
  const tags = [];
  if (s.pending) {
    tags.push(" ", el("span", { class: "tag v3 pending", text: "pending",
      title: "Listed by a planned handover and not back yet: it keeps its place until its client resumes it or its time is up." }));
  }
  if (s.resumedFrom) {
    tags.push(" ", el("span", { class: "tag v3 resumed", text: `resumed from epoch ${s.resumedFrom}`,
      title: "Its client carried the claim to a new connection, keeping its token or its place." }));
  }
  return tags;
}

// holderCells are the table cells of one holder h of lock l.
function holderCells(l, h, now) {
  const tp = tokenParts(h.token);
  return [
    el("td", {}, el("span", { class: "who" }, el("span", {}, el("span", { text: h.owner || "(no owner)" }), " ", kindTag(l, h), ...v3Tags(h)), el("small", { text: h.remote }))),
    el("td", { class: "num opt", text: String(h.token), title: tp ? `epoch ${tp.epoch}, grant ${tp.grant}` : "" }),
    since("td", { class: "num" }, h, now),
    el("td", {}, freshness(h, now)),
  ];
}

// lockRows are the table rows of lock l: one per holder (up to
// LIST_HOLDERS, then a row that leads to the rest), the name, slots and
// waiters spanning them.
function lockRows(l, now) {
  const shown = l.holders.slice(0, LIST_HOLDERS);
  const more = l.holders.length - shown.length;
  const span = { rowspan: String(Math.max(1, shown.length + (more > 0 ? 1 : 0))) };
  const first = shown.length ? holderCells(l, shown[0], now)
    : [el("td", {}, el("span", { class: "muted", text: state.graceUntil > now ? "free (grace: no grant yet)" : "free (granting)" })), el("td", { class: "opt" }), el("td"), el("td")];
  const rows = [el("tr", { "data-lock": l.name, class: shown.length > 1 || more > 0 ? "several" : "" },
    el("td", span, el("a", { href: lockHref(l.name), text: l.name, "data-focus": "lock:" + l.name }),
      l.limit !== null ? el("small", { class: "narrow-slots", text: `${slots(l)} slots` }) : null), // where the Slots column is left out
    ...first,
    el("td", { ...span, class: "num slots opt", text: slots(l), title: l.limit !== null ? `${l.holders.length} of ${l.limit} slots in use` : "" }),
    el("td", { ...span, class: "num", text: String(l.waiters.length) }))];
  for (const h of shown.slice(1)) rows.push(el("tr", { class: "also", "data-holder-of": l.name }, ...holderCells(l, h, now)));
  if (more > 0) {
    rows.push(el("tr", { class: "also", "data-holder-of": l.name }, el("td", { colspan: "4" },
      el("a", { href: lockHref(l.name), text: `and ${more} more holder${more > 1 ? "s" : ""}` }))));
  }
  rows[rows.length - 1].classList.add("end");
  return rows;
}

function renderLocks() {
  const now = Date.now();
  const locks = visibleLocks();
  const body = $("locks-body");
  body.replaceChildren(...locks.flatMap((l) => lockRows(l, now)));
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
  const l = state.locks.get(name) || emptyLock(name);
  setText($("lock-title"), name);
  const holder = $("holder");
  const several = l.holders.length > 1 || l.limit !== null || hasShared(l);
  holder.closest(".card").classList.toggle("full", several); // a row of its own for the holders' table
  $("holder-title").textContent = several ? "Holders" : "Holder";
  $("holder-slots").textContent = state.loaded && several ? slots(l) : "";
  if (!state.loaded) {
    holder.replaceChildren(el("p", { class: "muted", role: "status", text: "loading…" }));
  } else if (!l.holders.length) {
    holder.replaceChildren(...[el("p", { class: "muted", text: "Nobody holds this lock." }), limitNote(l)].filter(Boolean));
  } else if (!several) {
    const h = l.holders[0];
    const parts = tokenParts(h.token);
    holder.replaceChildren(
      el("dl", { class: "kv" },
        el("dt", { text: "Owner" }), el("dd", {}, el("span", { text: h.owner || "(none)" }), ...v3Tags(h)),
        el("dt", { text: "Remote" }), el("dd", { text: h.remote }),
        el("dt", { text: "Session" }), el("dd", { text: h.id }),
        el("dt", { text: "Token" }), el("dd", { text: String(h.token) }),
        el("dt", { text: "Token's parts" }), el("dd", { id: "token-parts", text: parts ? `epoch ${parts.epoch} · grant ${parts.grant}` : "–" }),
        el("dt", { text: "Held for" }), since("dd", {}, h, now),
        el("dt", { text: "Heartbeat" }), el("dd", {}, freshness(h, now))),
      el("p", { class: "muted token-parts", text: TOKEN_HELP }),
      releaseAllButton(l));
  } else {
    holder.replaceChildren(...[limitNote(l),
      el("div", { class: "wrap" }, el("table", { id: "holders-table" },
        el("thead", {}, el("tr", {}, ...["Owner", "Session", "Token", "Held for", "Heartbeat"].map((t, i) =>
          el("th", { class: i === 1 || i === 2 ? "opt" : "", text: t })), el("th", {}, el("span", { class: "sr", text: "Action" })))),
        el("tbody", { id: "holders-body" }, ...l.holders.map((h) => el("tr", { "data-session": h.id },
          el("td", {}, el("span", { class: "who" }, el("span", {}, el("span", { text: h.owner || "(none)" }), " ", kindTag(l, h), ...v3Tags(h)), el("small", { text: h.remote }))),
          el("td", { class: "opt num", text: h.id }),
          el("td", { class: "opt num", text: String(h.token), title: tokenTitle(h.token) }),
          since("td", { class: "num" }, h, now),
          el("td", {}, freshness(h, now)),
          el("td", {}, el("button", { type: "button", class: "release-one", "data-focus": "release:" + h.id,
            onclick: () => releaseOne(name, l, h), "aria-label": plain(`Force-release holder ${h.owner || h.id}`) }, "Release…"))))))),
      el("p", { class: "muted token-parts", text: TOKEN_HELP + " " + SHARED_TOKEN_HELP }),
      releaseAllButton(l)].filter(Boolean));
  }
  $("queue-count").textContent = state.loaded ? `(${l.waiters.length})` : "";
  $("queue-empty").hidden = !state.loaded || l.waiters.length > 0;
  $("queue-body").replaceChildren(...l.waiters.map((w, i) => el("tr", { "data-session": w.id },
    el("td", { class: "num", text: String(i + 1) }),
    el("td", {}, el("span", { text: w.owner || "(none)" }), kindTag(l, w) ? " " : null, kindTag(l, w), ...v3Tags(w)),
    el("td", { class: "opt", text: w.remote }),
    el("td", { class: "opt num", text: w.id }),
    since("td", { class: "num" }, w, now),
    el("td", {}, el("button", { type: "button", "data-focus": "kick:" + w.id, onclick: () => kick(name, w), "aria-label": plain(`Kick waiter ${w.owner || w.id}`) }, "Kick…")))));
  $("history").replaceChildren(...l.history.map((e) => el("li", {},
    el("span", { class: "tag " + e.type, text: e.type.replace("_", " ") }), " ",
    el("span", { text: `${new Date(e.at).toLocaleTimeString()} · ${e.session.owner || "(no owner)"} · session ${e.session.id}` +
      (e.session.shared ? " · shared" : "") +
      (e.session.resumed_from_epoch ? ` · from epoch ${e.session.resumed_from_epoch}` : "") +
      (tokenOf(e.session) ? ` · token ${tokenOf(e.session)}` : "") +
      (e.type === "granted" && e.session.since_ms ? ` · waited ${fmtDur(e.session.since_ms)}` : "") +
      (EXIT_TYPES.includes(e.type) && tokenOf(e.session) ? ` · held ${fmtDur(e.session.since_ms)}` : "") }))));
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
// clusterLoaded: /v1/cluster has answered (or failed) since the page
// started; until then the Server page says it is loading, not what it is.
let clusterLoaded = false;
// server is what this node says of itself in /metrics: its version and
// lock protocol address (baton_server_info), and upAt, the local time it
// started (process_start_time_seconds against the answer's Date, both the
// server's clock).
let server = null;

// TOKEN_HELP explains a fencing token where one is shown.
const TOKEN_HELP = "A fencing token is epoch × 2^40 + grant: the epoch rises at every server start (in a cluster, with every new leader), " +
  "the grant counts the grants within it, so every grant's token is larger than all before it. Give it to the resource the lock guards, " +
  "and have it refuse tokens lower than the highest it has seen.";

// SHARED_TOKEN_HELP says what tokens mean when a name has several holders.
const SHARED_TOKEN_HELP = "With several holders, each has a token of its own, and one granted earlier can outlive later ones: " +
  "a resource that several hold at once cannot refuse every token below the highest it has seen (docs/clients.md, Semaphores and read/write locks, says how to fence them).";

function tokenTitle(token) {
  const tp = tokenParts(token);
  return tp ? `epoch ${tp.epoch}, grant ${tp.grant}` : "";
}

// limitNote says what the name's limit is, when it has one.
function limitNote(l) {
  if (l.limit === null) return null;
  return el("p", { id: "limit-note", class: "muted",
    text: `Limit ${l.limit}: at most ${l.limit} shared claims hold it at once (${l.holders.length} do); an exclusive claim holds it alone. ` +
      "Its shared sessions, holding or waiting, set the limit; a shared claim that asks for another is refused (LIMIT_MISMATCH)." });
}

// releaseAllButton force-releases every holder of l; it says how many.
function releaseAllButton(l) {
  const n = l.holders.length;
  return el("button", { type: "button", class: "danger", id: "force-release", "data-focus": "release",
    onclick: () => forceRelease(l.name, l) }, n > 1 ? `Force-release all ${n}…` : "Force-release…");
}

// tokenParts splits a token (a decimal string) into its epoch and its
// grant within the epoch, as BigInts, so every bit is kept.
function tokenParts(token) {
  if (typeof token !== "string" || !/^[0-9]{1,20}$/.test(token)) return null;
  const t = BigInt(token);
  return { epoch: t >> 40n, grant: t & (2n ** 40n - 1n) };
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
    stats.push(["Version", server.version], ["Lock protocol", { text: server.addr }],
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
  // A text value (an address) wraps within its box instead of being cut.
  $("stats").replaceChildren(...stats.map(([k, v]) => el("div", { class: "stat" }, el("span", { class: "muted", text: k }),
    v instanceof Node ? el("b", {}, v) : v && typeof v === "object" ? el("b", { class: "text", text: v.text }) : el("b", { text: String(v) }))));
  for (const b of document.querySelectorAll("#stats b.text")) b.parentElement.classList.add("text");
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
  if (!clusterLoaded) {
    box.replaceChildren(el("p", { class: "muted", id: "cluster-loading", role: "status", text: "loading…" }));
    return;
  }
  if (!cluster) {
    box.replaceChildren(el("p", { class: "muted", text: "Unknown: this node did not answer GET /v1/cluster; asking again." }));
    return;
  }
  if (cluster.role === "standalone") {
    const g = cluster.grace_remaining_ms > 0 ? ` Crash grace: ${fmtDur(cluster.grace_remaining_ms)} left.` : "";
    box.replaceChildren(el("p", { class: "muted", text: "Standalone server (no replicated mode)." + g }));
    return;
  }
  const c = cluster;
  // The grace is the leader's: a follower's own is none.
  const grace = (health && typeof health.grace_remaining_ms === "number" ? health : c).grace_remaining_ms;
  box.replaceChildren(
    el("dl", { class: "kv" },
      el("dt", { text: "This node" }), el("dd", { text: `${c.node_id} (${c.role})` }),
      el("dt", { text: "Leader" }), el("dd", { text: c.leader ? `${c.leader.id} at ${c.leader.addr} (ops ${c.leader.ops_addr})` : "none known" }),
      el("dt", { text: "Lease bound" }), el("dd", { text: fmtDur(c.lease_bound_ms) }),
      el("dt", { text: "Term / epoch" }), el("dd", { text: `${c.term} / ${c.epoch}` }),
      el("dt", { text: "Grace" }), el("dd", { text: grace > 0 ? `${fmtDur(grace)} left (the leader's)` : "none" })),
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
  clusterLoaded = true;
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

// forceRelease ends every holder of l; the confirmation names how many,
// and who when there are a few.
async function forceRelease(name, l) {
  const hs = [...l.holders];
  if (!hs.length) return;
  const who = (h) => `${h.owner || "(no owner)"} (session ${h.id}, token ${h.token})`;
  const text = hs.length === 1
    ? `The holder ${who(hs[0])} gets FORCE_RELEASED and the next waiter is granted the lock at once. Its work may still be running: only the fencing token protects the resource then.`
    : `All ${hs.length} holders get FORCE_RELEASED: ${hs.slice(0, 5).map(who).join(", ")}${hs.length > 5 ? `, and ${hs.length - 5} more` : ""}. ` +
      "The queue then moves at once: the next waiters that may hold are granted. Their work may still be running: only the fencing tokens protect the resource then.";
  if (!await confirmDialog(hs.length === 1 ? `Force-release ${name}?` : `Force-release all ${hs.length} holders of ${name}?`, text,
    hs.length === 1 ? "Force-release" : `Force-release all ${hs.length}`)) return;
  const r = await api("POST", `/v1/locks/${encodeURIComponent(name)}/release`);
  if (!r.ok) { toast(`Release failed: ${r.body && r.body.error || r.status}`); return; }
  // Several holders are answered {"released": [...]}, one as its SESSION.
  const ended = Array.isArray(r.body.released) ? r.body.released : [r.body];
  toast(ended.length === 1 ? `Released ${name} from session ${ended[0].id}` : `Released ${name} from ${ended.length} sessions`);
}

// releaseOne ends the one holder h of lock l; the others keep theirs.
async function releaseOne(name, l, h) {
  const others = l.holders.filter((x) => x.id !== h.id).length;
  if (!await confirmDialog(`Force-release one holder of ${name}?`,
    `The holder ${h.owner || "(no owner)"} (session ${h.id}, token ${h.token}) gets FORCE_RELEASED; ` +
    (others ? `the other ${others} holder${others > 1 ? "s keep theirs" : " keeps its"}, and ` : "") +
    "the next waiter that may hold is granted at once. Its work may still be running: only the fencing token protects the resource then.",
    "Force-release")) return;
  const r = await api("POST", `/v1/sessions/${encodeURIComponent(h.id)}/release`);
  toast(r.ok ? `Released session ${h.id} of ${name}` : `Release failed: ${r.body && r.body.error || r.status}`);
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
    clusterLoaded = false;
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
    for (const h of l.holders) lease = Math.min(lease, h.lease);
  }
  setTimeout(freshnessLoop, Math.max(250, Math.min(1000, lease / 8)));
})();
setInterval(pollServer, 2000);
start();
