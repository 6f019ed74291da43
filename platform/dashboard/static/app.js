// converge dashboard: confirmations for actions, and live run updates over Server-Sent Events.
// Plain JavaScript, served from this origin only; no framework, no other host.
"use strict";

// Every form with data-confirm asks before it is sent.
document.addEventListener("submit", (ev) => {
  const form = ev.target;
  const msg = form.getAttribute("data-confirm");
  if (msg && !window.confirm(msg)) {
    ev.preventDefault();
  }
});

// The run view: /runs/{id}/events streams the log; on each event the live part (waves, tasks,
// summary, buttons) is fetched again from /runs/{id}/live and swapped in, and the entry is
// appended to the log. EventSource resumes by itself with Last-Event-ID (the entry's seq).
(function live() {
  const run = document.getElementById("run");
  if (!run) return;
  const id = run.getAttribute("data-run");
  const after = run.getAttribute("data-after") || "0";
  const log = document.getElementById("log");
  const conn = document.getElementById("conn");
  const filtered = log && log.hasAttribute("data-filtered");
  let pending = false;
  let again = false;

  function refresh() {
    if (pending) { again = true; return; }
    pending = true;
    fetch("/runs/" + encodeURIComponent(id) + "/live", { credentials: "same-origin" })
      .then((res) => res.ok ? res.text() : Promise.reject(res.status))
      .then((html) => {
        const tpl = document.createElement("template");
        tpl.innerHTML = html.trim();
        const next = tpl.content.getElementById("live");
        const cur = document.getElementById("live");
        if (next && cur) cur.replaceWith(next);
      })
      .catch(() => {})
      .finally(() => {
        pending = false;
        if (again) { again = false; refresh(); }
      });
  }

  function append(e) {
    if (!log || filtered) return;
    if (log.querySelector('li[data-seq="' + e.seq + '"]')) return;
    const li = document.createElement("li");
    li.setAttribute("data-seq", String(e.seq));
    const t = document.createElement("time");
    t.textContent = e.time;
    const b = document.createElement("b");
    b.textContent = e.type;
    li.append(t, " ", b, (e.task ? " [" + e.task + "]" : "") + " " + e.message);
    log.append(li);
  }

  const es = new EventSource("/runs/" + encodeURIComponent(id) + "/events?after=" + encodeURIComponent(after));
  es.addEventListener("open", () => { conn.textContent = "live"; });
  es.addEventListener("error", () => { conn.textContent = "reconnecting…"; });
  es.addEventListener("entry", (ev) => {
    append(JSON.parse(ev.data));
    refresh();
  });
  // The first snapshot describes the page as it was rendered: only later ones change anything.
  let first = true;
  es.addEventListener("snapshot", () => {
    if (first) { first = false; return; }
    refresh();
  });
  es.addEventListener("end", () => {
    es.close();
    conn.textContent = "run ended";
    refresh();
  });
})();
