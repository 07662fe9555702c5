// The operator page: builds every element with the DOM API (never innerHTML), so rule text,
// keys and values from clients are always shown as text.
"use strict";

const API = "/ui/api/";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

function duration(ms) {
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 120) return (Math.round(s * 10) / 10) + " s";
  const m = s / 60;
  if (m < 120) return (Math.round(m * 10) / 10) + " min";
  return (Math.round(m / 6) / 10) + " h";
}

function rate(n) {
  return n >= 100 ? Math.round(n).toString() : (Math.round(n * 10) / 10).toString();
}

// ---- rules tree

function limitText(limit) {
  const name = limit.name ? limit.name + ": " : "";
  return name + limit.text;
}

function percent(portion) {
  return (Math.round(portion * 1000) / 10) + " %";
}

function nodeItem(node) {
  const label = el("span", { class: "mono" }, node.key + (node.value === null ? "" : " = " + node.value));
  const item = el("li", { class: "node" }, label, el("span", { class: "tag" }, node.match));
  for (const limit of node.limits) item.append(el("span", { class: "limit" }, limitText(limit)));
  for (const flag of node.flags) {
    if (flag !== "failure_mode: allow") item.append(el("span", { class: "tag" }, flag));
  }
  if (node.children.length) item.append(tree(node.children, false));
  return item;
}

function tree(nodes, root) {
  const list = el("ul", { class: root ? "tree root" : "tree" });
  for (const node of nodes) list.append(nodeItem(node));
  return list;
}

async function loadRules() {
  const rules = await (await fetch(API + "rules")).json();
  const version = rules.version === null ? "" : " (xDS version " + rules.version + ")";
  document.getElementById("summary").textContent = "rules: " + rules.summary + version;
  const box = document.getElementById("rules");
  const names = document.getElementById("domains");
  box.replaceChildren();
  names.replaceChildren();
  for (const domain of rules.domains) {
    names.append(el("option", { value: domain.name }));
    const details = el("details", { open: "", class: "domain", "data-domain": domain.name },
      el("summary", {}, el("b", {}, "domain " + domain.name)), tree(domain.nodes, true));
    box.append(details);
  }
  for (const id of ["domain", "bucket-domain"]) {
    const input = document.getElementById(id);
    if (!input.value && rules.domains.length) input.value = rules.domains[0].name;
  }
}

// ---- explain

function counterCell(limit) {
  if (limit.replaced_by.length) return el("span", { class: "muted" }, "replaced by " + limit.replaced_by.join(", ") + ": not counted");
  const c = limit.counter;
  if (!c) return el("span", { class: "muted" }, "not counted");
  const share = c.capacity ? Math.max(0, Math.min(1, c.remaining / c.capacity)) : 0;
  const bar = el("span", { class: share < 0.2 ? "bar low" : "bar" }, el("span"));
  bar.firstChild.style.width = (share * 100).toFixed(1) + "%";
  const state = c.admits
    ? el("span", { class: "ok" }, c.remaining + " of " + c.capacity + " left; full again in " + duration(c.reset_after_ms))
    : el("span", { class: "over" }, "exhausted; a call is admitted again in " + duration(c.reset_after_ms));
  const portion = limit.region_portion === null || limit.region_portion === undefined ? ""
    : " (this region's portion: " + percent(limit.region_portion) + " of the limit)";
  return el("span", {}, bar, " ", state, limit.shards > 1 ? " (" + limit.shards + " shards)" : "", portion);
}

function explainedCard(d, i) {
  const entries = d.entries.map(([k, v]) => k + "=" + v).join(", ");
  const card = el("div", { class: "card explained" }, el("div", {}, el("b", {}, "descriptor " + (i + 1) + ": "), el("span", { class: "mono" }, entries)));
  const steps = el("table", { class: "steps" }, el("thead", {}, el("tr", {}, el("th", {}, "level"), el("th", {}, "entry"), el("th", {}, "rule node"), el("th", {}, "how"))));
  const body = el("tbody");
  for (const s of d.steps) {
    let node = s.node;
    if (!node) {
      node = s.configured_values.length ? "no match; values here: " + s.configured_values.join(", ")
        : "no rule has this key here" + (s.configured_keys.length ? "; keys here: " + s.configured_keys.join(", ") : "");
    }
    body.append(el("tr", {}, el("td", { class: "num" }, s.level), el("td", { class: "mono" }, s.key + "=" + s.value),
      el("td", { class: s.node ? "mono" : "mono over" }, node), el("td", {}, s.match || "—")));
  }
  steps.append(body);
  card.append(steps, el("p", { class: "why" }, d.why));
  if (d.rule) card.append(el("p", {}, "rule ", el("span", { class: "mono" }, d.rule), el("span", { class: "muted" }, " (" + d.location + ")"),
    ...d.flags.map((f) => el("span", { class: "tag" }, f))));
  if (d.limits.length) {
    const limits = el("table", { class: "limits" }, el("thead", {}, el("tr", {}, el("th", {}, "limit"), el("th", {}, "counter now"))));
    const lb = el("tbody");
    for (const l of d.limits) lb.append(el("tr", {}, el("td", {}, limitText(l.limit)), el("td", {}, counterCell(l))));
    limits.append(lb);
    card.append(limits);
  }
  if (d.upstream.length) {
    const notes = el("ul", { class: "notes" });
    for (const n of d.upstream) notes.append(el("li", {}, n));
    card.append(el("p", { class: "warn" }, "Where envoyproxy/ratelimit would differ:"), notes);
  }
  return card;
}

async function explain(event) {
  event.preventDefault();
  const out = document.getElementById("explanation");
  const descriptors = document.getElementById("descriptors").value.split("\n").map((l) => l.trim()).filter((l) => l);
  const response = await fetch(API + "explain", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ domain: document.getElementById("domain").value.trim(), descriptors }),
  });
  const answer = await response.json();
  out.replaceChildren();
  if (!response.ok) {
    out.append(el("p", { class: "error" }, answer.error));
    return;
  }
  const verdict = answer.would_refuse
    ? el("p", { class: "verdict over" }, "A call now would be refused (OVER_LIMIT).")
    : el("p", { class: "verdict ok" }, "A call now would be admitted (OK).");
  out.append(verdict);
  if (answer.store_error) out.append(el("p", { class: "warn" }, "counter store unavailable (" + answer.store_error + "): each rule's failure_mode would decide"));
  answer.descriptors.forEach((d, i) => out.append(explainedCard(d, i)));
}

// ---- bucket explain (Envoy's quota service)

function bucketCard(b) {
  const entries = b.entries.map(([k, v]) => k + "=" + v).join(", ");
  const card = el("div", { class: "card explained" }, el("div", {}, el("b", {}, "bucket: "), el("span", { class: "mono" }, entries)));
  if (b.trials.length) {
    const trials = el("table", { class: "steps" }, el("thead", {}, el("tr", {}, el("th", {}, "level"), el("th", {}, "entry"),
      el("th", {}, "rule node"), el("th", {}, "how"), el("th", {}, "then"))));
    const body = el("tbody");
    for (const t of b.trials) {
      const good = t.outcome === "complete" || t.outcome === "continued";
      body.append(el("tr", {}, el("td", { class: "num" }, t.level), el("td", { class: "mono" }, t.key + "=" + t.value),
        el("td", { class: "mono" }, t.node), el("td", {}, t.match), el("td", { class: good ? "ok" : "muted" }, t.text)));
    }
    trials.append(body);
    card.append(trials);
  }
  card.append(el("p", { class: "why" }, b.why));
  if (b.rule) card.append(el("p", {}, "rule ", el("span", { class: "mono" }, b.rule), el("span", { class: "muted" }, " (" + b.location + ")"),
    ...b.flags.map((f) => el("span", { class: "tag" }, f))));
  const cls = b.action.kind === "deny" && !b.action.shadow ? "verdict over" : "verdict ok";
  card.append(el("p", { class: cls }, "Envoy is told: " + b.action.text));
  return card;
}

async function explainBucket(event) {
  event.preventDefault();
  const out = document.getElementById("bucket-explanation");
  const response = await fetch(API + "explain-bucket", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ domain: document.getElementById("bucket-domain").value.trim(), bucket: document.getElementById("bucket").value.trim() }),
  });
  const answer = await response.json();
  out.replaceChildren(response.ok ? bucketCard(answer) : el("p", { class: "error" }, answer.error));
}

// ---- live figures

function sparkline(history) {
  const svg = document.getElementById("sparkline");
  svg.replaceChildren();
  if (history.length < 2) return;
  const max = Math.max(1, ...history.map((h) => h.ok + h.over_limit));
  for (const [field, cls] of [["ok", "ok"], ["over_limit", "over"]]) {
    const points = history.map((h, i) => (i * 240 / (history.length - 1)).toFixed(1) + "," + (40 - h[field] * 38 / max).toFixed(1));
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points.join(" "));
    line.setAttribute("class", cls);
    svg.append(line);
  }
}

async function loadLive() {
  const live = await (await fetch(API + "live")).json();
  const r = live.last_10s, m = live.last_60s;
  const box = document.getElementById("rates");
  box.replaceChildren(el("div", { class: "rates" },
    el("div", {}, el("b", { class: "ok" }, rate(r.ok)), "OK/s (10 s)"),
    el("div", {}, el("b", { class: "over" }, rate(r.over_limit)), "OVER_LIMIT/s (10 s)"),
    el("div", {}, el("b", { class: "warn" }, rate(r.degraded)), "degraded/s"),
    el("div", {}, el("b", {}, rate(r.errors)), "errors/s"),
    el("div", {}, el("b", {}, rate(m.ok + m.over_limit)), "calls/s (60 s)")));
  box.append(el("p", { class: "muted" }, "since start: " + live.totals.ok + " OK, " + live.totals.over_limit + " OVER_LIMIT, " +
    live.totals.degraded + " degraded, " + live.totals.errors + " errors"));
  sparkline(live.history);
  document.getElementById("top-window").textContent = "refused descriptors over the last " + duration(live.top_window_seconds * 1000) +
    " (a Space-Saving sketch: counts may be over by the amount shown)";
  const body = document.querySelector("#top tbody");
  body.replaceChildren();
  if (!live.top.length) body.append(el("tr", {}, el("td", { colspan: "3", class: "muted" }, "nothing refused lately")));
  for (const k of live.top) {
    body.append(el("tr", {}, el("td", { class: "mono" }, k.domain), el("td", { class: "mono" }, k.descriptor),
      el("td", { class: "num" }, k.count + (k.error ? " (±" + k.error + ")" : ""))));
  }
}

// ---- RLQS buckets (a page of the book: the first 100)

async function loadQuota() {
  const quota = await (await fetch(API + "quota?limit=100")).json();
  document.getElementById("quota-count").textContent = quota.count + " bucket" + (quota.count === 1 ? "" : "s") +
    (quota.count > quota.buckets.length ? " (first " + quota.buckets.length + " shown)" : "");
  const body = document.querySelector("#quota tbody");
  body.replaceChildren();
  if (!quota.buckets.length) body.append(el("tr", {}, el("td", { colspan: "7", class: "muted" }, "no Envoy reports a quota bucket")));
  for (const b of quota.buckets) {
    const limit = b.limit ? " (" + rate(b.limit.per_second) + "/s, burst " + b.limit.burst + ")" : "";
    const holders = b.holders.length ? b.holders : [null];
    for (const h of holders) {
      body.append(el("tr", {}, el("td", { class: "mono" }, b.domain), el("td", { class: "mono" }, b.bucket),
        el("td", { class: "mono" }, (b.rule || "no rule") + limit),
        el("td", { class: "num" }, h ? String(h.stream) + (h.reporting ? "" : " (gone)") : "-"),
        el("td", { class: "num" }, h && h.demand_per_second !== null ? rate(h.demand_per_second) : "-"),
        el("td", { class: "num" }, h ? rate(h.share_per_second) : "-"),
        el("td", { class: "mono" }, h && h.strategy ? h.strategy : "-")));
    }
  }
}

// ---- one limit across regions

async function loadRegion() {
  const region = await (await fetch(API + "region")).json();
  const section = document.getElementById("region-section");
  if (region.region === null) return;
  section.hidden = false;
  const store = region.reachable ? "global store reachable" : "degraded: " + (region.failing || "global store not heard from yet");
  document.getElementById("region-summary").textContent = "region " + region.region + ": " + store + "; " +
    region.members + " regions; floor " + percent(region.floor) + "; " + region.units + " units of global limits";
  const body = document.querySelector("#region tbody");
  body.replaceChildren();
  if (!region.busiest.length) body.append(el("tr", {}, el("td", { colspan: "7", class: "muted" }, "no call or bucket of a global limit yet")));
  for (const u of region.busiest) {
    body.append(el("tr", {}, el("td", { class: "mono" }, u.domain), el("td", { class: "mono" }, u.rule),
      el("td", { class: "mono" }, u.name),
      el("td", { class: "num" }, rate(u.demand_per_second)),
      el("td", { class: "num" }, rate(u.region_demand_per_second)),
      el("td", { class: "num" }, rate(u.others_demand_per_second)),
      el("td", { class: "num" }, percent(u.portion) + (u.claimed >= u.portion ? "" : " (floor)"))));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("explain-form").addEventListener("submit", explain);
  document.getElementById("bucket-form").addEventListener("submit", explainBucket);
  loadRules();
  loadLive();
  loadQuota();
  loadRegion();
  setInterval(loadLive, 2000);
  setInterval(loadQuota, 2000);
  setInterval(loadRegion, 2000);
  setInterval(loadRules, 15000);
});
