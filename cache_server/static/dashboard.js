// The dashboard: reads /dashboard/data and draws it with plain SVG (no libraries: the cache VM has no internet).
// Each view has its own address (a hash route): #/ (overview), #/runs, #/runs/<id>, #/graphs,
// #/graphs/<namespace>, #/graphs/<namespace>/<module>, #/namespaces/<name> (dashboard_namespace.js).
// With auth on, the token is asked for in a form, kept in this tab's sessionStorage and sent as
// "Authorization: Bearer" by every fetch: it never travels in a URL (page.js: the token, fetchJson, and
// the doors every text goes through: printable, el, setText, textNode, setLines, setAttributes).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const REFRESH_MS = 30000;

// "#/graphs/ns/module": each part encoded, so a name never breaks the route.
function routeHash(...parts) { return "#/" + parts.map((p) => encodeURIComponent(p)).join("/"); }

function routeLink(href, text, attrs) {
  const link = el("a", { href, ...(attrs || {}) });
  link.appendChild(el("code", {}, text));
  return link;
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  setAttributes(node, attrs);
  if (text !== undefined) setText(node, text);
  return node;
}

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
}

function fmtCount(n) { return n.toLocaleString("en-US"); }

function fmtRate(r) { return r === null || r === undefined ? "–" : (100 * r).toFixed(1) + " %"; }

function fmtSeconds(s) {
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  if (s < 86400) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " days";
}

function fmtWhen(iso) { return new Date(iso).toLocaleString(); }

function empty(container, sentence) {
  clear(container);
  container.appendChild(el("p", { class: "empty" }, sentence));
}

function renderTotals(t, jobs) {
  // Hit rate, compiles and saved are the jobs' (their run reports); lookups are the server's answers to
  // manifests and GETs, shown as lookups only (a download may go unused: never saved, never a hit rate).
  const j = jobs || { runs: 0, hits: 0, compiles: 0, hit_rate: null, compile_seconds: 0, saved_seconds: 0 };
  const cards = [
    ["Entries stored", fmtCount(t.entries)],
    ["Bytes stored", fmtBytes(t.bytes)],
    ["Hit rate", fmtRate(j.hit_rate), `jobs' reports: ${fmtCount(j.hits)} loaded, ${fmtCount(j.compiles)} compiled`],
    ["Compiles", fmtCount(j.compiles), `${fmtCount(j.runs)} runs reported`],
    ["Compile time paid", fmtSeconds(j.compile_seconds), "jobs' reports"],
    ["Compile time saved", fmtSeconds(j.saved_seconds), "jobs' reports: what each loaded entry cost to compile"],
    ["Lookups found", fmtCount(t.hits), `server lookups; ${fmtCount(t.misses)} not found`],
    ["Delivered live", fmtCount(t.live_deliveries)],
    ["Bytes served", fmtBytes(t.bytes_served)],
    ["Uploads", fmtCount(t.uploads)],
    ["Evictions", fmtCount(t.evictions)],
  ];
  const box = document.getElementById("totals");
  clear(box);
  for (const [label, value, note] of cards) {
    const card = el("div", { class: "card" });
    card.appendChild(el("div", { class: "value", "data-total": label }, value));
    card.appendChild(el("div", { class: "label" }, label));
    if (note) card.appendChild(el("div", { class: "label note" }, note));
    box.appendChild(card);
  }
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// A round top for an axis of four steps (each step a round number too).
function quarterMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// Stacked bars of what the jobs loaded (hits) and compiled (misses) per day their runs started, and the
// day's hit rate as a line on a 0-100 % axis: the jobs' numbers, never the server's lookups.
function renderHits(days) {
  const fig = document.getElementById("hits-chart");
  const daily = days.map((d) => ({ day: d.day, hits: d.jobs.hits, misses: d.jobs.compiles, hit_rate: d.jobs.hit_rate }));
  if (!daily.some((d) => d.hits + d.misses > 0)) {
    empty(fig, "No run reports yet: the chart fills in as jobs that warm from the cache report their runs.");
    return;
  }
  clear(fig);
  const W = 900, H = 260, L = 56, R = 48, T = 12, B = 36;
  const plotW = W - L - R, plotH = H - T - B;
  const max = niceMax(Math.max(...daily.map((d) => d.hits + d.misses)));
  const step = plotW / daily.length;
  const barW = Math.max(2, step * 0.7);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": "Graphs the jobs loaded and compiled per day" });
  for (let i = 0; i <= 4; i++) {
    const y = T + plotH - (plotH * i) / 4;
    svg.appendChild(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: y, y2: y }));
    svg.appendChild(svgEl("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, fmtCount((max * i) / 4)));
    svg.appendChild(svgEl("text", { x: W - R + 6, y: y + 4 }, `${25 * i} %`));
  }
  const points = [];
  daily.forEach((d, i) => {
    const x = L + i * step + (step - barW) / 2;
    const hitH = (plotH * d.hits) / max;
    const missH = (plotH * d.misses) / max;
    const base = T + plotH;
    const title = `${d.day}: ${fmtCount(d.hits)} loaded, ${fmtCount(d.misses)} compiled, hit rate ${fmtRate(d.hit_rate)}`;
    if (d.hits > 0) {
      const r = svgEl("rect", { class: "bar bar-hit", x, y: base - hitH, width: barW, height: hitH });
      r.appendChild(svgEl("title", {}, title));
      svg.appendChild(r);
    }
    if (d.misses > 0) {
      const r = svgEl("rect", { class: "bar bar-miss", x, y: base - hitH - missH, width: barW, height: missH });
      r.appendChild(svgEl("title", {}, title));
      svg.appendChild(r);
    }
    if (d.hit_rate !== null) points.push([x + barW / 2, T + plotH * (1 - d.hit_rate), title]);
    // every few days, and the last day (the one before it left out if they would touch)
    const every = daily.length <= 16 ? 1 : Math.ceil(daily.length / 10), last = daily.length - 1;
    if (i === last || (i % every === 0 && (every === 1 || last - i > every / 2 + 1))) {
      // "Nov 6": the day (UTC, as the rollup's days), its month named
      const day = new Date(`${d.day}T00:00:00Z`).toLocaleDateString(undefined,
        { month: "short", day: "numeric", timeZone: "UTC" });
      svg.appendChild(svgEl("text", { class: "tick", x: x + barW / 2, y: H - B + 16, "text-anchor": "middle" }, day));
    }
  });
  if (points.length > 1) {
    const dPath = points.map(([x, y], i) => `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
    svg.appendChild(svgEl("path", { class: "rate-line", d: dPath }));
  }
  for (const [x, y, title] of points) {
    const dot = svgEl("circle", { class: "rate-dot", cx: x, cy: y, r: 3 });
    dot.appendChild(svgEl("title", {}, title));
    svg.appendChild(dot);
  }
  fig.appendChild(svg);
  const legend = el("figcaption", { class: "legend" });
  legend.appendChild(el("span", { class: "hit" }, "loaded from the cache (hits)"));
  legend.appendChild(el("span", { class: "miss" }, "compiled (misses)"));
  legend.appendChild(el("span", { class: "rate" }, "jobs' hit rate (right axis)"));
  fig.appendChild(legend);
}

// The width of a chart label in the SVG's units: measured once drawn (an estimate while hidden).
function labelWidth(node) {
  const measured = node.getComputedTextLength ? node.getComputedTextLength() : 0;
  return measured > 0 ? measured : 6.6 * node.textContent.length;
}

// Horizontal bars: one row per item, labelled on the left, value at the end of the bar. The label column
// is as wide as the longest label (at most 45 % of the chart); a longer one is cut in its middle, so both
// ends ("namespace / graph") stay readable, and shown whole in the bar's tooltip.
function renderBars(figId, items, barClass, label, value, shown, ariaLabel) {
  const fig = document.getElementById(figId);
  clear(fig);
  const W = 900, R = 110, rowH = 26, T = 4, PAD = 8, MAXL = W * 0.45;
  const H = T * 2 + rowH * items.length;
  const max = Math.max(...items.map(value), 1);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": ariaLabel });
  fig.appendChild(svg); // in the page first, so the labels can be measured
  const names = items.map((item, i) => {
    const text = svgEl("text", { class: "label", y: T + i * rowH + rowH / 2 + 4, "text-anchor": "end" }, label(item));
    svg.appendChild(text);
    let full = printable(label(item)), cut = 0;
    while (labelWidth(text) > MAXL - 2 * PAD && full.length - cut > 8) {
      cut += 2;
      const keep = full.length - cut, head = Math.ceil(keep / 2);
      setText(text, full.slice(0, head) + "…" + full.slice(full.length - (keep - head)));
    }
    if (cut) text.appendChild(svgEl("title", {}, full));
    return text;
  });
  const L = Math.min(MAXL, Math.max(80, ...names.map(labelWidth)) + 2 * PAD);
  items.forEach((item, i) => {
    const y = T + i * rowH;
    names[i].setAttribute("x", String(L - PAD));
    const w = Math.max(1, ((W - L - R) * value(item)) / max);
    const r = svgEl("rect", { class: `bar ${barClass}`, x: L, y: y + 4, width: w, height: rowH - 8 });
    r.appendChild(svgEl("title", {}, `${label(item)}: ${shown(item)}`));
    svg.appendChild(r);
    svg.appendChild(svgEl("text", { class: "value", x: L + w + 6, y: y + rowH / 2 + 4 }, shown(item)));
  });
}

function renderTable(id, headers, rows) {
  const table = document.getElementById(id);
  clear(table);
  const head = el("tr");
  headers.forEach(([h, cls]) => head.appendChild(el("th", cls ? { class: cls } : {}, h)));
  table.appendChild(el("thead")).appendChild(head);
  const body = table.appendChild(el("tbody"));
  for (const row of rows) {
    const tr = el("tr");
    row.forEach((cell, i) => {
      const td = el("td", headers[i][1] ? { class: headers[i][1] } : {});
      if (cell instanceof Node) td.appendChild(cell); else setText(td, cell);
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
}

function renderNamespaces(namespaces) {
  const withBytes = namespaces.filter((n) => n.bytes > 0);
  if (withBytes.length === 0) {
    empty(document.getElementById("ns-chart"), "Nothing stored yet.");
  } else {
    renderBars("ns-chart", withBytes, "bar-bytes", (n) => n.namespace, (n) => n.bytes,
      (n) => fmtBytes(n.bytes), "Bytes stored per namespace");
  }
  renderTable("ns-table",
    [["namespace", "text"], ["framework", "text"], ["entries"], ["bytes"], ["runs"], ["hit rate"], ["compiles"],
      ["compile paid"], ["saved"], ["lookups found"], ["uploads"], ["evictions"], ["last used", "text"]],
    namespaces.map((n) => [namespaceLink(n.namespace), n.framework || "-", fmtCount(n.entries),
      fmtBytes(n.bytes), fmtCount(n.jobs.runs), fmtRate(n.jobs.hit_rate), fmtCount(n.jobs.compiles),
      fmtSeconds(n.jobs.compile_seconds), fmtSeconds(n.jobs.saved_seconds), fmtCount(n.hits),
      fmtCount(n.uploads), fmtCount(n.evictions), fmtWhen(n.last_used_at)]));
}

function renderGraphs(graphs) {
  if (graphs.length === 0) {
    empty(document.getElementById("graphs-chart"),
      "No parsed graphs yet (entries are parsed in the background after upload).");
    clear(document.getElementById("graphs-table"));
    return;
  }
  // a graph of one name may be in several namespaces: each bar says whose
  // ranked by cost (compile seconds paid, then compiles); variants are a column, not the order
  renderBars("graphs-chart", graphs, "bar-variants", (g) => `${g.namespace} / ${g.module}`,
    (g) => g.compile_seconds, (g) => `${fmtSeconds(g.compile_seconds)}, ${fmtCount(g.entries)} compiles`,
    "Compile seconds paid per graph");
  renderTable("graphs-table",
    [["graph (HLO module)", "text"], ["namespace", "text"], ["compile time paid"], ["compiles"], ["variants"],
      ["bytes"], ["hits"], ["traced at", "text"], ["example shapes", "text"]],
    graphs.map((g) => [routeLink(routeHash("graphs", g.namespace, g.module), g.module, { "data-graph": g.module }),
      namespaceLink(g.namespace), fmtSeconds(g.compile_seconds), fmtCount(g.entries), fmtCount(g.variants),
      fmtBytes(g.bytes), fmtCount(g.hits), g.source || "–",
      setLines(el("code"), g.examples)]));
}

// The graph view: one namespace's graphs, their varying dimensions and what each padding scheme leaves.
function fmtOverhead(r) { return "+" + (100 * r).toFixed(r < 0.1 ? 1 : 0) + " %"; }

// The steps of the job first (graphs one step produced: modules cut by sizes that add or drop an op are
// one step), the costliest first, each with what varies and what to do.
function renderSteps(steps) {
  const box = document.getElementById("steps");
  clear(box);
  if (!steps || steps.length === 0) return;
  box.appendChild(el("p", { class: "explain" },
    "Its steps, the costliest first (compile seconds paid, then compiles): what varies and what to do."));
  const table = box.appendChild(el("table", { class: "steps", id: "steps-table" }));
  renderTable(table.id,
    [["step (its graphs)", "text"], ["compile time paid"], ["compiles"], ["variants"], ["what varies", "text"],
      ["what to do", "text"]],
    steps.map((s) => [setLines(el("code"), s.modules), fmtSeconds(s.compile_seconds), fmtCount(s.compiles),
      fmtCount(s.variants), setLines(el("span"), s.varies), s.fix || "–"]));
}

// How many of the namespace's entries a prefill compiled ahead of its jobs (issue 44), and how many of those
// were published unverified (no real run of the namespace to compare the target with): one line, or none.
function prefilledLine(report) {
  const n = report.prefilled_entries || 0;
  if (!n) return null;
  const unverified = report.prefilled_unverified || 0;
  const line = el("p", { id: "buckets-prefilled", class: unverified ? "prefilled unverified" : "prefilled" },
    `${fmtCount(n)} entr${n === 1 ? "y" : "ies"} of ${report.namespace} prefilled (compiled ahead of the ` +
    "target job)" + (unverified
      ? `, ${fmtCount(unverified)} of them unverified: published without a real run of the namespace to ` +
        "compare the target's key components with."
      : ", each verified against a real run of the namespace."));
  return line;
}

function renderBuckets(report) {
  const box = document.getElementById("buckets");
  clear(box);
  renderSteps(report.steps);
  const prefilled = prefilledLine(report);
  if (report.graphs.length === 0) {
    empty(box, "No parsed graphs in this namespace.");
    if (prefilled) box.prepend(prefilled);
    box.dataset.shown = report.namespace;
    return;
  }
  if (prefilled) box.appendChild(prefilled);
  box.dataset.shown = report.namespace;
  for (const g of report.graphs) {
    const part = el("div", { class: "bucket-graph", "data-module": g.module });
    const title = el("h3");
    title.appendChild(el("code", {}, g.module));
    title.appendChild(textNode(
      ` ${fmtSeconds(g.compile_seconds)} compiling, ${fmtCount(g.entries)} compile${g.entries === 1 ? "" : "s"}, ` +
      `${fmtCount(g.variants)} variant${g.variants === 1 ? "" : "s"}`));
    part.appendChild(title);
    if ((g.sources || []).length) {
      part.appendChild(el("p", { class: "sources" },
        "Compiled at " + g.sources.map((s) => `${s.source} (${fmtCount(s.entries)})`).join(", ") +
        (g.sources_counted && g.sources_counted < g.entries
          ? ` (counted over ${fmtCount(g.sources_counted)} of its ${fmtCount(g.entries)} entries).` : ".")));
    }
    if (g.summary) part.appendChild(el("p", { class: "summary" }, `What to do: ${g.summary}.`));
    if (g.read < g.variants) {
      part.appendChild(el("p", { class: "explain" },
        `Analysed ${fmtCount(g.read)} of its ${fmtCount(g.variants)} variants (a sample).`));
    }
    const varying = el("p", { class: "varying" });
    if (g.varying.length === 0) {
      setText(varying, g.unchanged ? `No input dimension varies: ${g.unchanged.replace(/^no input dimension varies: /, "")}.`
        : "No dimension varies.");
    } else {
      varying.appendChild(textNode("Varying: "));
      g.varying.forEach((d, i) => {
        if (i) varying.appendChild(textNode("; "));
        const shown = d.values.join(", ") + (d.count > d.values.length ? ", …" : "");
        const item = el("span", { class: "dimension", title: `sizes: ${shown}` });
        item.appendChild(el("code", {}, d.label));
        item.appendChild(textNode(` ${d.min}..${d.max} (${fmtCount(d.count)} sizes)`));
        varying.appendChild(item);
      });
    }
    part.appendChild(varying);
    box.appendChild(part);
    const addTable = (cls, caption, headers, rows) => {
      part.appendChild(el("p", { class: "explain" }, caption));
      const table = el("table", { class: cls });
      part.appendChild(table);
      table.id = `${cls}-${part.dataset.module}-${box.children.length}-${part.children.length}`;
      renderTable(table.id, headers, rows);
    };
    const overheads = [["mean overhead"], ["largest overhead"]];
    const baked = g.baked_sizes;
    if (baked) {
      // entries at one input shape that differ only in sizes inside the graph (sliced by Python integers)
      part.appendChild(el("p", { class: "explain baked" },
        `Sizes baked into the graph: ${fmtCount(baked.entries)} entries at the same input shapes ${baked.params} ` +
        "differ only in these. Pass them as data (masks, index tensors), pad them, or run the section eagerly." +
        (g.bodies_stored > g.bodies_read
          ? ` (The latest ${fmtCount(g.bodies_read)} of ${fmtCount(g.bodies_stored)} entries compared.)` : "")));
      // a size whose every padding leaves the compiles as they are (the other sizes still differ): one line
      const changes = (s) => new Set((s.choices || []).map((c) => c.compiles)).size > 1;
      const still = baked.sizes.filter((s) => !changes(s));
      if (still.length) {
        const left = still[0].choices[0].compiles;
        part.appendChild(el("p", { class: "explain unchanged" },
          `${fmtCount(still.length)} size${still.length === 1 ? "" : "s"} padded alone change nothing ` +
          `(${fmtCount(left)} compilation${left === 1 ? "" : "s"} left: the other sizes still differ): ` +
          still.map((s) => s.label).join(", ") + "."));
      }
      addTable("baked-sizes", `Each size padded alone (overhead: extra ${baked.cost}).`,
        [["size", "text"], ["values", "text"], ["padding", "text"], ["compilations left"]].concat(overheads),
        baked.sizes.filter(changes).flatMap((s) => (s.choices || []).map((c) => [s.label,
          s.values.join(", ") + (s.count > s.values.length ? ", …" : ""),
          c.boundaries.length > 1 ? `${c.description} (${c.boundaries.join(", ")})` : c.description,
          fmtCount(c.compiles), fmtOverhead(c.mean_overhead), fmtOverhead(c.max_overhead)])));
      addTable("baked-frontier", "Best combinations of those sizes.",
        [["padding", "text"], ["compilations left"]].concat(overheads),
        (baked.frontier || []).map((c) => [c.description, fmtCount(c.compiles), fmtOverhead(c.mean_overhead),
          fmtOverhead(c.max_overhead)]));
    }
    if (g.varying.length === 0) continue; // nothing to pad
    const results = g.result_cost ? [[`mean, in ${g.result_cost}`]] : [];
    addTable("frontier", `Best combinations: fewest compilations for the padding (overhead: extra ${g.cost}).`,
      [["padding", "text"], ["compilations left"]].concat(overheads, results),
      (g.frontier || []).map((c) => [c.description, fmtCount(c.compiles), fmtOverhead(c.mean_overhead),
        fmtOverhead(c.max_overhead)].concat(g.result_cost ? [fmtOverhead(c.result_mean_overhead)] : [])));
    addTable("choices", "Each dimension padded alone (the others as they are).",
      [["dimension", "text"], ["padding", "text"], ["sizes left"], ["compilations left"]].concat(overheads),
      g.varying.flatMap((d) => (d.choices || []).map((c) => [d.label,
        c.boundaries.length > 1 ? `${c.description} (${c.boundaries.join(", ")})` : c.description,
        fmtCount(c.sizes), fmtCount(c.compiles), fmtOverhead(c.mean_overhead), fmtOverhead(c.max_overhead)])));
    addTable("schemes", "One rounding for every dimension at once.",
      [["padding", "text"], ["compilations left"]].concat(overheads),
      [["none (as now)", fmtCount(g.variants), "–", "–"]].concat(g.schemes.map((s) => [
        s.description, fmtCount(s.variants), fmtOverhead(s.mean_overhead), fmtOverhead(s.max_overhead)])));
  }
}

// The graph view (#/graphs/<namespace>[/<module>]): the namespaces to choose from are those of the graphs
// that cost most to compile (a limited token: its own namespaces), the first one unless the route names one.
async function graphChoices() {
  if (session.me && session.me.namespaces !== null) return session.me.namespaces;
  const body = await fetchData({ days: 1, top: 20, limit: 1 });
  return [...new Set(body.top_graphs.map((g) => g.namespace))];
}

async function loadGraphs(namespace, module) {
  const names = await graphChoices();
  const select = document.getElementById("buckets-namespace");
  const chosen = namespace || names[0] || null;
  clear(select);
  for (const name of chosen && !names.includes(chosen) ? [chosen, ...names] : names) {
    const option = el("option", { value: name }, name);
    if (name === chosen) option.selected = true;
    select.appendChild(option);
  }
  const one = document.getElementById("buckets-one");
  one.hidden = !module;
  if (module) {
    clear(one);
    one.appendChild(textNode(`The graph ${module} only. `));
    one.appendChild(el("a", { href: routeHash("graphs", chosen) }, `All graphs of ${chosen}`));
  }
  if (!chosen) {
    clear(document.getElementById("steps"));
    empty(document.getElementById("buckets"), "No parsed graphs yet.");
    return;
  }
  const params = { namespace: chosen, top: 5 };
  if (module) params.module = module; // one graph, as a run's detail links it
  renderBuckets(await fetchJson("/dashboard/graphs?" + new URLSearchParams(params).toString()));
}

// Namespaces come a page at a time (largest first): the first page, and more when asked for.
const nsPages = { shown: [], next: null, count: 0, firstPage: 0 };
const MAX_PAGE = 10000; // the most /dashboard/data gives in one page

async function fetchData(params) {
  const query = new URLSearchParams(params).toString();
  return fetchJson("/dashboard/data" + (query ? "?" + query : ""));
}

function renderNamespacePages() {
  renderNamespaces(nsPages.shown);
  const note = document.getElementById("ns-count");
  setText(note, nsPages.count > nsPages.shown.length
    ? `${fmtCount(nsPages.shown.length)} of ${fmtCount(nsPages.count)} namespaces shown.` : "");
  document.getElementById("ns-more").hidden = nsPages.next === null;
}

async function loadMoreNamespaces() {
  const error = document.getElementById("error");
  try {
    const body = await fetchData({ days: 1, top: 0, after: nsPages.next });
    nsPages.shown = nsPages.shown.concat(body.namespaces);
    nsPages.next = body.next_after;
    nsPages.count = body.namespace_count;
    renderNamespacePages();
  } catch (exc) {
    setText(error, `Could not load more namespaces: ${exc.message}`);
    error.hidden = false;
  }
}

// Runs (GET /dashboard/runs): compile seconds paid and saved per run, oldest left; a run opens its misses.

// The time axis's labels: hours:minutes, and the date under the first label and wherever it changes.
function timeTicks(dates) {
  let lastDay = null;
  return dates.map((d) => {
    const day = d.toLocaleDateString(undefined, { year: "numeric", month: "short", day: "numeric" });
    const time = d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", hour12: false });
    const shown = [time, day === lastDay ? null : day];
    lastDay = day;
    return shown;
  });
}

function renderRunsChart(runs) {
  const fig = document.getElementById("runs-chart");
  if (runs.length === 0) {
    empty(fig, "No run reported yet: jobs that warm from the cache report their runs.");
    return;
  }
  clear(fig);
  const ordered = runs.slice().reverse(); // oldest first, left to right
  const W = 900, H = 230, L = 56, R = 16, T = 12, B = 46;
  const plotW = W - L - R, plotH = H - T - B;
  // the axis in one unit (s, min or h) with four even steps: 0, 1, 2, 3, 4 min rather than 50 s, 1.7 min
  const top = Math.max(...ordered.map((r) => Math.max(r.compile_seconds, r.saved_seconds)));
  const [unit, unitName] = top >= 7200 ? [3600, "h"] : top >= 120 ? [60, "min"] : [1, "s"];
  const max = quarterMax(top / unit) * unit;
  const every = ordered.length <= 12 ? 1 : Math.ceil(ordered.length / 8);
  const labelled = ordered.filter((r, i) => i % every === 0);
  const ticks = timeTicks(labelled.map((r) => new Date(r.started_at)));
  const step = plotW / ordered.length;
  const barW = Math.min(40, Math.max(2, step * 0.35));
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": "Compile seconds paid and saved per run" });
  for (let i = 0; i <= 4; i++) {
    const y = T + plotH - (plotH * i) / 4;
    svg.appendChild(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: y, y2: y }));
    const value = (max * i) / 4 / unit;
    svg.appendChild(svgEl("text", { x: L - 6, y: y + 4, "text-anchor": "end" },
      `${Number.isInteger(value) ? value : value.toFixed(1)} ${unitName}`));
  }
  ordered.forEach((r, i) => {
    const x = L + i * step + step / 2 - barW;
    const title = `${r.run_id} (${r.namespace}, ${r.host}): paid ${fmtSeconds(r.compile_seconds)}, ` +
      `saved ${fmtSeconds(r.saved_seconds)}, hit rate ${fmtRate(r.hit_rate)}`;
    for (const [cls, value, dx] of [["bar-paid", r.compile_seconds, 0], ["bar-saved", r.saved_seconds, barW]]) {
      const h = Math.max(value > 0 ? 1 : 0, (plotH * value) / max);
      const bar = svgEl("rect", { class: `bar ${cls}`, x: x + dx, y: T + plotH - h, width: barW, height: h });
      bar.appendChild(svgEl("title", {}, title));
      svg.appendChild(bar);
    }
    if (i % every === 0) {
      const [time, day] = ticks[i / every];
      svg.appendChild(svgEl("text", { class: "tick tick-time", x: x + barW, y: H - B + 16, "text-anchor": "middle" }, time));
      if (day) {
        svg.appendChild(svgEl("text", { class: "tick tick-day", x: x + barW, y: H - B + 30, "text-anchor": "middle" },
          day));
      }
    }
  });
  fig.appendChild(svg);
  const legend = el("figcaption", { class: "legend" });
  legend.appendChild(el("span", { class: "paid" }, "compile time paid"));
  legend.appendChild(el("span", { class: "saved" }, "compile time saved by hits"));
  fig.appendChild(legend);
}

function renderRuns(runs) {
  renderRunsChart(runs);
  renderTable("runs-table",
    [["run", "text"], ["started", "text"], ["namespace", "text"], ["framework", "text"], ["host", "text"],
      ["hits"], ["misses"], ["hit rate"], ["compile paid"], ["saved"], ["state", "text"]],
    runs.map((r) => {
      const open = routeLink(routeHash("runs", r.run_id), r.run_id.slice(0, 12), { "data-run": r.run_id });
      return [open, fmtWhen(r.started_at), namespaceLink(r.namespace), r.framework, r.host,
        fmtCount(r.hits), fmtCount(r.misses), fmtRate(r.hit_rate), fmtSeconds(r.compile_seconds),
        fmtSeconds(r.saved_seconds), r.ended_at ? "ended" : "running"];
    }));
}

// A run's page: its compiles a page at a time (the server may end a page early: the next starts after the
// last listed), the count of each reason with what to do, and each compile with its why, shapes and flags
// as lines, linked to its graph's report where the module is known.
const RUN_PAGE = 100;
function runPageHash(runId, offset) { return routeHash("runs", runId) + (offset ? `?offset=${offset}` : ""); }

function runLines(m) {
  const lines = [];
  if (m.detail) lines.push(...String(m.detail).split("\n"));
  if (m.shapes) lines.push(...String(m.shapes).split("\n").map((l) => `shapes: ${l}`));
  if (m.source) lines.push(`compiled at ${m.source}`);
  for (const d of m.differing_components || []) {
    lines.push(`${d.component}: ${d.ours === null ? "unset" : d.ours} (theirs: ${d.theirs === null ? "unset" : d.theirs})`);
  }
  return lines;
}

function renderRunReasons(run) {
  const advice = run.advice || {};
  const rows = Object.entries(run.reasons || {}).sort((a, b) => b[1] - a[1]).map(([reason, count]) => [
    el("span", { class: `reason reason-${reason}`, "data-reason": reason }, reason), fmtCount(count),
    advice[reason] || "–"]);
  renderTable("run-reasons", [["reason", "text"], ["compiles"], ["what to do", "text"]], rows);
}

async function showRun(runId, offset) {
  const start = Math.max(0, offset || 0);
  const run = await fetchJson(`/dashboard/runs/${encodeURIComponent(runId)}?` +
    new URLSearchParams({ offset: start, limit: RUN_PAGE }).toString());
  setText(document.getElementById("run-detail-title"), `Run ${run.run_id}`);
  const counted = run.reasons_counted < run.misses_stored
    ? ` Reasons counted over the ${fmtCount(run.reasons_counted)} compiles listed so far.` : "";
  setText(document.getElementById("run-detail-summary"),
    `${run.framework} on ${run.host} in ${run.namespace}: ${fmtCount(run.hits)} loaded from the cache ` +
    `(${fmtSeconds(run.saved_seconds)} saved), ${fmtCount(run.misses_total)} compiles ` +
    `(${fmtSeconds(run.compile_seconds)} paid), ${fmtCount(run.misses_stored)} of them kept.${counted}`);
  renderRunReasons(run);
  const end = start + run.misses.length;
  setText(document.getElementById("run-page-note"), run.misses.length
    ? `Compiles ${fmtCount(start + 1)} to ${fmtCount(end)} of ${fmtCount(run.misses_stored)}. `
    : `No compiles listed from ${fmtCount(start + 1)}. `);
  const prev = document.getElementById("run-prev"), next = document.getElementById("run-next");
  prev.hidden = start === 0;
  prev.setAttribute("href", runPageHash(run.run_id, Math.max(0, start - RUN_PAGE)));
  next.hidden = end >= run.misses_stored || run.misses.length === 0;
  next.setAttribute("href", runPageHash(run.run_id, end));
  const moduleCell = (m) => {
    if (!m.module) return "–";
    // the graph's report (its variants, what varies and the fix), in the graph view
    return routeLink(routeHash("graphs", run.namespace, m.module), m.module,
      { "data-graph": m.module, title: "show this graph's report" });
  };
  renderTable("run-misses",
    [["key", "text"], ["module", "text"], ["reason", "text"], ["why", "text"], ["what to do", "text"], ["compile"]],
    run.misses.map((m) => [el("code", {}, m.key), moduleCell(m),
      el("span", { class: `reason reason-${m.reason}` }, m.reason), setLines(el("div", { class: "lines" }), runLines(m)),
      m.advice || "–", m.compile_seconds === null ? "–" : fmtSeconds(m.compile_seconds)]));
  document.getElementById("run-detail").hidden = false;
  document.body.dataset.runShown = run.run_id;
  document.body.dataset.runOffset = String(start);
}

async function loadRuns() {
  const body = await fetchJson("/dashboard/runs?limit=50");
  renderRuns(body.runs);
}

async function loadOverview() {
  // a refresh keeps as many namespaces listed as the person asked for
  const more = nsPages.shown.length > nsPages.firstPage;
  const body = await fetchData(more ? { limit: Math.min(nsPages.shown.length, MAX_PAGE) } : {});
  if (!more) nsPages.firstPage = body.namespaces.length;
  nsPages.shown = body.namespaces;
  nsPages.next = body.next_after;
  nsPages.count = body.namespace_count;
  renderTotals(body.totals, body.jobs);
  renderHits(body.daily);
  renderNamespacePages();
  renderGraphs(body.top_graphs);
}

// A token limited to namespace patterns: its overview is the list of its namespaces.
function renderMine() {
  const me = session.me;
  setText(document.getElementById("mine-explain"),
    `The token ${me.name} is limited to namespaces matching ${me.patterns.join(", ")}: it sees these ` +
    "namespaces, their graphs and their runs. The server-wide numbers need a token without that limit.");
  if (me.namespaces.length === 0) {
    empty(document.getElementById("mine-explain"),
      `No namespace matching ${me.patterns.join(", ")} holds entries yet.`);
  }
  renderTable("mine-table", [["namespace", "text"], ["graphs", "text"]],
    me.namespaces.map((n) => [namespaceLink(n), el("a", { href: routeHash("graphs", n) }, "shape variants")]));
}

// Hash routes: what the address names, and which sections show it.
function parseRoute(hash) {
  const legacy = /^#namespace=(.+)$/.exec(hash); // the old address of a namespace page
  if (legacy) return { view: "namespace", namespace: decodeURIComponent(legacy[1]) };
  const parts = hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "").map(decodeURIComponent);
  const [head, ...rest] = parts;
  if (!head) return { view: "overview" };
  if (head === "runs" && rest.length <= 1) {
    const [id, query] = (rest[0] || "").split("?");
    const offset = Number(new URLSearchParams(query || "").get("offset")) || 0;
    return { view: "runs", run: id || null, offset };
  }
  if (head === "graphs" && rest.length <= 2) return { view: "graphs", namespace: rest[0] || null, module: rest[1] || null };
  if (head === "namespaces" && rest.length === 1) return { view: "namespace", namespace: rest[0] };
  return { view: "unknown" };
}

function showView(view) {
  for (const section of document.querySelectorAll("main > section[data-view]")) {
    section.hidden = section.dataset.view !== view;
  }
  for (const link of document.querySelectorAll("nav a[data-nav]")) {
    if (link.dataset.nav === view || (view === "mine" && link.dataset.nav === "overview")) {
      link.setAttribute("aria-current", "page");
    } else link.removeAttribute("aria-current");
  }
}

let generation = 0; // a newer route's load wins over an older one still on its way
let shownRoute = null; // the route whose data the page shows now

async function refresh() {
  if (!session.me) return;
  const mine = ++generation;
  const route = parseRoute(window.location.hash);
  if (route.view === "namespace" && window.location.hash.startsWith("#namespace=")) {
    window.location.replace(routeHash("namespaces", route.namespace));
    return; // the hashchange loads it
  }
  const scoped = session.me.namespaces !== null;
  const view = route.view === "overview" && scoped ? "mine" : route.view;
  showView(view);
  document.getElementById("run-detail").hidden = !(view === "runs" && route.run);
  document.getElementById("run-back").hidden = !(view === "runs" && route.run);
  const error = document.getElementById("error");
  const what = { overview: "the numbers", mine: "your namespaces", runs: route.run ? "the run" : "the runs",
    graphs: `the graphs of ${route.namespace || "a namespace"}`, namespace: `the namespace ${route.namespace}` };
  try {
    if (view === "overview") await loadOverview();
    else if (view === "mine") renderMine();
    else if (view === "runs") {
      await loadRuns();
      if (route.run) await showRun(route.run, route.offset);
    } else if (view === "graphs") await loadGraphs(route.namespace, route.module);
    else if (view === "namespace") await showNamespace(route.namespace);
    else throw new Error(`the address ${window.location.hash} names no view: use the links above`);
    if (mine !== generation) return;
    shownRoute = window.location.hash || "#/";
    error.hidden = true;
    setText(document.getElementById("updated"), `Updated ${new Date().toLocaleTimeString()}; refreshes every 30 s.`);
    document.body.dataset.view = view;
    document.body.dataset.route = window.location.hash || "#/";
    document.body.dataset.loaded = "true";
  } catch (exc) {
    if (mine !== generation) return;
    if (exc instanceof AuthError) {
      showSignIn(`The token is no longer accepted: ${exc.message}`);
      return;
    }
    setText(error, `Could not load ${what[view] || "this view"}: ${exc.message}`);
    error.hidden = false;
    // another view's data must not stand under this address (a failed refresh keeps what it showed)
    if (shownRoute !== (window.location.hash || "#/")) showView(null);
    document.body.dataset.view = view;
    document.body.dataset.route = window.location.hash || "#/";
  }
}

// Signing in and out (auth on): the form checks the token with /dashboard/me before keeping it.
function showSignIn(problem, note) {
  sessionStorage.removeItem(TOKEN_KEY);
  session.token = null;
  session.me = null;
  shownRoute = null;
  generation++;
  showView(null);
  document.getElementById("error").hidden = true;
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-in").hidden = false;
  const message = document.getElementById("token-error");
  setText(message, problem || "");
  message.hidden = !problem;
  const noted = document.getElementById("token-note");
  setText(noted, note || "");
  noted.hidden = !note;
  setText(document.getElementById("updated"), "Sign in to see the numbers.");
  document.body.dataset.signedIn = "false";
  delete document.body.dataset.loaded;
  delete document.body.dataset.view;
  document.getElementById("token-input").focus();
}

function signedIn(me) {
  session.me = me;
  document.getElementById("sign-in").hidden = true;
  document.getElementById("nav").hidden = false;
  const limited = me.patterns ? `, namespaces ${me.patterns.join(", ")}` : "";
  setText(document.getElementById("who"), me.auth ? `Signed in as ${me.name} (${me.role}${limited})` : "");
  document.getElementById("sign-out").hidden = !me.auth;
  document.body.dataset.signedIn = "true";
  refresh();
}

async function start() {
  if (document.body.dataset.auth === "on" && !session.token) {
    showSignIn(null);
    return;
  }
  try {
    signedIn(await fetchJson("/dashboard/me"));
  } catch (exc) {
    if (exc instanceof AuthError) showSignIn(session.token ? `The token is no longer accepted: ${exc.message}` : null);
    else {
      const error = document.getElementById("error");
      setText(error, `Could not reach the server: ${exc.message}`);
      error.hidden = false;
    }
  }
}

async function submitToken(event) {
  event.preventDefault();
  const input = document.getElementById("token-input");
  const token = input.value.trim();
  if (!token) return;
  session.token = token;
  try {
    const me = await fetchJson("/dashboard/me");
    sessionStorage.setItem(TOKEN_KEY, token);
    input.value = "";
    signedIn(me);
  } catch (exc) {
    const why = exc instanceof AuthError ? exc.message : `the server could not check it (${exc.message})`;
    showSignIn(`That token was not accepted: ${why} Check that you pasted all of it.`);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("ns-more").addEventListener("click", loadMoreNamespaces);
  document.getElementById("buckets-namespace").addEventListener("change", (event) => {
    window.location.hash = routeHash("graphs", event.target.value);
  });
  document.getElementById("token-form").addEventListener("submit", submitToken);
  document.getElementById("sign-out").addEventListener("click", () =>
    showSignIn(null, "Signed out: the token is no longer kept in this tab."));
  window.addEventListener("hashchange", refresh);
  start();
  setInterval(refresh, REFRESH_MS);
});
