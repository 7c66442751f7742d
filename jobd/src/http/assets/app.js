// The p2pmp status page: reads the JSON API once, then follows its
// server-sent events (/api/events); nothing is reloaded. No framework, no build step.
"use strict";

const state = { nodes: [], jobs: [], ring: null, zones: null, daemon: null, hover: null, zoneHover: null };
const openJobs = new Set();
const SVG = "http://www.w3.org/2000/svg";
const R = 110;

function el(tag, attrs, ...kids) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "-";
  const s = ms / 1000;
  if (s < 10) return s.toFixed(1) + " s";
  if (s < 120) return Math.round(s) + " s";
  const m = Math.floor(s / 60);
  if (m < 120) return m + " min " + Math.round(s % 60) + " s";
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}

const SIGNALS = { 1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
  9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM" };

function exitText(code) {
  if (code === null || code === undefined) return null;
  if (code < 0) return "killed by " + (SIGNALS[-code] || "signal " + -code);
  return "exit " + code;
}

function bar(done, total, busy) {
  const pct = total > 0 ? Math.min(100, Math.round((100 * done) / total)) : 100;
  return el("span", { class: busy ? "bar busy" : "bar", title: pct + "%" }, el("i", { style: "width:" + pct + "%" }));
}

// ---- nodes -----------------------------------------------------------------

function freeRatio(n) {
  return n.slots_total > 0 ? n.slots / n.slots_total : n.slots > 0 ? 1 : 0;
}

function renderNodes() {
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren(...state.nodes.map((n) => {
    const total = n.slots_total || n.slots;
    return el("tr", { "data-addr": n.addr, id: "node-" + n.addr },
      el("td", { class: "mono", text: n.addr }),
      el("td", { text: n.os + " / " + n.arch }),
      el("td", { class: "num", text: n.cores }),
      el("td", { class: "num", text: bytes(n.mem_mb * 1048576) }),
      el("td", {}, bar(n.slots, total, freeRatio(n) < 0.5), el("span", { class: "slots", text: n.slots + " / " + total })),
      el("td", { class: "num", text: n.load === null ? "-" : n.load.toFixed(2) }),
      el("td", { class: "num", text: n.mem_free_mb === null ? "-" : bytes(n.mem_free_mb * 1048576) }),
      el("td", { text: n.tags.concat(Object.entries(n.attributes || {}).map(([k, v]) => k + "=" + v)).join(", ") }));
  }));
  document.getElementById("node-count").textContent = state.nodes.length + " in the overlay";
}

// ---- the ring ---------------------------------------------------------------

function at(pos, r) {
  const a = pos * 2 * Math.PI - Math.PI / 2;
  return [r * Math.cos(a), r * Math.sin(a)];
}

function renderRing() {
  const svg = document.getElementById("ring");
  const ring = state.ring;
  const nodes = ring ? ring.nodes : [];
  const byAddr = new Map(nodes.map((n) => [n.addr, n]));
  const free = new Map(state.nodes.map((n) => [n.addr, freeRatio(n)]));
  const kids = [el("svg:circle", { class: "orbit", r: R }), el("svg:line", { class: "zero", x1: 0, y1: -R - 6, x2: 0, y2: -R + 6 }),
    el("svg:text", { class: "label", x: 3, y: -R - 8, text: "id 0" })];
  const hot = state.hover && byAddr.get(state.hover);
  if (hot) {
    const [x0, y0] = at(hot.pos, R);
    for (const f of hot.fingers) {
      const t = byAddr.get(f.node);
      if (!t) continue;
      const [x1, y1] = at(t.pos, R);
      kids.push(el("svg:path", { class: "finger", d: `M${x0},${y0} Q0,0 ${x1},${y1}` }));
    }
    for (const s of hot.successors) {
      const t = byAddr.get(s);
      if (!t) continue;
      const [x1, y1] = at(t.pos, R);
      kids.push(el("svg:line", { class: "succ", x1: x0, y1: y0, x2: x1, y2: y1 }));
    }
  }
  const labels = nodes.length <= 24;
  // The page's own node is drawn last, so a neighbour close by on the ring
  // never covers it.
  const order = [...nodes.filter((n) => n.addr !== ring.me), ...nodes.filter((n) => n.addr === ring.me)];
  for (const n of order) {
    const [x, y] = at(n.pos, R);
    const f = free.get(n.addr);
    const fill = f === undefined ? "#999" : f >= 0.5 ? "#23884a" : f > 0 ? "#b7791f" : "#c23b30";
    const cls = "node" + (ring.me === n.addr ? " me" : "") + (state.hover === n.addr ? " hot" : "");
    kids.push(el("svg:circle", { class: cls, cx: x, cy: y, r: 6, fill, "data-addr": n.addr,
      onmouseenter: () => { state.hover = n.addr; renderRing(); }, onclick: () => { state.hover = n.addr; renderRing(); } }));
    if (labels) {
      const [lx, ly] = at(n.pos, R + 16);
      kids.push(el("svg:text", { class: "label", x: lx, y: ly + 3, "text-anchor": "middle", text: ":" + n.addr.split(":").pop() }));
    }
  }
  svg.replaceChildren(...kids);
  document.getElementById("ring-count").textContent = nodes.length + " node(s), ids on a 2^" + (ring ? ring.bits : 160) + " ring";
  const info = document.getElementById("ring-info");
  if (!hot) {
    info.replaceChildren("Point at a node: its ", el("span", { class: "key-succ", text: "successors" }), " and ",
      el("span", { class: "key-finger", text: "fingers" }), ". The outlined node is the one serving this page.");
    return;
  }
  const src = hot.source === "node" ? "as the node itself reports them" : "computed from the node list (a settled ring of these nodes)";
  info.replaceChildren(
    el("div", {}, el("b", { class: "mono", text: hot.addr }), " id ", el("span", { class: "mono", text: hot.id.slice(0, 12) + "\u2026" })),
    el("div", { class: "muted", text: "Neighbours " + src + "." }),
    el("div", {}, "predecessor ", el("span", { class: "mono", text: hot.predecessor || "-" })),
    el("div", {}, el("span", { class: "key-succ", text: "successors " }), el("span", { class: "mono", text: hot.successors.join(", ") || "-" })),
    el("div", {}, el("span", { class: "key-finger", text: "fingers " }),
      el("span", { class: "mono", text: hot.fingers.map((f) => "[" + f.index + "] " + f.node).join(", ") || "-" })));
}

// ---- CAN zones --------------------------------------------------------------

const SIDE = 232;

// A colour per node, apart from its neighbours' (nodes in address order, hues a golden angle apart).
function hueOf(i) { return "hsl(" + Math.round((i * 137.508) % 360) + ", 55%, 55%)"; }

// A zone's box in the first two dimensions (one dimension: the full height).
function box(z) {
  const y0 = z.lo.length > 1 ? z.lo[1] : 0, y1 = z.hi.length > 1 ? z.hi[1] : 1;
  return { x: z.lo[0] * SIDE, y: (1 - y1) * SIDE, w: (z.hi[0] - z.lo[0]) * SIDE, h: (y1 - y0) * SIDE };
}

function pct(f) { return (100 * f).toFixed(f > 0 && f < 0.01 ? 2 : 1) + "%"; }

function renderZones() {
  const svg = document.getElementById("zones");
  const doc = state.zones;
  const nodes = doc ? doc.nodes : [];
  const byAddr = new Map(nodes.map((n) => [n.addr, n]));
  const hot = state.zoneHover && byAddr.get(state.zoneHover);
  const nbrs = new Set(hot ? hot.neighbours : []);
  const kids = [el("svg:rect", { class: "frame", x: 0, y: 0, width: SIDE, height: SIDE }),
    el("svg:text", { class: "axis", x: 0, y: SIDE + 9, text: "0" }),
    el("svg:text", { class: "axis", x: SIDE, y: SIDE + 9, "text-anchor": "end", text: "dimension 0 \u2192 1" }),
    el("svg:text", { class: "axis", x: -4, y: 0, "text-anchor": "end", transform: `rotate(-90 -4 0)`,
      text: doc && doc.dims > 1 ? "dimension 1 \u2192" : "" })];
  const labels = [];
  for (const [i, n] of nodes.entries()) {
    const cls = "zone" + (doc.me === n.addr ? " me" : "") + (hot && hot.addr === n.addr ? " hot" : "") + (nbrs.has(n.addr) ? " nbr" : "");
    let biggest = null;
    for (const z of n.zones) {
      const b = box(z);
      if (!biggest || b.w * b.h > biggest.w * biggest.h) biggest = b;
      const pick = () => { state.zoneHover = n.addr; renderZones(); };
      kids.push(el("svg:rect", { class: cls, x: b.x, y: b.y, width: b.w, height: b.h, fill: hueOf(i),
        "data-addr": n.addr, "data-depth": z.depth, onmouseenter: pick, onclick: pick }));
    }
    if (biggest && nodes.length <= 32 && biggest.w >= 18 && biggest.h >= 10) {
      labels.push(el("svg:text", { class: "label", x: biggest.x + biggest.w / 2, y: biggest.y + biggest.h / 2 + 3,
        "text-anchor": "middle", text: ":" + n.addr.split(":").pop() }));
    }
  }
  svg.replaceChildren(...kids, ...labels);
  const dims = doc && doc.dims;
  document.getElementById("zones-count").textContent = nodes.length + " node(s) told their zones" +
    (dims ? ", " + dims + " dimension(s)" + (dims > 2 ? " (the first two drawn: boxes may overlap)" : "") : "");
  const info = document.getElementById("zones-info");
  if (!hot) {
    info.replaceChildren("Point at a zone: its node and the node's ", el("span", { class: "key-nbr", text: "neighbours" }),
      ". The outlined zone is the node serving this page; each node tells its own zones and neighbours.");
    return;
  }
  const zs = hot.zones.map((z) => "[" + z.lo.map((l, k) => pct(l) + "\u2013" + pct(z.hi[k])).join(" \u00d7 ") + "]");
  info.replaceChildren(
    el("div", {}, el("b", { class: "mono", text: hot.addr }), " owns " + pct(hot.volume) + " of the space"),
    el("div", {}, "zones ", el("span", { class: "mono", text: zs.join(", ") || "none (joining)" })),
    el("div", {}, el("span", { class: "key-nbr", text: "neighbours " }), el("span", { class: "mono", text: hot.neighbours.join(", ") || "-" })));
}

function renderOverlay() {
  const kind = state.daemon && state.daemon.overlay_kind;
  document.getElementById("ring-panel").hidden = kind === "can";
  document.getElementById("zones-panel").hidden = kind !== "can";
}

// ---- jobs -------------------------------------------------------------------

// Whether a job is over: a rank stopped with it has no exit of its own.
function isOver(j) {
  return ["done", "failed", "killed"].includes(j.phase);
}

function elapsed(j) {
  const t = j.times || {};
  if (t.ended_ms) return "took " + duration(t.ended_ms - t.seen_ms);
  if (isOver(j)) return "ended before this page saw it";
  return duration(Date.now() - t.seen_ms);
}

function rankState(r, over) {
  if (r.exit !== null) return exitText(r.exit);
  if (over) return r.started ? "stopped" : "not started";
  if (r.started) return "running";
  return r.node ? "placed" : "waiting";
}

// A rank's last checkpoint and its recoveries, in words.
function checkpointText(r) {
  const c = r.checkpoint;
  const last = c ? `epoch ${c.epoch}, ${new Date(c.unix_ms).toLocaleTimeString()}, ${bytes(c.stored_bytes)} (${bytes(c.raw_bytes)} raw)` : "none";
  const rec = (r.recoveries || []).map((x) => `recovered from epoch ${x.epoch} at ${new Date(x.unix_ms).toLocaleTimeString()}`);
  return [last, ...rec].join("; ");
}

function renderJob(j) {
  const over = isOver(j);
  const running = over ? 0 : j.ranks.filter((r) => r.started && r.exit === null).length;
  const exited = j.ranks.filter((r) => r.exit !== null).length;
  const summary = el("summary", {},
    el("span", { class: "phase " + j.phase, text: j.phase }),
    el("span", { class: "mono", title: j.job, text: j.job.slice(0, 12) }),
    el("b", { text: j.executable.split("/").pop(), title: j.executable }),
    el("span", { class: "counts", text: `${j.ranks.length} rank(s): ${running} running, ${exited} exited` }),
    el("span", { class: "muted", text: "on " + j.holder }),
    el("span", { class: "muted elapsed", text: elapsed(j) }),
    j.error ? el("span", { class: "why", text: j.error }) : null,
    j.waiting ? el("span", { class: "waiting", text: j.waiting }) : null);
  const ranks = el("table", {}, el("thead", {}, el("tr", {}, ["rank", "node", "state", "checkpoint"].map((h) => el("th", { text: h })))),
    el("tbody", {}, j.ranks.map((r) => el("tr", { "data-rank": r.rank },
      el("td", { text: r.rank }), el("td", { class: "mono", text: r.node || "-" }), el("td", { text: rankState(r, over) }),
      el("td", { class: "checkpoint", text: checkpointText(r) })))));
  const tr = j.transfers || { staging: [], fetching: [] };
  const moving = [...tr.staging.map((s) => ["files to " + s.node, s]), ...tr.fetching.map((f) => [f.name + " of rank " + f.rank, f])];
  const transfers = moving.length === 0 ? null : el("div", { class: "transfers" }, moving.map(([what, t]) =>
    el("div", {}, bar(t.done, t.total, t.done < t.total), `${what}: ${bytes(t.done)} of ${bytes(t.total)}`)));
  const tails = el("div", { class: "tails" }, Object.entries(j.tail || {}).map(([rank, lines]) =>
    el("div", { class: "tail" }, el("h4", { text: "rank " + rank + ", last lines" }),
      el("pre", {}, lines.map((l) => el("span", { class: l.stream, text: l.line + "\n" }))))));
  const details = el("details", { class: "job", id: "job-" + j.job, "data-job": j.job, "data-phase": j.phase },
    summary, el("div", { class: "body" }, ranks, transfers, tails));
  details.open = openJobs.has(j.job);
  details.addEventListener("toggle", () => { if (details.open) openJobs.add(j.job); else openJobs.delete(j.job); });
  return details;
}

function renderJobs() {
  const box = document.getElementById("jobs");
  if (state.jobs.length === 0) {
    box.replaceChildren(el("p", { class: "muted" }, "No jobs yet. ", el("code", { text: "p2pjob run -n 4 PROGRAM" }), " starts one."));
  } else {
    box.replaceChildren(...state.jobs.map(renderJob));
  }
  const live = state.jobs.filter((j) => !isOver(j)).length;
  document.getElementById("job-count").textContent = state.jobs.length + " known, " + live + " not over";
}

function renderDaemon() {
  const d = state.daemon;
  if (!d) return;
  document.getElementById("daemon").textContent = "node " + (d.overlay || "?") + " (control " + d.control + ")";
  const p = document.getElementById("problem");
  p.hidden = !d.error;
  p.textContent = d.error ? "The daemon cannot be asked: " + d.error + ". Retrying every second." : "";
}

// ---- data -------------------------------------------------------------------

const apply = {
  nodes: (d) => { state.nodes = d.nodes; renderNodes(); renderRing(); renderZones(); },
  jobs: (d) => { state.jobs = d.jobs; renderJobs(); },
  ring: (d) => { state.ring = d; renderRing(); },
  zones: (d) => { state.zones = d; renderZones(); },
  daemon: (d) => { state.daemon = d; renderDaemon(); renderOverlay(); },
};

function live(on) {
  const e = document.getElementById("live");
  e.className = "live " + (on ? "on" : "off");
  e.textContent = on ? "live" : "reconnecting\u2026";
}

async function start() {
  for (const name of Object.keys(apply)) {
    try {
      const r = await fetch("/api/" + name);
      if (r.ok) apply[name](await r.json());
    } catch (e) { live(false); }
  }
  const events = new EventSource("/api/events");
  for (const name of Object.keys(apply)) events.addEventListener(name, (e) => apply[name](JSON.parse(e.data)));
  events.onopen = () => live(true);
  events.onerror = () => live(false);
  // Running jobs' elapsed times move on.
  setInterval(() => { if (state.jobs.some((j) => !j.times.ended_ms)) renderJobs(); }, 1000);
}

start();
