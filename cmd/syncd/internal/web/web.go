package web

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// APIBaseDefault is the API's path prefix the page reads by default.
const APIBaseDefault = "/api/v1"

// contentSecurityPolicy allows the page's own script, style sheet and
// icon, fetches to its own origin, and nothing else: no inline script or
// style, no plugins, no framing, no form posts, no <base>.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed assets templates
var files embed.FS

var page = template.Must(template.ParseFS(files, "templates/index.html"))

// Options configure Handler. The zero value is valid.
type Options struct {
	// APIBase is the path of the JSON API the page reads, on the page's
	// own origin. Default APIBaseDefault.
	APIBase string
	// Version is shown in the page's footer. Default empty: not shown.
	Version string
	// Title names the page (and the deployment). Default "syncd".
	Title string
}

// Handler returns the handler of the page at / and its assets under
// /assets/. Mount it at / of a mux that serves the API under /api/; it
// answers 404 to every other path and 405 to every method but GET and
// HEAD.
func Handler(opts Options) http.Handler {
	if opts.APIBase == "" {
		opts.APIBase = APIBaseDefault
	}
	opts.APIBase = strings.TrimRight(opts.APIBase, "/")
	if opts.Title == "" {
		opts.Title = "syncd"
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, opts); err != nil {
		// The template is embedded and its data are strings: this is a
		// bug in the package, caught by its tests.
		panic("web: render the page: " + err.Error())
	}
	html := buf.Bytes()
	assets, _ := fs.Sub(files, "assets")
	static := http.StripPrefix("/assets/", http.FileServerFS(assets))

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: the page takes GET", http.StatusMethodNotAllowed)
			return
		}
		switch p := r.URL.Path; {
		case p == "/":
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Cache-Control", "no-store")
			w.Write(html)
		case strings.HasPrefix(p, "/assets/") && path.Clean(p) == p:
			// no-cache: a new binary's assets are seen at once; the
			// file server answers If-Modified-Since with 304.
			h.Set("Cache-Control", "no-cache")
			static.ServeHTTP(w, r)
		default:
			http.Error(w, "not found: the page is at /", http.StatusNotFound)
		}
	})
}
