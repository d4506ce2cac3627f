// Package web serves syncd's operator page: one HTML page at / and its
// script, style sheet and icon under /assets/, all embedded in the binary.
//
// The page holds no data of its own. Its script (assets/app.js, plain
// JavaScript, no build step) reads the JSON API under /api/v1 of the same
// origin every 2 seconds and draws the summary, its charts (inline SVG),
// the items table, item detail, owners and the quarantined items. Writes
// (requeue, force release, sync now) are POSTs with Content-Type
// application/json and the bearer token the operator types into the page;
// the token is kept in the tab's sessionStorage, never in the HTML.
//
// Every answer carries a Content-Security-Policy that allows scripts and
// styles from the page's own origin only (no inline script), fetches to
// the same origin only, and no framing; the API itself checks the token,
// the content type and the Origin of a POST.
//
//	GET /                 the page (html/template)
//	GET /assets/<name>    app.js, app.css, icon.svg
//	anything else         404
package web
