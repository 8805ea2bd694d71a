// Pivot's page: plain JS, no build. Talks to /api with the bearer token kept in localStorage,
// and reads each session's Server-Sent Events through fetch() streaming so the token can travel
// in a header (EventSource cannot send one).
"use strict";

const $ = (sel) => document.querySelector(sel);
const S = { token: localStorage.getItem("pivot.token") || "", session: null, lastSeq: 0,
  hyps: new Map(), stream: null, host: "", decided: new Set() /* action keys already shown */ };

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

async function api(path, opts = {}) {
  const headers = { Authorization: `Bearer ${S.token}`, ...(opts.headers || {}) };
  if (opts.body !== undefined) { headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(opts.body); }
  const res = await fetch(path, { ...opts, headers });
  if (res.status === 401) { askToken(); throw new Error("token refused"); }
  if (!res.ok) throw new Error(`${res.status}: ${(await res.json().catch(() => ({}))).detail || res.statusText}`);
  return res.json();
}

function askToken() { const d = $("#token-dialog"); if (!d.open) d.showModal(); $("#token-input").focus(); }
function status(text) { $("#status-line").textContent = text; }
function say(kind, text) { const li = el("li", { class: kind }, text); $("#chat").append(li); li.scrollIntoView({ block: "nearest" }); return li; }

// -- hosts, sessions, memory -------------------------------------------------------------
async function loadHosts() {
  const hosts = await api("/api/hosts?check=true");
  const sel = $("#host"); sel.replaceChildren();
  for (const h of hosts) {
    const mark = h.reachable === false ? " (unreachable)" : "";
    sel.append(el("option", { value: h.name, title: h.title || h.detail }, `${h.name}${mark}`));
  }
  const keep = localStorage.getItem("pivot.host");
  if (keep && hosts.some((h) => h.name === keep)) sel.value = keep;
  S.host = sel.value; $("#conn").textContent = `${hosts.length} hosts`;
}

async function loadSessions() {
  const rows = await api("/api/sessions?limit=30");
  const ul = $("#sessions"); ul.replaceChildren();
  for (const r of rows) {
    const b = el("button", { type: "button", onclick: () => openSession(r.session_id) },
      `${r.host} · ${r.status}${r.root_cause ? " · " + r.root_cause : ""}`);
    if (r.session_id === S.session) b.setAttribute("aria-current", "true");
    b.title = r.symptom; ul.append(el("li", {}, b));
  }
}

async function loadNotes() {
  const host = S.host; if (!host) return;
  $("#todo-host").textContent = host;
  const [todos, handoffs] = await Promise.all([api(`/api/hosts/${encodeURIComponent(host)}/todos`),
    api(`/api/hosts/${encodeURIComponent(host)}/handoffs?limit=1`)]);
  const ul = $("#todos"); ul.replaceChildren();
  for (const t of todos) {
    ul.append(el("li", {}, t.text, " ", el("button", { type: "button", "aria-label": `close todo ${t.text}`,
      onclick: async () => { await api(`/api/todos/${t.id}/close`, { method: "POST" }); loadNotes(); } }, "done")));
  }
  $("#handoff").textContent = handoffs.length ? `${handoffs[0].created}\n${handoffs[0].text}` : "none yet";
}

async function loadLedger() {
  const led = await api("/api/loop/ledger");
  const body = $("#ledger tbody"); body.replaceChildren();
  if (!led.available || !led.entries.length) { $("#ledger-note").textContent = led.available ? "no experiments yet" : "no overnight loop here yet"; $("#ledger-chart").replaceChildren(); return; }
  led.entries.forEach((e, i) => body.append(el("tr", {}, el("td", {}, String(i + 1)),
    el("td", {}, String(e.name || e.change || e.diff || "")), el("td", {}, String(e.status || "")), el("td", {}, fmt(metricOf(e))))));
  $("#ledger-chart").replaceChildren(chart(led.entries.map(metricOf), led.baseline));
  $("#ledger-note").textContent = `${led.plan ? "plan " + led.plan + "; " : ""}bars: metric per experiment (green beats the baseline); dashed: baseline`;
}
const metricOf = (e) => (typeof e.metric === "number" ? e.metric : e.metric_mean ?? e.mean ?? null);
const fmt = (v) => (v == null ? "–" : Number(v).toPrecision(4));

function chart(values, baseline) {
  // Bars per experiment against a dashed baseline line; inline SVG, no library.
  const W = 320, H = 140, pad = 24, ns = "http://www.w3.org/2000/svg";
  const nums = values.filter((v) => v != null).concat(baseline != null ? [baseline] : []);
  const max = Math.max(1e-9, ...nums) * 1.1, bw = (W - pad * 2) / Math.max(1, values.length);
  const y = (v) => H - pad - (v / max) * (H - pad * 2);
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "metric per experiment against the baseline");
  const add = (tag, a) => { const n = document.createElementNS(ns, tag); for (const k in a) n.setAttribute(k, a[k]); svg.append(n); return n; };
  values.forEach((v, i) => { if (v == null) return; add("rect", { x: pad + i * bw + 2, y: y(v), width: Math.max(2, bw - 4), height: H - pad - y(v), fill: baseline != null && v > baseline ? "#2a7" : "#888" }); });
  if (baseline != null) add("line", { x1: pad, x2: W - pad, y1: y(baseline), y2: y(baseline), stroke: "#c33", "stroke-dasharray": "4 3" });
  add("line", { x1: pad, x2: W - pad, y1: H - pad, y2: H - pad, stroke: "#333" });
  return svg;
}

// -- one session ---------------------------------------------------------------------------
function resetView() {
  S.hyps.clear(); S.decided.clear(); S.lastSeq = 0; renderBoard();
  $("#chat").replaceChildren(); $("#observations").replaceChildren(); $("#approvals").replaceChildren();
  const c = $("#conclusion"); c.hidden = true; c.replaceChildren();
}

async function openSession(id) {
  if (S.stream) S.stream.abort();
  resetView(); S.session = id; loadSessions();
  const d = await api(`/api/sessions/${id}`);
  if (d.host !== S.host && [...$("#host").options].some((o) => o.value === d.host)) { $("#host").value = d.host; S.host = d.host; loadNotes(); }
  say("user", d.symptom);
  follow(id, 0);
}

async function follow(id, after) {
  // SSE over fetch: parse `id:`/`event:`/`data:` blocks as they arrive; resume with Last-Event-ID.
  if (S.stream) S.stream.abort();
  const ctrl = new AbortController(); S.stream = ctrl;
  status("streaming…");
  try {
    const res = await fetch(`/api/sessions/${id}/events`, { signal: ctrl.signal,
      headers: { Authorization: `Bearer ${S.token}`, "Last-Event-ID": String(after) } });
    if (!res.ok) throw new Error(`events: ${res.status}`);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let m;
      while ((m = /\r\n\r\n|\n\n|\r\r/.exec(buf))) {
        const block = buf.slice(0, m.index); buf = buf.slice(m.index + m[0].length);
        const ev = parseBlock(block);
        if (ev && id === S.session) handle(ev);
      }
    }
  } catch (err) { if (err.name !== "AbortError") say("error", String(err)); }
  if (S.stream === ctrl) { S.stream = null; refreshStatus(id); }
}

function parseBlock(block) {
  let data = "", type = "message", seq = null;
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (!line || line.startsWith(":")) continue;
    const i = line.indexOf(":"), k = i < 0 ? line : line.slice(0, i), v = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (k === "data") data += (data ? "\n" : "") + v; else if (k === "event") type = v; else if (k === "id") seq = Number(v);
  }
  if (!data) return null;
  try { return { type, seq, ...JSON.parse(data) }; } catch { return null; }
}

async function refreshStatus(id) {
  const d = await api(`/api/sessions/${id}`).catch(() => null);
  if (!d || id !== S.session) return;
  status(`session ${id}: ${d.status}`);
  if (d.report) showReport(d.report);
  renderApprovals(await api("/api/approvals"));
  loadSessions(); loadNotes();
}

function handle(ev) {
  if (ev.seq) { if (ev.seq <= S.lastSeq) return; S.lastSeq = ev.seq; }
  const d = ev.data || {};
  switch (ev.type) {
    case "observation": addObservation(d); break;
    case "hypothesis": for (const h of d.hypotheses || [d.hypothesis || d]) upsertHyp(h); break;
    case "finding": say("finding", `finding: ${d.name || d.signature || d.label || ""} ${d.line ? "— " + d.line : d.text || ""}`.trim()); break;
    case "approval_request":
      // On resume the graph re-enters its approval node and repeats the request first: show once.
      if (S.decided.has(actionKey(d))) break;
      S.decided.add(actionKey(d));
      say("agent", `wants to run ${d.tool}: ${d.reason || ""}`); status("waiting for your approval"); pollApprovals(ev.session_id); break;
    case "approval": say("approval", `${(d.approved ?? d.approve) ? "approved" : "denied"}${d.reason ? ": " + d.reason : ""}`); $("#approvals").replaceChildren(); break;
    case "message": streamText(d); break;
    case "conclusion": showReport(d.report || d); break;
    case "error": say("error", d.error || (d.guardrail ? `guardrail: ${d.guardrail}` : JSON.stringify(d))); break;
    case "session": status(`session ${ev.session_id}: running on ${d.host || S.host}`); break;
  }
}

const actionKey = (d) => JSON.stringify([d.tool, d.args]);

let lastMsg = null;
function streamText(d) {
  // Tokens of one answer arrive as several `message` events that share an id; whole texts stand alone.
  if (d.token != null) { if (!lastMsg || lastMsg.dataset.mid !== String(d.id)) { lastMsg = say("agent", ""); lastMsg.dataset.mid = String(d.id); } lastMsg.textContent += d.token; return; }
  lastMsg = null; say(d.role === "user" ? "user" : "agent", d.text || "");
}

function addObservation(o) {
  const lines = o.lines || (o.text ? o.text.split("\n") : []);
  const head = `${o.id || ""} ${o.tool || ""}${o.args && Object.keys(o.args).length ? " " + JSON.stringify(o.args) : ""}${o.ok === false ? " (failed)" : ""}`;
  $("#observations").append(el("li", {}, el("strong", {}, head), el("pre", {}, lines.slice(-12).join("\n"))));
}

function upsertHyp(h) { if (h && h.label) { S.hyps.set(h.label, { ...(S.hyps.get(h.label) || {}), ...h }); renderBoard(); } }

function renderBoard() {
  for (const col of document.querySelectorAll("#board .col")) col.querySelector(".cards").replaceChildren();
  for (const h of S.hyps.values()) {
    const col = document.querySelector(`#board .col[data-status="${h.status || "open"}"] .cards`);
    if (!col) continue;
    const card = el("article", { class: "hyp", "data-label": h.label }, el("div", { class: "label" }, h.label),
      h.statement ? el("div", {}, h.statement) : null);
    for (const e of h.evidence || []) card.append(el("div", { class: "ev", title: e.observation }, e.line));
    for (const e of h.against || []) card.append(el("div", { class: "ev against", title: e.observation }, e.line));
    col.append(card);
  }
}

function showReport(r) {
  if (!r || !r.status) return;
  for (const h of r.hypotheses || []) upsertHyp(h);
  const c = $("#conclusion"); c.hidden = false;
  c.replaceChildren(el("h2", {}, `Conclusion: ${r.root_cause || "none"} (${r.status}${r.confidence ? ", " + Math.round(r.confidence * 100) + "%" : ""})`),
    r.summary ? el("p", {}, r.summary) : null,
    ...(r.evidence || []).map((e) => el("div", { class: "ev", title: e.observation }, e.line)),
    r.ruled_out && r.ruled_out.length ? el("p", {}, `Ruled out: ${r.ruled_out.join(", ")}`) : null,
    r.next_step ? el("p", {}, `Next: ${r.next_step}`) : null);
  if (r.status !== "awaiting_approval") status(`session ${r.session_id}: ${r.status}`);
}

async function pollApprovals(sid) {
  // The request's id exists once the graph has paused at its checkpoint, just after the event.
  for (let i = 0; i < 40 && sid === S.session; i++) {
    const list = await api("/api/approvals").catch(() => []);
    if (list.some((a) => a.session_id === sid)) { renderApprovals(list); return; }
    await new Promise((r) => setTimeout(r, 150));
  }
}

function renderApprovals(list) {
  const box = $("#approvals"); box.replaceChildren();
  for (const a of list.filter((x) => x && x.id && x.session_id === S.session)) {
    const reason = el("input", { id: `reason-${a.id}`, placeholder: "reason (optional)", maxlength: "2000" });
    const decide = async (approve) => {
      try { await api(`/api/approvals/${encodeURIComponent(a.id)}`, { method: "POST", body: { approve, reason: reason.value } }); }
      catch (err) { say("error", String(err)); return; }
      box.replaceChildren(); follow(S.session, S.lastSeq);
    };
    box.append(el("div", { class: "approval", role: "group", "aria-label": `approval ${a.tool}` },
      el("strong", {}, `The agent wants to run ${a.tool}`), el("p", {}, a.reason),
      ...Object.entries(a.args || {}).map(([k, v]) => el("div", {}, el("span", { class: "muted" }, `${k}: `),
        typeof v === "string" && v.includes("\n") ? el("pre", {}, v) : el("code", {}, typeof v === "string" ? v : JSON.stringify(v)))),
      el("div", { class: "row" }, el("label", { for: `reason-${a.id}`, class: "sr" }, "reason"), reason,
        el("button", { type: "button", class: "primary", onclick: () => decide(true) }, "Approve"),
        el("button", { type: "button", onclick: () => decide(false) }, "Deny"))));
  }
}

// -- sending -------------------------------------------------------------------------------
async function send() {
  const text = $("#chat-text").value.trim(); if (!text) return;
  $("#chat-text").value = "";
  try {
    if (S.session) {
      say("user", text);
      await api(`/api/sessions/${S.session}/messages`, { method: "POST", body: { text } });
      follow(S.session, S.lastSeq);
    } else {
      resetView(); say("user", text);
      const r = await api("/api/sessions", { method: "POST", body: { host: S.host, symptom: text } });
      S.session = r.session_id; loadSessions(); follow(r.session_id, 0);
    }
  } catch (err) { say("error", String(err)); }
}

function tokenFromLink() {
  // `pivot serve` prints a one-time sign-in link `/#token=…`: keep the token, drop it from the URL.
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!m) return;
  S.token = decodeURIComponent(m[1]); localStorage.setItem("pivot.token", S.token);
  history.replaceState(null, "", location.pathname + location.search);
}

function boot() {
  tokenFromLink();
  $("#chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("#chat-text").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); } });
  $("#new-session").addEventListener("click", () => { if (S.stream) S.stream.abort(); S.session = null; resetView(); loadSessions(); status("New investigation: describe the symptom."); $("#chat-text").focus(); });
  $("#host").addEventListener("change", (e) => { S.host = e.target.value; localStorage.setItem("pivot.host", S.host); loadNotes(); });
  $("#todo-form").addEventListener("submit", async (e) => { e.preventDefault(); const t = $("#todo-text"); if (!t.value.trim()) return;
    await api(`/api/hosts/${encodeURIComponent(S.host)}/todos`, { method: "POST", body: { text: t.value.trim() } }); t.value = ""; loadNotes(); });
  $("#token-btn").addEventListener("click", askToken);
  $("#token-form").addEventListener("submit", () => { S.token = $("#token-input").value.trim(); localStorage.setItem("pivot.token", S.token); start(); });
  if (!S.token) askToken(); else start();
}

async function start() {
  try { await loadHosts(); await Promise.all([loadSessions(), loadNotes(), loadLedger()]); status("Pick a host and describe the symptom."); }
  catch (err) { status(String(err)); }
}

boot();
