package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every answer, the page, an asset, a 404 and a 405, carries the
// security headers.
func TestSecurityHeaders(t *testing.T) {
	h := Handler(Options{})
	for _, c := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/assets/app.js"}, {"GET", "/nope"}, {"POST", "/"}, {"GET", "/assets/"},
	} {
		r := get(t, h, c.method, c.path)
		if got := r.Header.Get("Content-Security-Policy"); got != contentSecurityPolicy {
			t.Errorf("%s %s: CSP %q", c.method, c.path, got)
		}
		if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s: X-Content-Type-Options %q", c.method, c.path, got)
		}
	}
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'", "connect-src 'self'"} {
		if !strings.Contains(contentSecurityPolicy, want) {
			t.Errorf("CSP lacks %q", want)
		}
	}
	if strings.Contains(contentSecurityPolicy, "unsafe") {
		t.Errorf("CSP allows unsafe sources: %s", contentSecurityPolicy)
	}
}

func TestRoutes(t *testing.T) {
	h := Handler(Options{Version: "v1.2.3"})
	for _, c := range []struct {
		method, path string
		code         int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/assets/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/assets/app.css", 200, "text/css; charset=utf-8"},
		{"GET", "/assets/icon.svg", 200, "image/svg+xml"},
		{"GET", "/assets/", 404, ""},
		{"GET", "/assets/missing.js", 404, ""},
		{"GET", "/assets/../templates/index.html", 404, ""},
		{"GET", "/index.html", 404, ""},
		{"GET", "/api/v1/summary", 404, ""},
		{"POST", "/", 405, ""},
		{"DELETE", "/assets/app.js", 405, ""},
	} {
		r := get(t, h, c.method, c.path)
		if r.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, r.StatusCode, c.code)
		}
		if c.ctype != "" && r.Header.Get("Content-Type") != c.ctype {
			t.Errorf("%s %s: Content-Type %q, want %q", c.method, c.path, r.Header.Get("Content-Type"), c.ctype)
		}
	}
	if r := get(t, h, "POST", "/"); r.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("405 without Allow: %v", r.Header)
	}
}

// The page is rendered once with its options, escaped by html/template,
// has no inline script or style, and names only its own assets.
func TestPage(t *testing.T) {
	h := Handler(Options{Version: `v1<script>`, Title: `ops & "co"`, APIBase: "/x/api/"})
	page := body(t, get(t, h, "GET", "/"))
	for _, want := range []string{
		`data-api="/x/api"`, `syncd v1&lt;script&gt;`, `<title>ops &amp; &#34;co&#34;</title>`,
		`<script src="/assets/app.js" defer></script>`, `aria-live="polite"`, `id="count-quarantined"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if regexp.MustCompile(`<script[^>]*>[^<]`).MatchString(page) || strings.Contains(page, " style=") ||
		regexp.MustCompile(` on[a-z]+=`).MatchString(page) {
		t.Error("page has inline script, style or event handlers, which the CSP blocks")
	}
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"#]+)"`).FindAllStringSubmatch(page, -1) {
		if r := get(t, h, "GET", m[1]); r.StatusCode != 200 {
			t.Errorf("page refers to %s: %d", m[1], r.StatusCode)
		}
	}
	def := body(t, get(t, Handler(Options{}), "GET", "/"))
	if !strings.Contains(def, `data-api="/api/v1"`) || !strings.Contains(def, "<title>syncd</title>") {
		t.Error("defaults not applied")
	}
}

// The script calls only routes of the API contract, and sends the
// token only as a bearer credential with a JSON content type.
func TestScriptUsesTheContract(t *testing.T) {
	js, err := os.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(js)
	routes := map[string]bool{"/summary": true, "/items": true, "/items/": true, "/owners": true,
		"/items/requeue": true, "/items/release": true, "/items/sync": true}
	for _, m := range regexp.MustCompile(`'(/[a-z/]+)[?']`).FindAllStringSubmatch(src, -1) {
		if !routes[m[1]] && !strings.HasPrefix(m[1], "/items?") {
			t.Errorf("app.js calls %s, which the API contract does not have", m[1])
		}
	}
	for _, want := range []string{`'Content-Type'] = 'application/json'`, `'Bearer ' + token`, "sessionStorage", "window.confirm("} {
		if !strings.Contains(src, want) {
			t.Errorf("app.js lacks %q", want)
		}
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "eval(", "new Function", "localStorage", "http://", "https://"} {
		if strings.Contains(strings.ReplaceAll(src, "'http://www.w3.org/2000/svg'", ""), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}

// The page and the fake API of the contract served side by side, as
// syncd ui and syncd run mount them: the handler leaves /api/ to the
// API and serves everything else itself.
func TestBesideAPI(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/summary", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"items": 3, "writable": false, "history": []any{}})
	})
	mux.Handle("/", Handler(Options{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{"/api/v1/summary": `"items":3`, "/": `id="view-summary"`, "/assets/app.js": "use strict"} {
		r, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		if b := body(t, r); r.StatusCode != 200 || !strings.Contains(b, want) {
			t.Errorf("GET %s: %d %.80q", path, r.StatusCode, b)
		}
		r.Body.Close()
	}
}

// Any method and path: no panic, the security headers, and 200 only
// for the page and its assets.
func FuzzHandler(f *testing.F) {
	h := Handler(Options{})
	for _, s := range []string{"/", "/assets/app.js", "/assets/../web.go", "/assets//app.js", "/%2e%2e/", "/assets/%00"} {
		f.Add("GET", s)
	}
	f.Add("PUT", "/")
	f.Fuzz(func(t *testing.T, method, path string) {
		req, err := http.NewRequest(method, "http://h"+path, nil)
		if err != nil || req.URL.Path == "" {
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Security-Policy") != contentSecurityPolicy {
			t.Fatalf("%s %q: no CSP", method, path)
		}
		if rec.Code == 200 && req.URL.Path != "/" && !strings.HasPrefix(req.URL.Path, "/assets/") {
			t.Fatalf("%s %q: 200", method, path)
		}
	})
}
