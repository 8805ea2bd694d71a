// Pivot's page: plain JS, no build. Talks to /api with the bearer token kept in localStorage and
// reads each session's Server-Sent Events through fetch() streaming, so the token travels in a
// header (EventSource cannot send one) and a lost connection resumes with Last-Event-ID.
"use strict";

const $ = (sel) => document.querySelector(sel);
const S = { token: localStorage.getItem("pivot.token") || "", session: null, lastSeq: 0,
  hyps: new Map(), stream: null, host: "", shownRequests: new Set(), report: null,
  waiting: false, step: null, symptomShown: false, tab: "chat", side: "board", echoes: [], replies: new Set(), whyNot: new Map(),
  causes: {}, fit: null };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null) continue;
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null && k !== false) e.append(k);
  return e;
}

class ApiError extends Error {}

async function api(path, opts = {}) {
  const headers = { Authorization: `Bearer ${S.token}`, ...(opts.headers || {}) };
  if (opts.body !== undefined) { headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(opts.body); }
  let res;
  try { res = await fetch(path, { ...opts, headers }); }
  catch { throw new ApiError("the server is not answering (restarting?); the page retries on its own"); }
  if (res.status === 401) { signedIn(false); askToken(); throw new ApiError("sign in first: the token was refused"); }
  signedIn(true);
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    const d = body.detail;
    throw new ApiError(typeof d === "string" ? d : d && d.error ? d.error : `${res.status} ${res.statusText}`);
  }
  return res.json();
}

// -- words -------------------------------------------------------------------------------------
const STATUS_WORDS = { awaiting_approval: "waiting for your approval", running: "running", queued: "queued",
  concluded: "concluded", healthy: "healthy: up and answering", insufficient_evidence: "not enough evidence yet", budget_exhausted: "stopped: out of budget",
  error: "failed" };
const statusWord = (s) => STATUS_WORDS[s] || s || "";
const base = (p) => (typeof p === "string" ? p.split("/").pop() : "");
const cap = (s) => (s ? s[0].toUpperCase() + s.slice(1) : s);
function patternWords(p) {
  const alts = String(p || "").replace(/^\(\?i\)/, "").split("|").map((s) => s.replace(/\\/g, ""));
  return alts.slice(0, 3).join(", ") + (alts.length > 3 ? "…" : "");
}
// One plain sentence per tool call; the call itself and its raw output stay one click away.
const PHRASES = {
  gpu_status: () => "Checking what the GPUs hold",
  processes: () => "Looking for the inference server's processes",
  dmesg: () => "Reading the kernel log",
  disk: () => "Checking disk space and host memory",
  ports: () => "Checking which ports are taken",
  host_facts: () => "Reading driver and host facts",
  find_logs: () => "Looking for the server's logs and configs",
  log_tail: (a) => `Reading the end of ${base(a.path)}`,
  log_search: (a) => `Searching ${base(a.path)} for ${patternWords(a.pattern)}`,
  config_read: (a) => `Reading the config ${base(a.path)}`,
  packages: () => "Reading the installed torch, CUDA and engine versions",
  config_apply: (a) => `Changing ${base(a.path)}`,
};
const sentence = (tool, args) => (PHRASES[tool] ? PHRASES[tool](args || {}) : `Running ${tool}`);
const callText = (tool, args) => `${tool}(${Object.entries(args || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")})`;

// -- layout: chat first on a phone, board/evidence a tap away ----------------------------------
const WIDE = matchMedia("(min-width: 1100px)"), MID = matchMedia("(min-width: 700px)");
function layout() {
  const shown = new Set();
  if (WIDE.matches) { shown.add("sessions").add("chat").add(S.side === "sessions" ? "board" : S.side); }
  else if (MID.matches) { shown.add("chat").add(S.side); }
  else shown.add(S.tab);
  for (const p of document.querySelectorAll(".panel")) p.classList.toggle("shown", shown.has(p.dataset.panel));
  for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(shown.has(b.dataset.tab)));
  document.body.dataset.tab = S.tab; document.body.dataset.side = S.side;
}
function showTab(tab) {
  S.tab = tab; if (tab !== "chat") S.side = tab;
  layout();
}

// -- connection and status ---------------------------------------------------------------------
function conn(text, kind = "") { const c = $("#conn"); c.textContent = text; c.className = kind || "muted"; }
function status(text, waiting = false) { const s = $("#status-line"); s.textContent = text; s.classList.toggle("waiting", waiting); }
function signedIn(on) {
  // The header says the state the server last confirmed, not what to do: "Signed in" once a
  // token was accepted, "Sign in" while none is or it was refused.
  const b = $("#token-btn"); if (!b || b.classList.contains("signed-in") === on) return;
  b.classList.toggle("signed-in", on); b.textContent = on ? "Signed in" : "Sign in";
  b.setAttribute("aria-label", on ? "signed in; use another token" : "sign in");
}
function askToken() { const d = $("#token-dialog"); if (!d.open) d.showModal(); $("#token-input").focus(); }
function tokenFromLink() {
  // `pivot serve` prints a sign-in link `/#token=…`: keep the token, drop it from the address bar.
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!m) return;
  S.token = decodeURIComponent(m[1]); localStorage.setItem("pivot.token", S.token);
  history.replaceState(null, "", location.pathname + location.search);
}

function setWaiting(on) {
  S.waiting = on;
  $("#waiting-banner").hidden = !on;
  const r = $("#conclusion"); if (r) renderReplyState(r, S.report);
  renderAnswer();
  if (on) status(`session ${S.session}: ${statusWord("awaiting_approval")}`, true);
}

// -- the conversation --------------------------------------------------------------------------
function add(li) { const chat = $("#chat"); const near = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 80; chat.append(li); if (near) chat.scrollTop = chat.scrollHeight; return li; }
function say(kind, text) { return add(el("li", { class: kind }, text)); }

function step(text, tool, args, why) {
  const det = el("details", {}, el("summary", {}, "tool call and output"), el("pre", { class: "call" }, callText(tool, args)));
  if (why) det.append(el("p", { class: "muted" }, why));
  const li = add(el("li", { class: "step", "data-tool": tool }, el("span", { class: "say" }, text), det));
  li.dataset.open = "1"; return li;
}

function onMessage(d) {
  if (d.token != null) { // tokens of one streamed answer share an id
    let li = S.streaming && S.streaming.dataset.mid === String(d.id) ? S.streaming : null;
    if (!li) { li = say("agent", ""); li.dataset.mid = String(d.id); S.streaming = li; }
    li.textContent += d.token; return;
  }
  S.streaming = null;
  const text = d.text || "";
  if (d.role === "user") {
    // The page echoed it when it was sent: the stored event confirms that echo, never repeats it.
    const echo = S.echoes.find((li) => li.textContent === text);
    if (echo) { S.echoes = S.echoes.filter((li) => li !== echo); echo.classList.remove("sending"); return; }
    say("user", text); return;
  }
  if (S.replies.has(text)) { S.replies.delete(text); return; } // already shown from the route's answer
  const m = /^Next check: (\w+) (\{.*\}) because ([\s\S]*)$/.exec(text);
  if (m) {
    let args = {}; try { args = JSON.parse(m[2].replace(/'/g, '"')); } catch { /* python repr: keep it as text */ }
    const [, tool, , reason] = m; const why = /\(([^()]*)\)\s*$/.exec(reason);
    const plain = reason.replace(/\s*\([^()]*\)\s*$/, "");
    S.step = step(`Next, I'll ${plain}.`, tool, args, why ? cap(why[1]) : "");
    if (!Object.keys(args).length) S.step.querySelector(".call").textContent = `${tool} ${m[2]}`;
    return;
  }
  say("agent", text);
}

function onObservation(o) {
  addObservation(o);
  let li = S.step && S.step.dataset.tool === o.tool && S.step.dataset.open === "1" ? S.step : null;
  if (!li) li = step(sentence(o.tool, o.args), o.tool, o.args, "");
  li.dataset.open = "0";
  const lines = o.lines || [];
  const failed = o.ok === false;
  if (failed) li.querySelector(".say").append(el("span", { class: "muted" }, " (it did not answer: see the output)"));
  li.querySelector("details").append(el("pre", { class: "raw" }, lines.join("\n")),
    el("a", { href: `#obs-${o.id}`, "data-obs": o.id }, `evidence ${o.id}`));
  S.step = null;
}

function addObservation(o) {
  const head = `${o.id || ""} · ${sentence(o.tool, o.args)}${o.ok === false ? " (failed)" : ""}`;
  const lines = o.lines || (o.text ? o.text.split("\n") : []);
  const li = el("li", { id: `obs-${o.id}` }, el("div", { class: "head" }, head),
    el("details", {}, el("summary", {}, callText(o.tool, o.args)), el("pre", {}, lines.join("\n"))));
  const path = o.args && typeof o.args.path === "string" ? o.args.path : null;
  if (path && S.sessionHost) {
    const host = S.sessionHost;
    const open = el("button", { type: "button", class: "open-file", "aria-label": `read the end of ${path}` }, "read the whole file");
    open.addEventListener("click", async () => {
      // Through the file API: host logs and configs only, read on the host itself.
      const out = el("pre", { class: "file" }, "reading…"); open.replaceWith(out);
      try {
        const f = await api(`/api/hosts/${encodeURIComponent(host)}/file?path=${encodeURIComponent(path)}&max_bytes=64000`);
        out.textContent = f.error ? `cannot read it: ${f.error}` : f.text;
      } catch (err) { out.textContent = `not readable here: ${err.message}`; }
    });
    li.append(open);
  }
  $("#observations").append(li);
}

function addFinding(f) {
  const s = Number(f.strength || 0), dir = s >= 0 ? "for" : "against";
  $("#findings").append(el("li", { id: `finding-${f.id}` },
    el("span", { class: `for-against ${dir}` }, `${dir} ${f.label}`), ` (${s >= 0 ? "+" : ""}${s}) `,
    f.note ? el("span", {}, f.note) : null,
    el("span", { class: `ev ${dir === "against" ? "against" : ""}` }, f.line || ""),
    f.observation ? el("a", { href: `#obs-${f.observation}`, "data-obs": f.observation }, `from ${f.observation}`) : null));
}

function upsertHyp(h) {
  if (!h || !h.label) return;
  const old = S.hyps.get(h.label) || {}, merged = { ...old, ...h };
  const note = (h.against || []).map((e) => e.note).find(Boolean);
  if (note && !S.whyNot.has(h.label)) S.whyNot.set(h.label, note); // why it fell, in words
  for (const k of ["evidence", "against"]) if (!(h[k] || []).length && (old[k] || []).length) merged[k] = old[k];
  S.hyps.set(h.label, merged); renderBoard();
}

function renderBoard() {
  for (const col of document.querySelectorAll("#board .col")) col.querySelector(".cards").replaceChildren();
  for (const h of S.hyps.values()) {
    const col = document.querySelector(`#board .col[data-status="${h.status || "open"}"] .cards`);
    if (!col) continue;
    const card = el("article", { class: "hyp", "data-label": h.label }, el("div", { class: "label" }, h.label),
      h.statement ? el("div", {}, h.statement) : null);
    for (const e of h.evidence || []) card.append(el("div", { class: "ev", title: `for, from ${e.observation}` }, e.line));
    for (const e of h.against || []) card.append(el("div", { class: "ev against", title: `against, from ${e.observation}` }, `${e.note ? e.note + ": " : ""}${e.line}`));
    if (h.check && (h.status === "open" || h.status === "supported")) card.append(el("div", { class: "muted" }, `Next check: ${h.check}`));
    col.append(card);
  }
}

function evidenceLink(e) {
  return el("blockquote", { class: "ev" }, e.observation ? el("a", { href: `#obs-${e.observation}`, "data-obs": e.observation }, `${e.observation}: `) : null, e.line);
}

function renderReplyState(li, r) {
  const waiting = S.waiting || (r && r.status === "awaiting_approval");
  li.classList.toggle("waiting", waiting);
  const st = li.querySelector(".state");
  if (st) st.textContent = waiting ? "waiting for your approval" : statusWord(r && r.status);
  let link = li.querySelector("a.to-approval");
  if (waiting && !link) { // the next step and the proposed change, one click apart
    link = el("a", { href: "#approvals", class: "to-approval" });
    link.addEventListener("click", (e) => { const a = $("#approvals"); if (a) { e.preventDefault(); a.scrollIntoView({ block: "center" }); } });
    li.append(link);
  } else if (!waiting && link) { link.remove(); link = null; }
  if (link) link.textContent = fitWords(S.fit);
}

function fitWords(fit) {
  // Whether the change below is this next step comes from the server (server/change_fit.py),
  // which reads the report's next step and the request; until the diff has loaded, say neither.
  if (!fit) return "A change is proposed below: review it and approve or deny.";
  if (fit.agrees) return "The change for this next step is below: review it and approve or deny.";
  return `${fit.why} Review it below and approve or deny.`;
}

// -- the answer, pinned: cause in words, confidence, state, next step, seen before ---------------
function renderAnswer() {
  const r = S.report, box = $("#answer");
  if (!r || !r.status) { box.hidden = true; return; }
  const waiting = S.waiting || r.status === "awaiting_approval";
  const words = r.root_cause ? S.causes[r.root_cause] : "";
  $("#a-cause").textContent = r.root_cause ? cap(words || r.root_cause.replace(/_/g, " ")) : "No cause named yet";
  $("#a-label").textContent = r.root_cause && words ? r.root_cause : "";
  $("#a-conf").textContent = r.root_cause && r.confidence ? `· ${Math.round(r.confidence * 100)}% sure` : "";
  $("#a-state").textContent = `· ${waiting ? "waiting for your approval" : statusWord(r.status)}`;
  $("#a-next").textContent = r.next_step || "none given";
  const seen = r.seen_before || [];
  $("#a-seen").textContent = seen.length ? `${seen.length}× · ${seen[0]}` : "no: nothing like this in memory";
  box.classList.toggle("waiting", waiting);
  box.hidden = false;
}

function showReply(r) {
  // The conclusion is the agent's final reply: cause, cited lines, what was ruled out, next step.
  if (!r || !r.status) return;
  S.report = r;
  for (const h of r.hypotheses || []) upsertHyp(h);
  const old = $("#conclusion"); if (old) old.removeAttribute("id");
  const cause = r.root_cause ? `The cause: ${r.root_cause}` : "I could not name a cause yet";
  const conf = r.confidence ? ` (${Math.round(r.confidence * 100)}% sure)` : "";
  const ruled = (r.ruled_out || []).map((l) => { const why = S.whyNot.get(l); return el("li", {}, l, why ? el("span", { class: "muted" }, `: ${why}`) : null); });
  const li = el("li", { class: "reply", id: "conclusion" },
    el("h3", {}, `${cause}${conf} · `, el("span", { class: "state" })),
    r.summary ? el("p", {}, r.summary) : null,
    r.next_step ? el("h4", {}, "Next step") : null, r.next_step ? el("p", { class: "next" }, r.next_step) : null,
    (r.evidence || []).length ? el("h4", {}, "Cited lines") : null, ...(r.evidence || []).map(evidenceLink),
    ruled.length ? el("h4", {}, "Ruled out") : null, ruled.length ? el("ul", {}, ...ruled) : null,
    (r.seen_before || []).length ? el("h4", {}, "Seen before") : null, ...(r.seen_before || []).map((s) => el("p", { class: "muted" }, s)));
  renderReplyState(li, r); add(li);
  renderSeen(r.seen_before || []); renderAnswer();
  if (r.status !== "awaiting_approval" && !S.waiting) status(`session ${S.session}: ${statusWord(r.status)}`);
}

// -- approvals: one state, a diff, the reason tied to the evidence, decide where you read ---------
async function onApprovalRequest(d) {
  // On resume the graph re-enters its approval node and repeats the request first: show once.
  const key = JSON.stringify([d.tool, d.args]);
  if (S.shownRequests.has(key)) return;
  S.shownRequests.add(key);
  const old = $("#approvals"); if (old) old.removeAttribute("id");
  const card = add(el("li", { class: "approval", id: "approvals", role: "group", "aria-label": `approval ${d.tool}` },
    el("h3", {}, `Waiting for your approval: ${sentence(d.tool, d.args).toLowerCase()}`),
    el("p", { class: "why" }, `Why: ${d.reason || d.args.reason || ""}`)));
  const ev = (S.report && S.report.evidence) || [];
  if (ev.length) card.append(el("p", { class: "muted" }, "Because of: "), ...ev.map(evidenceLink));
  card.append(el("p", { class: "muted pending" }, "loading the change…"));
  setWaiting(true);
  const req = await findRequest(S.session);
  if (!req || !card.isConnected) { card.querySelector(".pending").textContent = "this request is no longer pending"; return; }
  loadSessions(); // the list says "waiting for your approval" too, from the server's own state
  fillApproval(card, req);
}

async function findRequest(sid) {
  // The request's id exists once the graph has paused at its checkpoint, just after the event.
  for (let i = 0; i < 60 && sid === S.session; i++) {
    const list = await api("/api/approvals").catch(() => []);
    const req = list.find((a) => a.session_id === sid);
    if (req) return req;
    await sleep(150);
  }
  return null;
}

function diffView(text) {
  const pre = el("pre", { class: "diff", "aria-label": "the change, as a unified diff" });
  for (const line of text.replace(/\n$/, "").split("\n")) {
    const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : null;
    pre.append(cls ? el("span", { class: cls }, line) : line + "\n");
  }
  return pre;
}

async function fillApproval(card, req) {
  // Approve stays disabled until the diff has loaded: a change is never approved unseen (a
  // replica that cannot read it, a dropped connection). Deny needs no diff and works at once.
  card.dataset.id = req.id;
  const reason = el("input", { id: `reason-${req.id}`, placeholder: "note for the record (optional)", maxlength: "2000" });
  const yes = el("button", { type: "button", class: "primary", disabled: "", title: "loading the change first" }, "Approve");
  const no = el("button", { type: "button" }, "Deny");
  const decide = async (approve, btns) => {
    btns.forEach((b) => (b.disabled = true));
    try { await api(`/api/approvals/${encodeURIComponent(req.id)}`, { method: "POST", body: { approve, reason: reason.value } }); }
    catch (err) { say("error", `could not send the decision: ${err.message}`); no.disabled = false; yes.disabled = !card.dataset.seen; return; }
    card.querySelector(".row").replaceWith(el("p", { class: "muted" }, approve ? "approved; the agent continues" : "denied; the agent continues without it"));
    setWaiting(false); status(`session ${S.session}: running`); loadSessions();
    if (!S.stream) follow(S.session);
  };
  yes.addEventListener("click", () => decide(true, [yes, no])); no.addEventListener("click", () => decide(false, [yes, no]));
  card.append(el("details", {}, el("summary", {}, "the exact action"), el("pre", {}, callText(req.tool, req.args))),
    el("div", { class: "row" }, el("label", { for: `reason-${req.id}`, class: "sr" }, "note"), reason, yes, no));
  await loadDiff(card, req, yes);
}

async function loadDiff(card, req, yes) {
  const pending = card.querySelector(".pending");
  let d;
  try { d = await api(`/api/approvals/${encodeURIComponent(req.id)}/diff`); }
  catch (err) {
    const retry = el("button", { type: "button", class: "retry" }, "load the change again");
    const box = el("p", { class: "muted pending" }, `could not load the change: ${err.message}. Approve stays off until it is shown. `, retry);
    retry.addEventListener("click", () => { box.replaceWith(el("p", { class: "muted pending" }, "loading the change…")); loadDiff(card, req, yes); });
    pending.replaceWith(box);
    return;
  }
  pending.replaceWith(d.diff ? diffView(d.diff) : el("p", { class: "muted" }, d.note || ""));
  if (d.fit) {
    S.fit = d.fit;
    card.querySelector(".why").after(el("p", { class: `fit ${d.fit.agrees ? "agrees" : "differs"}` }, d.fit.why));
    const c = $("#conclusion"); if (c) renderReplyState(c, S.report);
  }
  card.dataset.seen = "1"; yes.disabled = false; yes.removeAttribute("title");
}

// -- one session -------------------------------------------------------------------------------
function resetView() {
  S.hyps.clear(); S.shownRequests.clear(); S.lastSeq = 0; S.echoes = []; S.replies.clear(); S.whyNot.clear(); S.report = null; S.fit = null; S.step = null; S.symptomShown = false; S.streaming = null;
  renderBoard(); setWaiting(false); renderAnswer();
  for (const id of ["#chat", "#observations", "#findings"]) $(id).replaceChildren();
}

function handle(ev) {
  if (ev.seq) { if (ev.seq <= S.lastSeq) return; S.lastSeq = ev.seq; }
  const d = ev.data || {};
  switch (ev.type) {
    case "session":
      S.sessionHost = d.host || S.sessionHost;
      if (!S.symptomShown) { say("user", d.symptom || ""); S.symptomShown = true; }
      if ((d.notes || []).length) say("agent", `What I remember about ${d.host}:\n• ${d.notes.join("\n• ")}`);
      status(`session ${ev.session_id}: running on ${d.host || S.host}`); break;
    case "message": onMessage(d); break;
    case "observation": onObservation(d); break;
    case "finding": addFinding(d); break;
    case "hypothesis": for (const h of d.hypotheses || [d.hypothesis || d]) upsertHyp(h); break;
    case "conclusion": showReply(d.report || d); break;
    case "approval_request": onApprovalRequest(d); break;
    case "approval": {
      const ok = d.approved ?? d.approve;
      say("decision", `${ok ? "approved" : "denied"}${d.reason ? ": " + d.reason : ""}`);
      setWaiting(false); break;
    }
    case "error": say("error", d.error || (d.guardrail ? `stopped by a guardrail: ${d.guardrail}` : "the run failed")); break;
  }
}

async function openSession(id, push = true) {
  if (S.stream) S.stream.abort();
  S.stream = null; resetView(); S.session = id;
  if (push && location.pathname !== `/s/${id}`) history.pushState({ id }, "", `/s/${id}`);
  if (!MID.matches) showTab("chat");
  let d;
  try { d = await api(`/api/sessions/${id}`); }
  catch (err) { status(`cannot open session ${id}: ${err.message}`); return; }
  if (id !== S.session) return;
  S.sessionHost = d.host;
  if (d.host !== S.host && HP.hosts.some((h) => h.name === d.host)) { setHost(d.host, false); loadNotes(); }
  if (d.alert) showAlert(d.alert);
  if (!d.events.some((e) => e.type === "session")) { say("user", d.symptom); S.symptomShown = true; }
  for (const e of d.events) handle(e);
  if (d.status === "error" && d.error && !d.events.some((e) => e.type === "error")) say("error", d.error);
  status(`session ${id}: ${statusWord(d.status)}`, d.status === "awaiting_approval");
  if (d.status === "awaiting_approval") setWaiting(true);
  seenFrom(d);
  loadSessions();
  follow(id);
}

async function follow(id) {
  // SSE over fetch, resumed with Last-Event-ID. A dropped connection (server restart) is retried
  // with back-off and said in words; a stream the server ends is re-opened while the session
  // still runs (a run in another process, such as `pivot chat`, is followed the same way).
  if (S.stream) S.stream.abort();
  const ctrl = new AbortController(); S.stream = ctrl;
  let tries = 0;
  while (S.stream === ctrl && id === S.session) {
    let lost = false;
    try {
      const res = await fetch(`/api/sessions/${id}/events`, { signal: ctrl.signal,
        headers: { Authorization: `Bearer ${S.token}`, "Last-Event-ID": String(S.lastSeq) } });
      if (res.status === 401) { askToken(); break; }
      if (!res.ok) { status(`session ${id}: the server answered ${res.status}`); break; }
      if (tries > 0) conn(`reconnected; caught up from event ${S.lastSeq}`, "ok"); else conn("live", "ok");
      tries = 0;
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
    } catch (err) {
      if (err.name === "AbortError" || S.stream !== ctrl) return;
      lost = true;
    }
    if (S.stream !== ctrl) return;
    const d = lost ? null : await api(`/api/sessions/${id}`).catch(() => null);
    if (!d) {
      tries += 1;
      conn(`connection to the server lost; reconnecting (try ${tries})…`, "warn");
      await sleep(Math.min(5000, 400 * 2 ** Math.min(tries, 4)));
      continue;
    }
    refreshAfter(d);
    if (d.status !== "running" && d.status !== "queued") break;
    await sleep(1500); // still running but not here: keep following
  }
  if (S.stream === ctrl) { S.stream = null; conn(""); }
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

function refreshAfter(d) {
  if (d.session_id !== S.session) return;
  const waiting = d.status === "awaiting_approval";
  status(`session ${d.session_id}: ${statusWord(d.status)}`, waiting);
  setWaiting(waiting);
  seenFrom(d);
  loadSessions(); loadNotes();
}

// -- hosts, sessions, memory, loop -------------------------------------------------------------
async function loadCauses() {
  // Plain words for each root-cause label (cards/taxonomy.yaml, through /api/causes).
  S.causes = (await api("/api/causes").catch(() => null)) || {};
  renderAnswer();
}

// The host picker: a combobox that filters as you type (alias, address, card title), real hosts
// apart from the replayed demo cards; arrow keys, Enter and Escape work as in a native list.
const HP = { hosts: [], shown: [], active: -1 };
const hostMark = (h) => (h.reachable === false ? " (unreachable)" : "");

function setHost(name, remember = true) {
  const h = HP.hosts.find((x) => x.name === name);
  const changed = name !== S.host;
  S.host = name; $("#host").value = name; $("#host").title = h ? h.title || h.address || h.detail || "" : "";
  if (remember) localStorage.setItem("pivot.host", name);
  return changed;
}

function hostOpen(open) {
  const list = $("#host-list"); list.hidden = !open;
  $("#host").setAttribute("aria-expanded", String(open));
  if (!open) { HP.active = -1; $("#host").removeAttribute("aria-activedescendant"); }
}

function hostFilter(q) {
  const words = q.toLowerCase().split(/\s+/).filter(Boolean);
  const list = $("#host-list"); list.replaceChildren(); HP.shown = []; HP.active = -1;
  const hit = (h) => { const hay = `${h.name} ${h.address || ""} ${h.title || ""}`.toLowerCase(); return words.every((w) => hay.includes(w)); };
  const groups = [["Hosts", "real", HP.hosts.filter((h) => h.kind !== "replay")],
    ["Demo cards (replayed)", "demo", HP.hosts.filter((h) => h.kind === "replay")]];
  for (const [label, key, hosts] of groups) {
    const rows = hosts.filter(hit); if (!rows.length) continue;
    const g = el("div", { role: "group", class: "hp-group", "data-group": key, "aria-labelledby": `hp-head-${key}` },
      el("div", { class: "hp-head", id: `hp-head-${key}`, role: "presentation" }, `${label} (${rows.length})`));
    for (const h of rows) {
      const i = HP.shown.length; HP.shown.push(h);
      const sub = h.title || (h.address && h.address !== h.name ? h.address : "");
      g.append(el("div", { role: "option", id: `hp-opt-${i}`, class: "hp-opt", "data-value": h.name,
        "aria-selected": String(h.name === S.host), title: h.detail || null,
        onmousedown: (e) => e.preventDefault(), onclick: () => hostPick(h.name) },
        el("span", { class: "hp-name" }, `${h.name}${hostMark(h)}`), sub ? el("span", { class: "hp-sub" }, sub) : null));
    }
    list.append(g);
  }
  if (!HP.shown.length) list.append(el("div", { class: "hp-none muted" }, `no host matches "${q}"`));
}

function hostActive(i) {
  const opts = document.querySelectorAll("#host-list [role=option]");
  if (!opts.length) return;
  HP.active = (i + opts.length) % opts.length;
  opts.forEach((o, k) => o.classList.toggle("active", k === HP.active));
  const o = opts[HP.active]; o.scrollIntoView({ block: "nearest" });
  $("#host").setAttribute("aria-activedescendant", o.id);
}

function hostPick(name) {
  hostOpen(false);
  if (setHost(name)) loadNotes();
}

function hostKeys(e) {
  const open = !$("#host-list").hidden;
  if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    e.preventDefault();
    if (!open) { hostFilter(""); hostOpen(true); }
    hostActive(HP.active < 0 ? (e.key === "ArrowDown" ? 0 : -1) : HP.active + (e.key === "ArrowDown" ? 1 : -1));
  } else if (e.key === "Enter") {
    e.preventDefault();
    const h = HP.shown[HP.active] || (open && HP.shown.length === 1 ? HP.shown[0] : null);
    if (h) hostPick(h.name); else if (!open) { hostFilter(""); hostOpen(true); }
  } else if (e.key === "Escape") {
    if (open) { e.preventDefault(); hostOpen(false); $("#host").value = S.host; }
  }
}

function hostBoot() {
  const inp = $("#host");
  inp.addEventListener("focus", () => { inp.select(); hostFilter(""); hostOpen(true); });
  inp.addEventListener("click", () => { if ($("#host-list").hidden) { hostFilter(""); hostOpen(true); } });
  inp.addEventListener("input", () => { hostFilter(inp.value); hostOpen(true); if (inp.value.trim()) hostActive(0); });
  inp.addEventListener("keydown", hostKeys);
  // Leaving the field without a pick keeps the host that was chosen before.
  inp.addEventListener("blur", () => { hostOpen(false); inp.value = S.host; });
}

async function loadHosts() {
  HP.hosts = await api("/api/hosts?check=true");
  const keep = localStorage.getItem("pivot.host");
  const first = HP.hosts.find((h) => h.kind !== "replay") || HP.hosts[0];
  const name = keep && HP.hosts.some((h) => h.name === keep) ? keep : HP.hosts.some((h) => h.name === S.host) ? S.host : first ? first.name : "";
  setHost(name, false);
  if (!$("#host-list").hidden) hostFilter($("#host").value === S.host ? "" : $("#host").value);
}

const when = (iso) => { const t = new Date(iso); return isNaN(t) ? "" : t.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }); };

async function loadSessions() {
  const q = $("#session-search").value.trim();
  const rows = await api(`/api/sessions?limit=50${q ? "&q=" + encodeURIComponent(q) : ""}`).catch(() => null);
  if (!rows) return;
  const ul = $("#sessions"); ul.replaceChildren();
  let waiting = false;
  for (const r of rows) {
    waiting = waiting || r.status === "awaiting_approval";
    const b = el("button", { type: "button", "data-session": r.session_id },
      el("span", { class: `st-${r.status}` }, statusWord(r.status)), r.root_cause ? ` · ${r.root_cause}` : "",
      el("span", { class: "meta" }, `${when(r.created)} · ${r.host}${r.alertname ? " · alert " + r.alertname : ""}`),
      el("span", { class: "meta" }, (r.symptom || "").slice(0, 120)));
    b.addEventListener("click", () => openSession(r.session_id));
    if (r.session_id === S.session) b.setAttribute("aria-current", "true");
    ul.append(el("li", {}, b));
  }
  if (!rows.length) ul.append(el("li", { class: "muted" }, q ? "no session matches" : "no sessions yet"));
  document.querySelector('#tabs button[data-tab="sessions"]').classList.toggle("badge", waiting);
}

// -- alerts and watched launches ---------------------------------------------------------------
const webLink = (url, text) => (/^https?:\/\//i.test(url || "") ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, text) : null);

function showAlert(a) {
  // The session was started by an Alertmanager alert: say which, and link back to it.
  const links = [webLink(a.generator_url, "the alert's rule"), webLink(a.external_url, "Alertmanager")].filter(Boolean);
  const li = el("li", { class: "alert-link", "data-group": a.group_key },
    `Started by the alert ${a.alertname || "(unnamed)"} (group ${a.group_key})`);
  for (const l of links) li.append(" · ", l);
  add(li);
}

const WATCH_WORDS = { watching: "loading", investigating: "failed: investigating", ready: "ready", died: "died",
  crashed: "crashed", stalled: "stalled", gave_up: "gave up", stopped: "stopped" };
const secs = (s) => (s == null ? "" : s < 90 ? `${Math.round(s)} s` : `${Math.round(s / 60)} min`);

async function loadWatches() {
  // Launches that `pivot watch --serve` / `pivot launch --serve` report: phase and ETA while
  // they load, then the verdict with a link to its investigation.
  const rows = S.token ? await api("/api/watches").catch(() => null) : null;
  if (!rows) return;
  const ul = $("#watches"); ul.replaceChildren();
  for (const w of rows) {
    const t = w.target, what = t.pid ? `pid ${t.pid}` : t.port ? `port ${t.port}` : base(t.log) || "a launch";
    const now = [w.phase && `phase ${w.phase}`, w.progress, w.eta_s != null && `about ${secs(w.eta_s)} left`].filter(Boolean);
    const li = el("li", { "data-watch": w.watch_id },
      el("span", { class: `st-${w.status}` }, WATCH_WORDS[w.status] || w.status), ` · ${what} on ${t.host}`,
      el("span", { class: "meta" }, now.join(" · ") || `${secs(w.elapsed_s)} in`));
    if (!w.live || w.status === "investigating") li.append(el("span", { class: "meta" }, w.detail));
    const d = w.diagnosis;
    if (d) {
      const a = el("a", { href: `/s/${d.session_id}`, "data-session": d.session_id },
        d.root_cause ? `${d.root_cause} (${Math.round(100 * d.confidence)}%)` : `session ${d.session_id}`);
      a.addEventListener("click", (e) => { e.preventDefault(); openSession(d.session_id); });
      li.append(el("span", { class: "meta verdict" }, "verdict: ", a));
    }
    ul.append(li);
  }
  if (!rows.length) ul.append(el("li", { class: "muted" }, "none yet: pivot watch or pivot launch with --serve"));
}

function seenFrom(d) {
  // "Seen before" is added to the stored report after the run's conclusion event: take it from
  // the session's detail so the pinned answer shows it too.
  if (!d.report) return;
  renderSeen(d.report.seen_before || []);
  if (S.report && (d.report.seen_before || []).length) { S.report.seen_before = d.report.seen_before; renderAnswer(); }
}

function renderSeen(list) {
  const ul = $("#seen-before"); ul.replaceChildren();
  if (!list.length) { ul.append(el("li", {}, "nothing like this in memory")); return; }
  for (const s of list) ul.append(el("li", {}, s));
}

async function loadNotes() {
  const host = S.host; if (!host) return;
  $("#todo-host").textContent = `on ${host}`;
  const enc = encodeURIComponent(host);
  const got = await Promise.all([api(`/api/hosts/${enc}/todos`), api(`/api/hosts/${enc}/handoffs?limit=1`)]).catch(() => null);
  if (!got) return;
  const [todos, handoffs] = got;
  const ul = $("#todos"); ul.replaceChildren();
  for (const t of todos) {
    const done = el("button", { type: "button", "aria-label": `close todo ${t.text}` }, "done");
    done.addEventListener("click", async () => { await api(`/api/todos/${t.id}/close`, { method: "POST" }).catch(() => null); loadNotes(); });
    ul.append(el("li", {}, t.text, " ", done));
  }
  if (!todos.length) ul.append(el("li", { class: "muted" }, "none open"));
  $("#handoff").textContent = handoffs.length ? `${when(handoffs[0].created)}\n${handoffs[0].text}` : "none yet";
}

async function loadLoop() {
  const [led, st, rep] = await Promise.all([api("/api/loop/ledger"), api("/api/loop/status"), api("/api/loop/report")]).catch(() => [null, null, null]);
  if (!led) return;
  $("#morning-report").textContent = rep && rep.available ? rep.markdown : "";
  $("#morning-report").hidden = !(rep && rep.available);
  const body = $("#ledger tbody"); body.replaceChildren();
  if (st && st.available) {
    const s = st.status, by = Object.entries(s.by_status || {}).map(([k, v]) => `${v} ${k}`).join(", ");
    const best = led.entries.filter((e) => metricOf(e) != null).sort((a, b) => metricOf(b) - metricOf(a))[0];
    $("#morning").textContent = `Night of ${when((s.night || {}).started || (s.night || {}).created)}: ${s.experiments} experiments (${by}).` +
      (best && led.baseline != null ? `\nBest: ${best.name} at ${fmt(metricOf(best))} against a baseline of ${fmt(led.baseline)} (${metricOf(best) > led.baseline ? "better" : "no better"}).` : "") +
      (s.current ? `\nRunning now: ${s.current.name}.` : "");
  }
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
  const addN = (tag, a) => { const n = document.createElementNS(ns, tag); for (const k in a) n.setAttribute(k, a[k]); svg.append(n); return n; };
  values.forEach((v, i) => { if (v == null) return; addN("rect", { x: pad + i * bw + 2, y: y(v), width: Math.max(2, bw - 4), height: H - pad - y(v), fill: baseline != null && v > baseline ? "#2a7" : "#888" }); });
  if (baseline != null) addN("line", { x1: pad, x2: W - pad, y1: y(baseline), y2: y(baseline), stroke: "#c33", "stroke-dasharray": "4 3" });
  addN("line", { x1: pad, x2: W - pad, y1: H - pad, y2: H - pad, stroke: "#333" });
  return svg;
}

// -- sending -----------------------------------------------------------------------------------
async function send() {
  const text = $("#chat-text").value.trim(); if (!text) return;
  $("#chat-text").value = "";
  try {
    if (S.session) {
      // Echo at once; the session's own `message` event confirms the echo instead of repeating it.
      const echo = say("user sending", text); S.echoes.push(echo);
      let r;
      try { r = await api(`/api/sessions/${S.session}/messages`, { method: "POST", body: { text } }); }
      catch (err) { echo.remove(); S.echoes = S.echoes.filter((li) => li !== echo); throw err; }
      const answer = r && (r.answer || r.reply);
      const answerText = typeof answer === "string" ? answer : answer && answer.text;
      if (answerText) { S.replies.add(answerText); say("agent", answerText); } // a direct answer, once
      status(`session ${S.session}: answering…`);
      if (!S.stream) follow(S.session);
    } else {
      resetView(); say("user", text); S.symptomShown = true; S.sessionHost = S.host;
      let r;
      try { r = await api("/api/sessions", { method: "POST", body: { host: S.host, symptom: text } }); }
      catch (err) { say("error", err.message); loadSessions(); return; }
      S.session = r.session_id; history.pushState({ id: r.session_id }, "", `/s/${r.session_id}`);
      loadSessions(); follow(r.session_id);
    }
  } catch (err) { say("error", err.message); $("#chat-text").value = text; }
}

function newInvestigation(push = true) {
  if (S.stream) S.stream.abort();
  S.stream = null; S.session = null; resetView(); loadSessions(); conn("");
  if (push && location.pathname !== "/") history.pushState({}, "", "/");
  status("New investigation: pick a host and describe the symptom.");
  showTab("chat"); $("#chat-text").focus();
}

function route(push) {
  const m = /^\/s\/([A-Za-z0-9_-]+)$/.exec(location.pathname);
  if (m) openSession(m[1], push); else if (S.session) newInvestigation(false);
}

function boot() {
  tokenFromLink();
  $("#chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("#chat-text").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); } });
  $("#new-session").addEventListener("click", () => newInvestigation());
  hostBoot();
  $("#todo-form").addEventListener("submit", async (e) => { e.preventDefault(); const t = $("#todo-text"); if (!t.value.trim()) return;
    await api(`/api/hosts/${encodeURIComponent(S.host)}/todos`, { method: "POST", body: { text: t.value.trim(), session_id: S.session } }).catch((err) => say("error", err.message));
    t.value = ""; loadNotes(); });
  let searchTimer = null;
  $("#session-search").addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(loadSessions, 200); });
  $("#token-btn").addEventListener("click", askToken);
  $("#a-more").addEventListener("click", () => { const open = $("#answer").classList.toggle("open");
    $("#a-more").setAttribute("aria-expanded", String(open)); $("#a-more").textContent = open ? "less" : "more"; });
  $("#token-form").addEventListener("submit", () => { S.token = $("#token-input").value.trim(); localStorage.setItem("pivot.token", S.token); start(); });
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("#waiting-banner").addEventListener("click", (e) => { const a = $("#approvals"); if (a) { e.preventDefault(); showTab("chat"); a.scrollIntoView({ block: "center" }); const i = a.querySelector("input"); if (i) i.focus({ preventScroll: true }); } });
  document.addEventListener("click", (e) => { // evidence links open the evidence view at that observation
    const a = e.target.closest("a[data-obs]"); if (!a) return;
    e.preventDefault(); showTab("evidence");
    const t = document.getElementById(`obs-${a.dataset.obs}`);
    if (t) { t.scrollIntoView({ block: "start" }); t.classList.add("flash"); setTimeout(() => t.classList.remove("flash"), 1500); const det = t.querySelector("details"); if (det) det.open = true; }
  });
  WIDE.addEventListener("change", layout); MID.addEventListener("change", layout);
  window.addEventListener("popstate", () => route(false));
  layout();
  if (!S.token) askToken(); else start();
}

async function start() {
  try {
    await loadHosts();
    await Promise.all([loadSessions(), loadNotes(), loadLoop(), loadWatches(), loadCauses()]);
    if (!S.watchTimer) S.watchTimer = setInterval(loadWatches, 2000);
    conn(""); if (!S.session) status("Pick a host and describe the symptom.");
    route(false);
  } catch (err) { status(err.message); }
}

boot();
