"use strict";
// The monitor page: reads /api/swarms every few seconds and draws each
// swarm: its model, a coverage bar (one segment per run of layers with
// the same number of serving nodes), and its nodes. Data attributes carry
// the figures for tests and scripts.

const REFRESH_MS = 3000;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, String(v));
    else if (k === "title") e.title = v;
    else if (k === "style") e.setAttribute("style", v);
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function short(id) { return id.length > 10 ? "…" + id.slice(-8) : id; }
function rate(x) { return x >= 10 ? x.toFixed(0) : x.toFixed(2); }

function coverageBar(cov, layers) {
  const bar = el("div", {class: "cov", "data-layers": layers});
  for (const r of cov.runs || []) {
    const cls = "run r" + Math.min(r.nodes, 3);
    bar.append(el("span", {class: cls, "data-start": r.start, "data-end": r.end, "data-nodes": r.nodes,
      title: `layers ${r.start}–${r.end - 1}: ${r.nodes} node(s)`, style: `flex: ${r.end - r.start}`}, "×" + r.nodes));
  }
  return bar;
}

function nodeRow(n) {
  const layers = n.range_end > n.range_start ? `${n.range_start}–${n.range_end - 1}` : "–";
  const links = Object.entries(n.links || {}).map(([k, v]) => `${v} ${k}`).join(", ");
  return el("tr", {"data-node": n.id, "data-reach": n.reachability, "data-verified": n.verified, "data-state": n.state || ""},
    el("td", {class: "id", title: n.id}, short(n.id)),
    el("td", {}, n.verified ? "✓" : el("span", {class: "unverified", title: n.error || ""}, "unverified")),
    el("td", {}, n.state || "?"),
    el("td", {}, layers),
    el("td", {}, el("span", {class: "reach " + n.reachability}, n.reachability)),
    el("td", {}, n.nat || ""),
    el("td", {}, links),
    el("td", {}, n.via ? "via " + short(n.via) : "direct"),
    el("td", {}, rate(n.tokens_per_sec)),
    el("td", {}, n.engine || "go"),
    el("td", {title: n.error || n.charter_error || ""}, (n.error || n.charter_error || "").slice(0, 60)));
}

function swarmSection(s) {
  const cov = s.coverage;
  const covText = s.layers === 0 ? "unknown (no verified member)" :
    cov.covered ? `every layer covered, redundancy ${cov.min_redundancy}–${cov.max_redundancy}` :
    `GAPS: layers ${(cov.gaps || []).map(g => `${g.start}–${g.end - 1}`).join(", ")} served by no node`;
  const sec = el("section", {class: "swarm", "data-name": s.name, "data-model": s.model, "data-layers": s.layers, "data-founder": s.founder || "",
      "data-covered": cov.covered, "data-min": cov.min_redundancy, "data-max": cov.max_redundancy,
      "data-nodes": s.nodes.length, "data-verified": s.verified},
    el("h2", {}, `${s.name} · ${s.model || "?"}`),
    el("div", {class: "facts"},
      el("span", {}, el("b", {}, "layers "), s.layers),
      el("span", {class: cov.covered ? "ok" : "bad"}, covText),
      el("span", {}, el("b", {}, "nodes "), `${s.verified} verified of ${s.nodes.length}`),
      el("span", {}, el("b", {}, "served "), rate(s.tokens_per_sec) + " tok/s"),
      s.map_epoch ? el("span", {}, el("b", {}, "map epoch "), s.map_epoch) : null,
      s.founder ? el("span", {class: "founder", title: s.founder}, el("b", {}, "founder "), short(s.founder)) : null,
      el("span", {class: "fp", title: s.fingerprint}, short(s.fingerprint || ""))),
    coverageBar(cov, s.layers),
    el("div", {class: "axis"}, el("span", {}, "layer 0"), el("span", {}, `layer ${Math.max(s.layers - 1, 0)}`)));
  const table = el("table", {},
    el("thead", {}, el("tr", {}, ...["node", "signed", "state", "layers", "reachability", "NAT", "links", "asked", "tok/s", "engine", "note"].map(h => el("th", {}, h)))),
    el("tbody", {}, ...s.nodes.map(nodeRow)));
  sec.append(table);
  return sec;
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/api/swarms", {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const rep = await r.json();
    const main = document.getElementById("swarms");
    main.replaceChildren(...(rep.swarms || []).map(swarmSection));
    const when = rep.updated && !rep.updated.startsWith("0001") ? new Date(rep.updated).toLocaleTimeString() : "never";
    status.textContent = rep.error ? `last crawl failed: ${rep.error}` :
      `${(rep.swarms || []).length} swarm(s) · crawled ${when} in ${(rep.took_s || 0).toFixed(1)} s · monitor ${short(rep.monitor || "")}`;
    status.dataset.state = rep.error ? "error" : "ok";
    status.dataset.crawls = rep.crawls || 0;
  } catch (e) {
    status.textContent = "monitor unreachable: " + e.message;
    status.dataset.state = "error";
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
