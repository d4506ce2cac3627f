// Package web tests syncd's operator page in a real browser: Debian's
// headless chromium, driven by chromedp, against a real redis-server,
// three `syncd run` daemons serving the page and the API on http.listen,
// and `syncd ui`.
//
// The tests check what a person sees: the counts agree with
// `syncd status --json`, a quarantined item shows its error text in item
// detail, a requeue typed and confirmed on the page takes effect, the
// counts follow the store without a reload (and stop while paused), the
// owners view lists the three daemons, and a Redis out of memory is said
// under the counts, as status says it. They save full-page
// screenshots to screenshots/ (the README shows them).
//
// Without chromium the tests skip, saying how to install it; with CI set
// a missing chromium fails them (.ci/run installs it).
package web
