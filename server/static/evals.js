// The eval page: pick a card directory, run the harness over it, read the HTML report.
"use strict";

const $ = (sel) => document.querySelector(sel);
const token = localStorage.getItem("pivot.token") || "";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function api(path, opts = {}) {
  const headers = { Authorization: `Bearer ${token}` };
  if (opts.body !== undefined) { headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(opts.body); }
  const res = await fetch(path, { ...opts, headers });
  if (res.status === 401) throw new Error("sign in on the chat page first (the token was refused)");
  if (!res.ok) { const b = await res.json().catch(() => ({})); throw new Error(typeof b.detail === "string" ? b.detail : `${res.status}`); }
  return res.json();
}

function say(text) { $("#eval-status").textContent = text; }

async function run(dir, button) {
  button.disabled = true; $("#report").hidden = true; $("#eval-summary").textContent = "";
  try {
    let r = await api("/api/evals", { method: "POST", body: { directory: dir.path } });
    const t0 = Date.now();
    while (r.status === "running") {
      say(`running ${dir.cards} cards from ${dir.name}… ${Math.round((Date.now() - t0) / 1000)} s`);
      await sleep(500);
      r = await api(`/api/evals/${r.eval_id}`);
    }
    if (r.status !== "done") { say(`the eval failed: ${r.error}`); return; }
    const s = r.result.summary || {};
    say(`done: ${dir.name}`);
    $("#eval-summary").textContent = `${s.passed ?? "?"} of ${s.cards ?? "?"} cards passed`;
    const f = $("#report"); f.src = r.report_url; f.hidden = false;
  } catch (err) { say(err.message); }
  finally { button.disabled = false; }
}

async function boot() {
  try {
    const dirs = await api("/api/evals/dirs");
    const ul = $("#dirs"); ul.replaceChildren();
    for (const d of dirs) {
      const b = document.createElement("button"); b.type = "button"; b.className = "primary";
      b.textContent = `Run ${d.cards} cards`; b.setAttribute("aria-label", `run the cards in ${d.name}`);
      b.addEventListener("click", () => run(d, b));
      const li = document.createElement("li");
      const name = document.createElement("strong"); name.textContent = d.name;
      const path = document.createElement("span"); path.className = "muted"; path.textContent = ` ${d.path} `;
      li.append(name, path, b); ul.append(li);
    }
  } catch (err) { say(err.message); }
}

boot();
