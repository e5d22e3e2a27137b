// fencelock dashboard: renders the snapshots the server streams on
// /events and counts each lease down between them. Every value from the
// server is set as text (lock names and identities are anyone's text).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const tbody = document.querySelector("#locks tbody");
  // The lease each row counts down to: performance.now() at which it ends.
  let rows = [];
  // The longest lease seen per key and fence, for the bar's scale.
  let longest = new Map();

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fmtDuration(ms) {
    if (ms <= 0) return "0.0 s";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    const s = Math.floor(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }

  function fmtTime(iso) {
    const d = new Date(iso);
    if (isNaN(d) || d.getFullYear() < 2000) return "never";
    const p = (n, w) => String(n).padStart(w, "0");
    return p(d.getHours(), 2) + ":" + p(d.getMinutes(), 2) + ":" + p(d.getSeconds(), 2) + "." + p(d.getMilliseconds(), 3);
  }

  function shortToken(t) {
    return t.length > 12 ? t.slice(0, 8) + "…" : t;
  }

  function renderLocks(snap, received) {
    const seen = new Map();
    rows = [];
    const trs = snap.locks.map((l) => {
      const kind = l.kind || "lock";
      const id = l.key + "\u0000" + kind + "\u0000" + l.fence;
      const top = Math.max(longest.get(id) || 0, l.ttl_ms);
      seen.set(id, top);
      const tr = el("tr");
      tr.dataset.key = l.key;
      tr.dataset.kind = kind;
      tr.dataset.fence = String(l.fence);
      tr.appendChild(el("td", "key", l.key));
      tr.appendChild(el("td", "kind", kind));
      const holder = el("td", "holder");
      const tokens = l.tokens || [];
      const ownerIsToken = tokens.includes(l.owner);
      holder.appendChild(el("span", "name", l.identity || (ownerIsToken ? shortToken(l.owner) : l.owner)));
      if (l.identity || !ownerIsToken) {
        holder.appendChild(el("span", "sub", "token " + tokens.map(shortToken).join(", ")));
      }
      holder.title = "owner " + l.owner + (tokens.length ? "\ntokens " + tokens.join(", ") : "");
      tr.appendChild(holder);
      tr.appendChild(el("td", "num fence", String(l.fence)));
      const ttl = el("td", "ttl");
      const label = el("span", "left");
      const bar = el("span", "bar");
      const fill = el("span");
      bar.appendChild(fill);
      ttl.append(label, bar);
      tr.appendChild(ttl);
      tr.appendChild(el("td", "num holds", String(l.holds)));
      tr.appendChild(el("td", "num waiters", String(l.waiters)));
      rows.push({ ttl, label, fill, ends: received + l.ttl_ms, top });
      return tr;
    });
    longest = seen;
    tbody.replaceChildren(...trs);
    $("empty").hidden = snap.locks.length > 0 || !!snap.error;
    const more = $("more");
    more.hidden = snap.more <= 0;
    more.textContent = snap.more > 0
      ? "…and " + snap.more + " more lock key" + (snap.more === 1 ? "" : "s") +
        " not shown (the table has the first names in order; --max-locks sets how many)"
      : "";
    const n = snap.locks.length;
    $("summary").textContent = "· " + n + " held" + (snap.more > 0 ? " shown" : "") +
      ", " + snap.waiters + " waiter" + (snap.waiters === 1 ? "" : "s");
    tick();
  }

  function renderEvents(events) {
    const lis = events.map((e) => {
      const li = el("li");
      li.dataset.kind = e.kind;
      li.dataset.key = e.key;
      li.dataset.fence = String(e.fence);
      li.dataset.holdKind = e.hold_kind || "lock";
      const t = el("time", "", fmtTime(e.time));
      t.dateTime = e.time;
      li.append(t, el("span", "kind " + e.kind, e.kind === "handoff" ? "hand-off" : e.kind), el("code", "", e.key));
      li.appendChild(el("span", "text", e.text));
      return li;
    });
    $("events").replaceChildren(...lis);
    $("noevents").hidden = events.length > 0;
  }

  function render(snap) {
    const received = performance.now();
    $("namespace").textContent = snap.namespace;
    const status = $("status");
    const banner = $("banner");
    if (snap.error) {
      status.className = "status bad";
      status.textContent = "Redis unreachable";
      banner.hidden = false;
      banner.textContent = snap.error + (snap.locks.length ? " — showing the last state seen, at " + fmtTime(snap.last_ok) : "") + "; retrying…";
      $("locks").classList.add("stale");
    } else {
      status.className = "status ok";
      status.textContent = "live";
      banner.hidden = true;
      $("locks").classList.remove("stale");
    }
    $("updated").textContent = fmtTime(snap.error ? snap.last_ok : snap.time);
    renderLocks(snap, received);
    renderEvents(snap.events || []);
  }

  // tick counts the leases down (the server's figure was exact when sent).
  function tick() {
    const now = performance.now();
    for (const r of rows) {
      const left = r.ends - now;
      r.label.textContent = left > 0 ? fmtDuration(left) : "ended";
      r.ttl.classList.toggle("out", left <= 0);
      r.ttl.classList.toggle("low", left > 0 && r.top > 0 && left < r.top / 3);
      r.fill.style.width = (r.top > 0 ? Math.max(0, Math.min(100, (100 * left) / r.top)) : 0).toFixed(1) + "%";
    }
  }
  setInterval(tick, 100);

  function connect() {
    const source = new EventSource("events");
    source.addEventListener("snapshot", (ev) => {
      let snap;
      try {
        snap = JSON.parse(ev.data);
      } catch (err) {
        console.warn("fencelock dashboard: a snapshot that is not JSON", err);
        return;
      }
      render(snap);
    });
    source.onerror = () => {
      // EventSource reconnects by itself (the server asks for 1 s).
      const status = $("status");
      status.className = "status bad";
      status.textContent = "dashboard server unreachable; reconnecting…";
    };
  }
  connect();
})();
