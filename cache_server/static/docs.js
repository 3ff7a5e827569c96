// The API page (/docs): reads this server's OpenAPI document (/openapi.json, with the token page.js keeps)
// and shows every route, grouped by tag: method, path, summary and description, parameters, request body
// and responses, their schemas opened on demand, with a filter box. Everything comes from this server (no
// CDN: the clusters it runs on have no internet), and all text reaches the page through page.js's doors
// (el, setText, textNode: printable), never as HTML.
"use strict";

const METHODS = ["get", "put", "post", "patch", "delete", "head", "options"];
const SCHEMAS = "#/components/schemas/";
const MAX_DEPTH = 12; // a schema nested deeper is named, not opened
const api = { components: {}, operations: [] }; // operations: [{ node, text }]

// Text that may hold ``code`` (the docstrings' markup) as a paragraph per blank-line-separated block.
function prose(text, cls) {
  const box = el("div", cls ? { class: cls } : {});
  for (const block of String(text).split(/\n\s*\n/)) {
    const para = el("p");
    String(block).replace(/\s*\n\s*/g, " ").trim().split(/``(.+?)``/).forEach((part, i) => {
      if (part) para.appendChild(i % 2 ? el("code", {}, part) : textNode(part));
    });
    if (para.firstChild) box.appendChild(para);
  }
  return box;
}

function refName(ref) { return ref.startsWith(SCHEMAS) ? ref.slice(SCHEMAS.length) : ref; }

// The schema a $ref names ({} where the document has none).
function resolved(schema) {
  if (schema && typeof schema.$ref === "string") return api.components[refName(schema.$ref)] || {};
  return schema || {};
}

function variants(schema) { return schema.anyOf || schema.oneOf || (schema.allOf && schema.allOf.length === 1 ? schema.allOf : null); }

// A short name of a schema's type: "RunOut", "string | null", "array of Entry", "map of string to integer".
function typeLabel(schema) {
  if (!schema || typeof schema !== "object") return "any";
  if (typeof schema.$ref === "string") return refName(schema.$ref);
  const choices = variants(schema);
  if (choices) return choices.map(typeLabel).join(" | ");
  if (schema.allOf) return "all of " + schema.allOf.map(typeLabel).join(", ");
  if (schema.type === "array") return "array of " + typeLabel(schema.items);
  if (schema.type === "object" && !schema.properties && typeof schema.additionalProperties === "object") {
    return "map of string to " + typeLabel(schema.additionalProperties);
  }
  const type = Array.isArray(schema.type) ? schema.type.join(" | ") : schema.type || (schema.properties ? "object" : "any");
  return schema.format ? `${type} (${schema.format})` : type;
}

// The bounds a schema sets, in words.
function constraints(schema) {
  const said = [];
  if (schema.enum) said.push("one of " + schema.enum.map((v) => JSON.stringify(v)).join(", "));
  if (schema.const !== undefined) said.push("always " + JSON.stringify(schema.const));
  if (schema.pattern) said.push("pattern " + schema.pattern);
  for (const [key, words] of [["minLength", "length ≥ %s"], ["maxLength", "length ≤ %s"],
    ["minimum", "≥ %s"], ["exclusiveMinimum", "> %s"], ["maximum", "≤ %s"], ["exclusiveMaximum", "< %s"],
    ["minItems", "items ≥ %s"], ["maxItems", "items ≤ %s"]]) {
    if (schema[key] !== undefined && schema[key] !== null) said.push(words.replace("%s", String(schema[key])));
  }
  if (schema.default !== undefined) said.push("default " + JSON.stringify(schema.default));
  return said;
}

// Whether a schema has fields of its own to open (an object, or an array or choice of objects).
function opens(schema, depth) {
  if (depth > MAX_DEPTH) return false;
  const target = resolved(schema);
  if (target.properties && Object.keys(target.properties).length) return true;
  if (target.type === "array") return opens(target.items, depth + 1);
  if (typeof target.additionalProperties === "object") return opens(target.additionalProperties, depth + 1);
  const choices = variants(target);
  return Boolean(choices && choices.some((c) => opens(c, depth + 1)));
}

// A <details> whose content is built the first time it is opened (a document names its schemas many times).
function lazyDetails(label, build, attrs) {
  const details = el("details", attrs || {});
  details.appendChild(el("summary", {}, label));
  details.addEventListener("toggle", () => {
    if (details.open && details.children.length === 1) details.appendChild(build());
  });
  return details;
}

// One schema's fields (or its type and bounds), the nested objects each in a <details> of its own.
function schemaTree(schema, depth) {
  const box = el("div", { class: "schema" });
  const target = resolved(schema);
  if (target.description && depth === 0) box.appendChild(prose(target.description, "explain"));
  const said = [typeLabel(schema), ...constraints(target)].join("; ");
  if (target.properties) {
    const required = new Set(target.required || []);
    const list = el("ul", { class: "fields" });
    for (const [name, field] of Object.entries(target.properties)) list.appendChild(fieldNode(name, field, required.has(name), depth));
    box.appendChild(list);
    if (target.additionalProperties === false) box.appendChild(el("p", { class: "note" }, "No other fields."));
  } else if (target.type === "array" && opens(target.items, depth + 1)) {
    box.appendChild(el("p", {}, said));
    box.appendChild(schemaTree(target.items, depth + 1));
  } else if (typeof target.additionalProperties === "object" && opens(target.additionalProperties, depth + 1)) {
    box.appendChild(el("p", {}, said));
    box.appendChild(schemaTree(target.additionalProperties, depth + 1));
  } else if (variants(target)) {
    box.appendChild(el("p", {}, said));
    for (const choice of variants(target)) if (opens(choice, depth + 1)) box.appendChild(schemaDetails(choice, depth + 1));
  } else {
    box.appendChild(el("p", {}, said));
  }
  return box;
}

function schemaDetails(schema, depth) {
  return lazyDetails(typeLabel(schema), () => schemaTree(schema, depth));
}

function fieldNode(name, field, required, depth) {
  const item = el("li");
  item.appendChild(el("code", { class: "field-name" }, name));
  item.appendChild(el("span", { class: "field-type" }, typeLabel(field)));
  if (required) item.appendChild(el("span", { class: "required" }, "required"));
  const target = resolved(field);
  const said = constraints(target);
  if (said.length) item.appendChild(el("span", { class: "note" }, said.join("; ")));
  const description = field.description || target.description;
  if (description) item.appendChild(prose(description, "field-description"));
  if (opens(field, depth + 1)) item.appendChild(schemaDetails(field, depth + 1));
  return item;
}

// Each media type of a body, with its schema to open.
function contentNode(content) {
  const box = el("div", { class: "content" });
  for (const [mediaType, media] of Object.entries(content || {})) {
    const line = el("div", { class: "media" });
    line.appendChild(el("code", {}, mediaType));
    if (media.schema) line.appendChild(lazyDetails(typeLabel(media.schema), () => schemaTree(media.schema, 0)));
    box.appendChild(line);
  }
  return box;
}

function table(cls, headers, rows) {
  const node = el("table", { class: cls });
  const head = el("tr");
  for (const h of headers) head.appendChild(el("th", { class: "text" }, h));
  node.appendChild(el("thead")).appendChild(head);
  const body = node.appendChild(el("tbody"));
  for (const row of rows) {
    const tr = body.appendChild(el("tr"));
    row.forEach((cell, i) => {
      const td = tr.appendChild(el(i === 0 ? "th" : "td", { class: "text" }));
      if (cell instanceof Node) td.appendChild(cell); else setText(td, cell);
    });
  }
  return node;
}

function parametersNode(parameters) {
  const rows = parameters.map((p) => {
    const schema = p.schema || {};
    const about = el("div");
    about.appendChild(el("span", { class: "field-type" }, typeLabel(schema)));
    const said = constraints(resolved(schema));
    if (said.length) about.appendChild(el("span", { class: "note" }, said.join("; ")));
    if (p.description || schema.description) about.appendChild(prose(p.description || schema.description));
    return [p.name, p.in, p.required ? "yes" : "no", about];
  });
  return table("op-parameters", ["Name", "In", "Required", "Type and meaning"], rows);
}

function responsesNode(responses) {
  const rows = Object.entries(responses).map(([status, answer]) => {
    const box = prose(answer.description || "");
    if (answer.content) box.appendChild(contentNode(answer.content));
    if (answer.headers) {
      const names = Object.keys(answer.headers).join(", ");
      box.appendChild(el("p", { class: "note" }, "Headers: " + names));
    }
    return [status, box];
  });
  return table("op-responses", ["Status", "Meaning and body"], rows);
}

function operationNode(method, path, op) {
  const name = `${method.toUpperCase()} ${path}`;
  const node = el("article", { class: "op", id: "op-" + (op.operationId || name), "data-operation": name });
  const head = node.appendChild(el("h3", { class: "op-head" }));
  head.appendChild(el("span", { class: `method method-${method}` }, method.toUpperCase()));
  head.appendChild(el("code", { class: "op-path" }, path));
  head.appendChild(el("span", { class: "op-summary" }, op.summary || ""));
  if (op.deprecated) head.appendChild(el("span", { class: "required" }, "deprecated"));
  if (op.description) node.appendChild(prose(op.description, "op-description"));
  if (op.parameters && op.parameters.length) {
    node.appendChild(el("h4", {}, "Parameters"));
    node.appendChild(parametersNode(op.parameters));
  }
  if (op.requestBody) {
    const body = node.appendChild(el("div", { class: "op-body" }));
    body.appendChild(el("h4", {}, op.requestBody.required ? "Request body (required)" : "Request body"));
    if (op.requestBody.description) body.appendChild(prose(op.requestBody.description));
    body.appendChild(contentNode(op.requestBody.content));
  }
  node.appendChild(el("h4", {}, "Responses"));
  node.appendChild(responsesNode(op.responses || {}));
  return node;
}

// The operations by tag: the document's tag order first, then the order tags are first used in.
function byTag(doc) {
  const groups = new Map((doc.tags || []).map((t) => [t.name, { about: t.description, ops: [] }]));
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const tag = (op.tags && op.tags[0]) || "other";
      if (!groups.has(tag)) groups.set(tag, { about: null, ops: [] });
      groups.get(tag).ops.push([method, path, op, tag]);
    }
  }
  return groups;
}

function render(doc) {
  api.components = (doc.components && doc.components.schemas) || {};
  api.operations = [];
  const info = doc.info || {};
  setText(document.getElementById("api-title"), `${info.title || "API"}: API`);
  if (info.description) setText(document.getElementById("api-description"), info.description);
  const root = document.getElementById("api");
  clear(root);
  for (const [tag, group] of byTag(doc)) {
    if (!group.ops.length) continue;
    const section = root.appendChild(el("section", { class: "tag", "data-tag": tag }));
    section.appendChild(el("h2", {}, tag));
    if (group.about) section.appendChild(prose(group.about, "explain"));
    for (const [method, path, op] of group.ops) {
      const node = section.appendChild(operationNode(method, path, op));
      const text = [method, path, op.summary, op.operationId, tag].join(" ").toLowerCase();
      api.operations.push({ node, text });
    }
  }
  setText(document.getElementById("updated"), `${api.operations.length} routes, version ${info.version || "?"}.`);
  document.getElementById("filter-bar").hidden = false;
  applyFilter();
  if (window.location.hash.length > 1) {
    const target = document.getElementById(decodeURIComponent(window.location.hash.slice(1)));
    if (target) target.scrollIntoView();
  }
  document.body.dataset.loaded = "true";
}

// Every word typed must appear in the route's method, path, summary, operation id or tag.
function applyFilter() {
  const words = document.getElementById("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  for (const { node, text } of api.operations) {
    node.hidden = !words.every((w) => text.includes(w));
    if (!node.hidden) shown++;
  }
  for (const section of document.querySelectorAll("#api section.tag")) {
    section.hidden = !section.querySelector("article.op:not([hidden])");
  }
  setText(document.getElementById("count"), `${shown} of ${api.operations.length} routes`);
}

function showSignIn(problem, note) {
  sessionStorage.removeItem(TOKEN_KEY);
  session.token = null;
  session.me = null;
  clear(document.getElementById("api"));
  document.getElementById("filter-bar").hidden = true;
  document.getElementById("nav").hidden = true;
  document.getElementById("error").hidden = true;
  document.getElementById("sign-in").hidden = false;
  for (const [id, text] of [["token-error", problem], ["token-note", note]]) {
    const node = document.getElementById(id);
    setText(node, text || "");
    node.hidden = !text;
  }
  setText(document.getElementById("updated"), "Sign in to see the API.");
  delete document.body.dataset.loaded;
  document.getElementById("token-input").focus();
}

// The document, and who the token is (auth on); a 401 brings the form back.
async function load() {
  const [doc, me] = await Promise.all([fetchJson("/openapi.json"), fetchJson("/dashboard/me")]);
  session.me = me;
  document.getElementById("sign-in").hidden = true;
  document.getElementById("nav").hidden = false;
  setText(document.getElementById("who"), me.auth ? `Signed in as ${me.name} (${me.role})` : "");
  document.getElementById("sign-out").hidden = !me.auth;
  render(doc);
}

function failed(exc, during) {
  if (exc instanceof AuthError) {
    showSignIn(during || (session.token ? `The token is no longer accepted: ${exc.message}` : null));
    return;
  }
  const error = document.getElementById("error");
  setText(error, `Could not read the API document: ${exc.message}`);
  error.hidden = false;
}

async function start() {
  if (document.body.dataset.auth === "on" && !session.token) {
    showSignIn(null);
    return;
  }
  try { await load(); } catch (exc) { failed(exc); }
}

async function submitToken(event) {
  event.preventDefault();
  const input = document.getElementById("token-input");
  const token = input.value.trim();
  if (!token) return;
  session.token = token;
  try {
    await load();
    sessionStorage.setItem(TOKEN_KEY, token);
    input.value = "";
  } catch (exc) {
    const why = exc instanceof AuthError ? exc.message : `the server could not check it (${exc.message})`;
    failed(exc instanceof AuthError ? exc : new AuthError(why),
      `That token was not accepted: ${why} Check that you pasted all of it.`);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token-form").addEventListener("submit", submitToken);
  document.getElementById("filter").addEventListener("input", applyFilter);
  document.getElementById("sign-out").addEventListener("click", () =>
    showSignIn(null, "Signed out: the token is no longer kept in this tab."));
  start();
});
