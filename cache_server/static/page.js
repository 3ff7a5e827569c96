// What the server's pages share (the dashboard at /, the API page at /docs): the token and the requests
// that send it, and the one way text reaches the page (printable, behind the doors below; never innerHTML).
// With auth on, the token is asked for in a form, kept in this tab's sessionStorage (one key for both
// pages) and sent as "Authorization: Bearer" by every fetch: it never travels in a URL.
"use strict";

const TOKEN_KEY = "xla-cache-token";
// me: who the token is (the dashboard's /dashboard/me), once known
const session = { token: sessionStorage.getItem(TOKEN_KEY), me: null };

// A 401: the token is missing, wrong or revoked (the form is shown again).
class AuthError extends Error {}

async function fetchJson(path) {
  const headers = session.token ? { Authorization: `Bearer ${session.token}` } : {};
  const response = await fetch(path, { headers, credentials: "omit", cache: "no-store" });
  let body = {};
  try { body = await response.json(); } catch (exc) { body = {}; }
  if (response.status === 401) throw new AuthError(body.detail || "The token was not accepted.");
  if (!response.ok) throw new Error(body.detail || `HTTP ${response.status}`);
  return body;
}

// The one door for text onto the page: everything a page shows (a cell, a label, a sentence, a tooltip)
// goes through printable, by el (svgEl in dashboard.js), setText, textNode or setLines; nothing is ever
// parsed as HTML (no innerHTML), so markup in a name is shown as the characters it is. Control, format and
// separator characters (Unicode Cc, Cf, Zl, Zp: bidi overrides, zero-width ones, U+2028) are shown as
// \u202e, whatever the server stored, as cache_protocol/text.py's shown does for the CLI: they can reorder
// or hide what an operator reads. tests/test_quality.py checks that no text reaches a page another way.
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;
function printable(text) {
  return String(text).replace(UNPRINTABLE, (c) => "\\u" + c.codePointAt(0).toString(16).padStart(4, "0"));
}

function setText(node, text) {
  node.textContent = printable(text);
  return node;
}

function textNode(text) { return document.createTextNode(printable(text)); }

// Lines a page itself puts one under another (in a white-space: pre element): each escaped, the line
// breaks between them kept.
function setLines(node, lines) {
  node.textContent = lines.map(printable).join("\n");
  return node;
}

// The attributes a reader sees (a tooltip, what a screen reader says) are text too; the others (href,
// value, data-*) keep the name as it is, for the routes and the tests.
const SHOWN_ATTRIBUTES = new Set(["title", "aria-label", "alt", "placeholder"]);
function setAttributes(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    node.setAttribute(k, SHOWN_ATTRIBUTES.has(k) ? printable(v) : String(v));
  }
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  setAttributes(node, attrs);
  if (text !== undefined) setText(node, text);
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
