// Strata dashboard. Plain JS, no build step, no network beyond this node.
//
// One EventSource (/v1/swarm/events) brings the swarm view ("swarm"),
// the swarm's changes ("event") and the requests this node took
// ("request"). Renders are batched into one animation frame, so a burst
// of messages costs one paint, and each render rebuilds a section from
// one string, which keeps 100 nodes well under a frame's budget.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";
  const KEY = "strata.apiKey";

  const state = {
    view: null, // the latest swarm snapshot
    requests: [], // newest last, at most 64
    events: new Set(), // seqs already shown
    selected: null, // the request whose path is drawn; null: the latest
    es: null,
    key: localStorage.getItem(KEY) || "",
    history: [], // chat messages
    // The model has no chat template (and is not simulated): the box
    // sends plain completions, as strata chat does, since the built-in
    // chat format is text such a base model never saw.
    plain: false,
    stats: { renders: 0, lastRenderMs: 0, swarmMessages: 0 },
    stopped: false,
  };
  const dirty = { coverage: false, nodes: false, requests: false };
  let frame = 0;

  function schedule(what) {
    for (const w of what) dirty[w] = true;
    if (!frame) frame = requestAnimationFrame(flush);
  }

  function flush() {
    frame = 0;
    const t0 = performance.now();
    if (dirty.coverage) renderCoverage();
    if (dirty.nodes) renderNodes();
    if (dirty.requests) renderRequests();
    dirty.coverage = dirty.nodes = dirty.requests = false;
    state.stats.renders++;
    state.stats.lastRenderMs = performance.now() - t0;
  }

  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  const short = (id) => (id && id.length > 10 ? "…" + id.slice(-6) : id || "");
  const fmt = (x, d) => (x == null || !isFinite(x) ? "–" : Number(x).toFixed(d));
  const clock = (t) => new Date(t).toLocaleTimeString([], { hour12: false });

  function authHeaders() {
    return state.key ? { Authorization: "Bearer " + state.key } : {};
  }

  // Per-node decode rate from its heartbeat: one layer's step latency
  // times the layers it serves. An estimate of capacity, not a measure.
  function nodeRate(m) {
    const r = m.committed_range || (m.load && m.load.range);
    const lat = m.load && m.load.layer_latency_ms;
    if (!r || !lat || lat <= 0 || r.end <= r.start) return null;
    return 1000 / (lat * (r.end - r.start));
  }

  function kindOf(m) {
    if (m.liveness === "dead") return "dead";
    if (m.liveness === "suspect") return "suspect";
    if (m.draining || m.state === "draining") return "draining";
    if (m.state === "joining" || m.state === "warming") return "warming";
    if (m.state === "serving") return "serving";
    return "unknown";
  }

  // ---- header ----
  function renderHeader(v) {
    $("model").textContent = v.model.id + " · " + v.model.layers + " layers";
    $("sim-badge").hidden = !v.model.simulated;
    const plain = v.model.chat_template === false && !v.model.simulated;
    if (plain !== state.plain) {
      state.plain = plain;
      $("chat-mode").hidden = !plain;
      $("chat-input").placeholder = plain ? "Begin a text for the model to continue, such as: Once upon a time" : "Say something to the swarm…";
    }
    const alive = v.members.filter((m) => m.member && m.liveness !== "dead").length;
    $("summary").textContent =
      "node " + short(v.node) + " · epoch " + v.epoch + " · leader " + (v.leader ? short(v.leader) : "none") +
      " · " + alive + "/" + v.members.filter((m) => m.member).length + " members up" + (v.static_map ? " · static map" : "");
    // This node's reachability; the advice says what it means.
    const nat = v.nat || {};
    const reach = $("reach");
    reach.hidden = !nat.reachability;
    reach.textContent = nat.unreachable ? "UNREACHABLE" : "reachability " + nat.reachability +
      (nat.relays && nat.relays.length ? " · relay " + nat.relays.map(short).join(" ") : "") +
      (nat.relay_service ? " · relays for members" + (nat.relay_rate_mb_per_s > 0 ? " ≤ " + nat.relay_rate_mb_per_s.toFixed(1) + " MB/s" : "") : "");
    reach.title = nat.advice || "";
    reach.className = "badge" + (nat.unreachable ? " simn" : "");
  }

  // ---- coverage ----
  const r0 = (m) => m.committed_range || m.pending_range;
  // Bars fill their rows; thin rows (many nodes) keep a 1px gap.
  const barH = (rh) => (rh >= 10 ? rh - 3 : Math.max(4, rh - 1));

  function renderCoverage() {
    const v = state.view;
    const svg = $("coverage");
    if (!v) return;
    const L = v.model.layers || v.committed.layers || 1;
    // Every known node gets a row, those that left too: a path may still
    // name them, and an empty row shows that they are gone.
    const rows = v.members;
    const width = Math.max(480, svg.clientWidth || svg.parentNode.clientWidth || 900);
    const left = 190, right = 14, plotW = width - left - right;
    const x = (l) => left + (plotW * l) / L;
    const rh = Math.max(7, Math.min(24, Math.floor(520 / Math.max(1, rows.length))));
    const chartTop = 8, chartH = 64, stripY = chartTop + chartH + 10, stripH = 12;
    const rowsTop = stripY + stripH + 8;
    const height = rowsTop + rows.length * rh + 26;
    const rowY = new Map();
    rows.forEach((m, i) => rowY.set(m.id, rowsTop + i * rh));

    // Per-layer coverage and estimated throughput, from live members only.
    const covered = new Array(L).fill(0), tput = new Array(L).fill(0);
    let anyRate = false, unknown = 0;
    for (const m of v.members) {
      const r = m.committed_range;
      if (!r || m.liveness === "dead") continue;
      const rate = nodeRate(m);
      if (rate) anyRate = true;
      else unknown++;
      for (let l = Math.max(0, r.start); l < Math.min(L, r.end); l++) {
        covered[l]++;
        tput[l] += rate || 0;
      }
    }
    const gaps = covered.filter((c) => c === 0).length;
    const out = [];
    out.push('<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
      '<rect width="6" height="6" fill="#fff"/><rect width="2.5" height="6" fill="#24a37a" opacity=".6"/></pattern></defs>');
    // Layer grid and axis.
    const step = Math.max(1, Math.ceil(L / 16));
    out.push('<g class="axis">');
    for (let l = 0; l <= L; l += step) {
      out.push(`<line class="grid" x1="${x(l)}" x2="${x(l)}" y1="${chartTop}" y2="${height - 20}"/>` +
        `<text x="${x(l)}" y="${height - 6}" text-anchor="middle">${l}</text>`);
    }
    if (L % step) out.push(`<text x="${x(L)}" y="${height - 6}" text-anchor="middle">${L}</text>`);
    out.push("</g>");
    // Throughput line.
    const maxT = Math.max(...tput, 1e-9);
    out.push(`<text class="dim" x="8" y="${chartTop + 12}">est. tokens/s per layer</text>`);
    if (anyRate) {
      let d = "";
      for (let l = 0; l < L; l++) {
        const y = chartTop + chartH - (chartH - 6) * (tput[l] / maxT);
        d += (l ? " L" : "M") + x(l).toFixed(1) + " " + y.toFixed(1) + " L" + x(l + 1).toFixed(1) + " " + y.toFixed(1);
      }
      const minT = Math.min(...tput);
      out.push(`<path class="tput" d="${d}"/>`);
      out.push(`<text class="dim" x="8" y="${chartTop + 28}">max ${fmt(maxT, 1)} · min ${fmt(minT, 1)}</text>`);
      if (unknown) out.push(`<text class="dim" x="8" y="${chartTop + 44}">${unknown} node(s) not timed yet</text>`);
    } else {
      out.push(`<text class="dim" x="8" y="${chartTop + 28}">no layer latency reported yet</text>`);
    }
    // Coverage strip: green where a live member serves the layer, red gaps.
    out.push(`<text class="dim" x="8" y="${stripY + 10}">coverage</text>`);
    for (let l = 0; l < L; l++) {
      out.push(`<rect class="${covered[l] ? "cov" : "gap"}" data-layer="${l}" data-count="${covered[l]}" x="${x(l)}" y="${stripY}" width="${Math.max(1, x(l + 1) - x(l) - 0.5)}" height="${stripH}"><title>layer ${l}: ${covered[l]} live node(s)</title></rect>`);
    }
    // One row per member.
    const label = rh >= 11;
    for (const m of rows) {
      const y = rowY.get(m.id), bh = barH(rh);
      const kind = kindOf(m);
      if (m.self) out.push(`<rect class="selfrow" x="0" y="${y - 1}" width="${width}" height="${rh}"/>`);
      if (label) {
        let tags = "";
        if (m.self) tags += " self";
        if (v.leader === m.id) tags += " ★leader";
        if (!m.member && !r0(m)) tags += " " + m.liveness;
        out.push(`<text x="8" y="${y + bh - 2}">${esc(short(m.id))}<tspan class="dim">${esc(tags)}</tspan>` +
          (m.simulated ? '<tspan class="sim-mark"> SIM</tspan>' : "") + "</text>");
      }
      const r = m.committed_range;
      if (r) {
        out.push(`<rect class="bar ${kind}" data-node="${esc(m.id)}" data-kind="committed" data-start="${r.start}" data-end="${r.end}" data-liveness="${esc(m.liveness)}" data-state="${esc(m.state)}" x="${x(r.start)}" y="${y}" width="${Math.max(2, x(r.end) - x(r.start) - 1)}" height="${bh}" rx="2">` +
          `<title>${esc(m.id)} [${r.start},${r.end}) ${esc(m.state || "?")} / ${esc(m.liveness)}</title></rect>`);
      }
      const p = m.pending_range;
      if (p && (!r || p.start !== r.start || p.end !== r.end)) {
        out.push(`<rect class="pend" data-node="${esc(m.id)}" data-kind="pending" data-start="${p.start}" data-end="${p.end}" x="${x(p.start)}" y="${y + 1}" width="${Math.max(2, x(p.end) - x(p.start) - 1)}" height="${Math.max(2, bh - 2)}" rx="2">` +
          `<title>${esc(m.id)} warming [${p.start},${p.end})</title></rect>`);
      }
    }
    // The selected request's last path, hop by hop across the rows.
    const req = selectedRequest();
    if (req && req.paths.length) {
      const hops = req.paths[req.paths.length - 1];
      const pts = [];
      for (const h of hops) {
        if (!rowY.has(h.node)) continue;
        const y = rowY.get(h.node) + barH(rh) / 2;
        pts.push([x(h.from), y], [x(h.to), y]);
      }
      if (pts.length) {
        out.push(`<polyline class="req-path" data-request="${esc(req.id)}" data-hops="${hops.length}" points="${pts.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ")}"/>`);
        for (const p of pts) out.push(`<circle class="req-dot" cx="${p[0].toFixed(1)}" cy="${p[1].toFixed(1)}" r="3"/>`);
      }
    }
    if (v.model.simulated) {
      out.push(`<text class="sim-mark" x="${width - right}" y="${chartTop + 12}" text-anchor="end">SIMULATED MODEL</text>`);
    }
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("height", height);
    svg.dataset.epoch = v.epoch;
    svg.dataset.layers = L;
    svg.dataset.gaps = gaps;
    svg.dataset.members = rows.length;
    svg.dataset.pending = v.pending ? v.pending.map.epoch : "";
    svg.innerHTML = out.join("");
    $("coverage-summary").textContent =
      `epoch ${v.epoch} · ${L} layers · ` + (gaps ? `${gaps} layer(s) uncovered` : "all layers covered") +
      (v.pending ? ` · warming epoch ${v.pending.map.epoch} (${v.pending.reason || "plan"})` : "");
  }

  // ---- nodes ----
  function renderNodes() {
    const v = state.view;
    if (!v) return;
    const rows = [];
    for (const m of v.members) {
      const hw = m.capabilities && m.capabilities.Hardware;
      const dev = hw ? `${esc(hw.name)} <span class="muted">${fmt(hw.memory_bytes / 2 ** 30, 0)} GiB · ${fmt(hw.tflops, 1)} TF</span>` : "–";
      // The engine computing its layers: only "go" is bit-reproducible.
      const eng = m.engine ? ` <span class="badge engine${m.engine === "go" ? "" : " nondet"}" title="engine computing its layers` +
        (m.engine === "go" || m.engine === "sim" ? "" : " (not bit-reproducible across devices or batch sizes)") + `">${esc(m.engine)}</span>` : "";
      let tags = "";
      if (m.self) tags += '<span class="badge self">self</span>';
      if (v.leader === m.id) tags += '<span class="badge leader">leader</span>';
      if (m.voter) tags += '<span class="badge voter">voter</span>';
      if (m.link === "hole-punched") tags += '<span class="badge punched" title="direct link made by hole punching">hole-punched</span>';
      else if (m.relayed || m.link === "relayed") tags += '<span class="badge relayed"' +
        (m.link_mb_per_s > 0 ? ' title="link measured at ' + m.link_mb_per_s.toFixed(1) + ' MB/s"' : "") + '>relayed</span>';
      if (m.simulated) tags += '<span class="badge simn">SIMULATED</span>';
      if (!m.member) tags += '<span class="badge voter">not a member</span>';
      const r = m.committed_range, p = m.pending_range;
      let layers = r ? `[${r.start},${r.end})` : "–";
      if (p && (!r || p.start !== r.start || p.end !== r.end)) layers += ` → [${p.start},${p.end})`;
      const ld = m.load;
      const st = m.state || "–";
      // A node without the model file fetching its layers from peers.
      const fe = m.fetch && m.fetch.total_bytes > 0 ?
        ` <span class="muted" title="fetching its layers from peers">fetching ${fmt(100 * m.fetch.done_bytes / m.fetch.total_bytes, 0)}%</span>` : "";
      rows.push(`<tr data-node="${esc(m.id)}" data-liveness="${esc(m.liveness)}" data-state="${esc(m.state)}">` +
        `<td class="id" title="${esc(m.id)}">${esc(short(m.id))} ${tags}</td><td>${dev}${eng}</td>` +
        `<td class="st-${esc(st)}">${esc(st)}${fe}</td><td class="live">${esc(m.liveness)}</td><td>${layers}</td>` +
        `<td class="num">${ld ? ld.queue_depth : "–"}</td>` +
        `<td class="num">${ld ? (ld.entry_queue ? ld.entry_queue + " (" + fmt(ld.entry_wait_ms / 1000, 1) + " s)" : "0") : "–"}</td>` +
        `<td class="num">${ld ? ld.active_sessions : "–"}</td>` +
        `<td class="num">${ld && ld.free_kv_tokens >= 0 ? ld.free_kv_tokens.toLocaleString() : "–"}</td>` +
        `<td class="num">${fmt(nodeRate(m), 1)}</td><td class="num">${m.self ? "–" : fmt(m.rtt_ms, 2)}</td>` +
        `<td class="num">${ld && !m.self ? fmt(ld.age_ms / 1000, 1) + " s" : "–"}</td></tr>`);
    }
    $("nodes").tBodies[0].innerHTML = rows.join("");
    const n = v.members.length, dead = v.members.filter((m) => m.liveness === "dead").length;
    $("nodes-summary").textContent = `${n} known · ${v.voters.length} voters` + (dead ? ` · ${dead} dead` : "");
  }

  // ---- requests ----
  function selectedRequest() {
    if (state.selected) {
      const r = state.requests.find((q) => q.id === state.selected);
      if (r) return r;
    }
    for (let i = state.requests.length - 1; i >= 0; i--) if (state.requests[i].paths.length) return state.requests[i];
    return null;
  }

  function pathText(hops) {
    return hops.map((h) => `${short(h.node)}[${h.from},${h.to})`).join(" → ");
  }

  // scoreText is the winning score of a request's last path: its
  // estimated seconds, then their split (other: scorers such as prefix
  // affinity), then the path's [0, 1] score per scorer (1 best).
  function scoreText(q) {
    const s = q.scores && q.scores.length ? q.scores[q.scores.length - 1] : null;
    if (!s) return ["–", ""];
    let split = `latency ${fmt(s.latency_s, 3)} · load ${fmt(s.load_s, 3)} · locality ${fmt(s.locality_s, 3)} · other ${fmt(s.other_s, 3)}`;
    const u = s.unit;
    if (u) {
      split += ` | scores: latency ${fmt(u.latency, 2)} · load ${fmt(u.load, 2)} · locality ${fmt(u.locality, 2)}` +
        ` · fresh ${fmt(u.stale, 2)} · kv ${fmt(u.kv_headroom, 2)} · prefix ${fmt(u.prefix_affinity, 2)}`;
    }
    return [fmt(s.cost_s, 3), split];
  }

  function renderRequests() {
    const sel = selectedRequest();
    const rows = [];
    for (let i = state.requests.length - 1; i >= 0; i--) {
      const q = state.requests[i];
      const ok = q.status === "ok";
      const paths = q.paths.map(pathText).join("<br>replayed: ");
      const [score, split] = scoreText(q);
      rows.push(`<tr data-request="${esc(q.id)}" data-status="${esc(q.status)}" class="${sel && sel.id === q.id ? "sel" : ""}">` +
        `<td>${clock(q.time)}</td><td class="${ok ? "good" : "bad"}">${esc(q.status)}</td>` +
        `<td class="num">${fmt(q.ttft_ms, 0)}</td><td class="num">${fmt(q.tokens_per_s, 1)}</td>` +
        `<td class="num">${q.completion_tokens}</td><td class="num ${q.replays ? "bad" : ""}">${q.replays}</td>` +
        `<td>${esc(q.profile || "–")}</td><td class="num" title="${esc(split)}">${score}</td>` +
        `<td class="path">${paths ? esc(paths).replace(/&lt;br&gt;/g, "<br>") : "–"}</td></tr>`);
    }
    $("requests").tBodies[0].innerHTML = rows.join("");
  }

  // ---- events: appended, never re-rendered ----
  function addEvent(e) {
    if (state.events.has(e.seq)) return;
    state.events.add(e.seq);
    const li = document.createElement("li");
    li.dataset.kind = e.kind;
    li.dataset.seq = e.seq;
    if (e.node) li.dataset.node = e.node;
    li.innerHTML = `<time>${clock(e.time)}</time><span class="k k-${esc(e.kind)}">${esc(e.kind.replace("_", " "))}</span><span>${esc(e.detail)}</span>`;
    const list = $("events");
    list.insertBefore(li, list.firstChild);
    while (list.children.length > 200) list.removeChild(list.lastChild);
  }

  // ---- the stream ----
  function connect() {
    if (state.es) state.es.close();
    const url = "/v1/swarm/events" + (state.key ? "?key=" + encodeURIComponent(state.key) : "");
    const es = new EventSource(url);
    state.es = es;
    setConn("connecting", "connecting…");
    es.onopen = () => setConn("live", "live");
    es.onerror = () => {
      if (state.stopped) return;
      setConn("error", "reconnecting…");
      // EventSource hides the status; ask once whether the key is the cause.
      fetch("/v1/swarm", { headers: authHeaders() }).then((r) => {
        if (r.status === 401) {
          es.close();
          askKey("the key was refused");
        }
      }).catch(() => {});
    };
    es.addEventListener("swarm", (ev) => {
      state.stats.swarmMessages++;
      setView(JSON.parse(ev.data));
    });
    es.addEventListener("event", (ev) => addEvent(JSON.parse(ev.data)));
    es.addEventListener("request", (ev) => {
      const q = JSON.parse(ev.data);
      if (state.requests.some((r) => r.seq === q.seq)) return;
      state.requests.push(q);
      if (state.requests.length > 64) state.requests.shift();
      schedule(["requests", "coverage"]);
    });
  }

  function setView(v) {
    state.view = v;
    renderHeader(v);
    schedule(["coverage", "nodes"]);
  }

  function setConn(s, text) {
    const c = $("conn");
    c.dataset.state = s;
    c.textContent = text;
  }

  function askKey(msg) {
    $("auth").hidden = false;
    $("auth-msg").textContent = msg || "";
    setConn("error", "API key needed");
    $("auth-key").focus();
  }

  async function start() {
    let r;
    try {
      r = await fetch("/v1/swarm", { headers: authHeaders() });
    } catch (err) {
      setConn("error", "unreachable");
      setTimeout(start, 2000);
      return;
    }
    if (r.status === 401) {
      askKey(state.key ? "the stored key was refused" : "");
      return;
    }
    if (r.ok) setView(await r.json());
    $("auth").hidden = true;
    connect();
  }

  $("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.key = $("auth-key").value.trim();
    localStorage.setItem(KEY, state.key);
    start();
  });

  // ---- chat: streamed through this node's own API ----
  function addMsg(role, text) {
    const div = document.createElement("div");
    div.className = "msg " + role;
    div.textContent = text;
    $("chat-log").appendChild(div);
    $("chat-log").scrollTop = $("chat-log").scrollHeight;
    return div;
  }

  async function send(text) {
    const model = state.view ? state.view.model.id : "";
    // Plain completion: the text alone is the prompt, shown again with
    // its continuation; no history.
    const plain = state.plain;
    if (!plain) state.history.push({ role: "user", content: text });
    addMsg("user", text);
    const out = addMsg("assistant", "");
    const body = document.createElement("span");
    out.appendChild(body);
    out.dataset.done = "false";
    out.dataset.deltas = "0";
    $("chat-send").disabled = true;
    let answer = "", deltas = 0, ended = false;
    const t0 = performance.now();
    let ttft = null;
    try {
      const max = parseInt($("chat-max").value, 10) || 48;
      const req = plain ? { model, prompt: text, stream: true, max_tokens: max }
        : { model, messages: state.history, stream: true, max_tokens: max };
      const resp = await fetch(plain ? "/v1/completions" : "/v1/chat/completions", {
        method: "POST",
        headers: Object.assign({ "Content-Type": "application/json" }, authHeaders()),
        body: JSON.stringify(req),
      });
      if (!resp.ok) {
        let msg = resp.status + " " + resp.statusText;
        try { msg = (await resp.json()).error.message; } catch (e) { /* not JSON */ }
        throw new Error(msg);
      }
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const evt = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const line of evt.split("\n")) {
            if (!line.startsWith("data: ")) continue;
            const data = line.slice(6);
            if (data === "[DONE]") { ended = true; continue; }
            const chunk = JSON.parse(data);
            if (chunk.error) throw new Error(chunk.error.message);
            const ch = chunk.choices && chunk.choices[0];
            const piece = ch && (plain ? ch.text : ch.delta && ch.delta.content);
            if (piece) {
              if (ttft === null) ttft = performance.now() - t0;
              answer += piece;
              deltas++;
              body.textContent = (plain ? text : "") + answer;
              out.dataset.deltas = String(deltas);
              $("chat-log").scrollTop = $("chat-log").scrollHeight;
            }
          }
        }
      }
      if (!ended) throw new Error("the stream ended without [DONE]");
      if (!plain) state.history.push({ role: "assistant", content: answer });
      const meta = document.createElement("span");
      meta.className = "meta";
      meta.textContent = `${deltas} deltas · first after ${fmt(ttft, 0)} ms · ${fmt((performance.now() - t0) / 1000, 2)} s`;
      out.appendChild(meta);
    } catch (err) {
      if (!plain) state.history.pop(); // a failed turn stays out of the history
      out.classList.add("error");
      out.dataset.error = String(err.message || err);
      body.textContent = (answer ? answer + "\n" : "") + "error: " + (err.message || err);
    } finally {
      out.dataset.done = "true";
      $("chat-send").disabled = false;
    }
  }

  $("chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = $("chat-input").value.trim();
    if (!text) return;
    $("chat-input").value = "";
    send(text);
  });
  $("chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  $("chat-reset").addEventListener("click", () => {
    state.history = [];
    $("chat-log").innerHTML = "";
  });
  $("requests").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-request]");
    if (!tr) return;
    state.selected = tr.dataset.request;
    schedule(["requests", "coverage"]);
  });
  window.addEventListener("resize", () => schedule(["coverage"]));

  // For tests and the curious: render a given view at once (no frame
  // wait), stop the live stream, read counters.
  window.strataDashboard = {
    render(v) {
      const t0 = performance.now();
      state.view = v;
      renderHeader(v);
      renderCoverage();
      renderNodes();
      return performance.now() - t0;
    },
    stop() {
      state.stopped = true;
      if (state.es) state.es.close();
      setConn("connecting", "stopped");
    },
    stats: state.stats,
  };

  start();
})();
