// What the server's pages share (the dashboard at /, the API page at /docs): the token and the requests
// that send it, and the one way server text reaches the page (el: textContent, never innerHTML).
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

// Control, format and separator characters (Unicode Cc, Cf, Zl, Zp: bidi overrides, zero-width ones) in
// text a client sent are shown as \u202e, whatever the server stored (cache_protocol/text.py does the same
// for the CLI): they can reorder or hide what an operator reads.
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;
function printable(text) {
  return String(text).replace(UNPRINTABLE, (c) => "\\u" + c.codePointAt(0).toString(16).padStart(4, "0"));
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = printable(text);
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
