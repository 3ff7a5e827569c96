// The namespace page (#/namespaces/<name>): the namespace's fingerprint, its most useful entries, and the
// populated namespaces nearest to it with what differs. Uses the helpers of dashboard.js (loaded first),
// whose router (refresh) calls showNamespace.
"use strict";

function namespaceLink(name) {
  return routeLink(routeHash("namespaces", name), name, { "data-namespace": name });
}

// A fingerprint's value as the lines of its cell.
function shownLines(value) {
  if (value === null || value === undefined) return ["unset"];
  if (typeof value === "object") {
    const names = Object.keys(value);
    if (names.length === 0) return ["none"];
    // a flag map: one flag per line, as on a command line
    if (names.every((n) => n.startsWith("--"))) {
      return names.map((n) => (value[n] === null ? n : `${n}=${value[n]}`));
    }
    return [JSON.stringify(value)];
  }
  return [String(value)];
}

function renderNamespacePage(body) {
  const ns = body.namespace;
  setText(document.getElementById("nsp-title"), ns.namespace);
  setText(document.getElementById("nsp-summary"),
    `${ns.fingerprint.framework || "unknown framework"}: ${fmtCount(ns.entries)} entries, ${fmtBytes(ns.bytes)}, ` +
    `${fmtCount(ns.hits)} hits, last used ${fmtWhen(ns.last_used_at)}.`);
  const fields = Object.keys(ns.fingerprint).sort();
  renderTable("nsp-fingerprint", [["field", "text"], ["value", "text"]],
    fields.map((f) => [el("code", {}, f), setLines(el("code"), shownLines(ns.fingerprint[f]))]));
  if (fields.length === 0) empty(document.getElementById("nsp-fingerprint-note"),
    "No fingerprint: the namespace was created by an upload, not registered by a warm.");
  else clear(document.getElementById("nsp-fingerprint-note"));

  renderTable("nsp-entries", [["key", "text"], ["bytes"], ["stored", "text"]],
    body.entries.map((e) => [el("code", {}, e.key), fmtBytes(e.size), fmtWhen(e.created_at)]));

  const nearest = body.nearest.nearest;
  const note = document.getElementById("nsp-nearest-note");
  if (nearest.length === 0) empty(note, "No other populated namespace of this framework.");
  else clear(note);
  renderTable("nsp-nearest",
    [["namespace", "text"], ["entries"], ["last used", "text"], ["fields differing"], ["differences", "text"]],
    nearest.map((n) => {
      const list = el("ul", { class: "diffs" });
      for (const d of n.differences) {
        const item = el("li");
        item.appendChild(el("span", { class: "field" }, d.field + ": "));
        item.appendChild(el("code", {}, d.text));
        list.appendChild(item);
      }
      if (n.differences.length === 0) list.appendChild(el("li", {}, "same fingerprint"));
      return [namespaceLink(n.namespace), fmtCount(n.entries), fmtWhen(n.last_used_at),
        fmtCount(n.differing_fields), list];
    }));
}

async function showNamespace(name) {
  const body = await fetchJson("/dashboard/namespaces/" + encodeURIComponent(name));
  renderNamespacePage(body);
  document.getElementById("nsp-graphs").setAttribute("href", routeHash("graphs", name));
  document.body.dataset.namespaceLoaded = name;
}
