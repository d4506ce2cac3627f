package web

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromiumPath returns Debian's chromium, or skips t when it is missing,
// unless CI is set: there a missing browser fails the test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed and CI is set: the browser tests must run in CI (.ci/run installs it: apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed: `apt-get install -y chromium` (or `make deps`) to run the browser tests")
	return ""
}

// browser is one headless chromium tab. Its methods fail the test on
// error; each call is bounded by stepTimeout.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	dialogs []string // messages of the confirm() dialogs accepted so far
}

const stepTimeout = 20 * time.Second

// pageProbe runs in every document before the page's own script, as the
// DevTools protocol injects it (the page's CSP does not apply to it): it
// records uncaught errors and CSP violations for noErrors.
const pageProbe = `window.__errors = [];
window.addEventListener('error', (e) => window.__errors.push('error: ' + e.message));
window.addEventListener('unhandledrejection', (e) => window.__errors.push('rejection: ' + e.reason));
document.addEventListener('securitypolicyviolation', (e) => window.__errors.push('csp: ' + e.violatedDirective + ' ' + e.blockedURI));`

// newBrowser starts chromium, the binary at path, headless; it is
// stopped in t's cleanup.
func newBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	// The first Run starts the browser; it must not carry a timeout.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pageProbe}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// text is the text of the first element sel matches, "" if none.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, sel))
}

// count is the number of elements sel matches.
func (b *browser) count(sel string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
}

// waitJS waits up to within for a JavaScript condition to hold.
func (b *browser) waitJS(within time.Duration, what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for !eval[bool](b, "!!("+cond+")") {
		if time.Now().After(deadline) {
			b.t.Fatalf("page: no %s within %v (refresh status %q, message %q; screenshot %s)", what, within,
				b.text("#refresh-status"), b.text("#message"), b.failShot())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitText waits for sel's text to be want.
func (b *browser) waitText(within time.Duration, sel, want string) {
	b.t.Helper()
	b.waitJS(within, fmt.Sprintf("%s = %q (it is %q)", sel, want, b.text(sel)),
		fmt.Sprintf(`((document.querySelector(%q) || {}).textContent || '') === %q`, sel, want))
}

func (b *browser) open(url string) {
	b.t.Helper()
	b.do("open "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#main")))
}

// click clicks the element sel matches, as a person would (mouse events
// at its centre).
func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// typeInto empties the field sel matches and types text into it, key by
// key.
func (b *browser) typeInto(sel, text string) {
	b.t.Helper()
	eval[string](b, fmt.Sprintf(`document.querySelector(%q).value = ''`, sel))
	if text != "" {
		b.do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text, chromedp.NodeVisible))
	}
}

// shot saves a full-page PNG screenshot as name in the test's artifact
// directory (kept with go test -artifacts) and, with
// SYNCD_SCREENSHOTS=1 (make screenshots), as screenshots/name too: the
// pictures the README shows. A plain test run leaves the tree clean.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{b.t.ArtifactDir()}
	if os.Getenv("SYNCD_SCREENSHOTS") == "1" {
		dirs = append(dirs, "screenshots")
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
}

// failShot saves a screenshot of the page as it is into the test's
// artifact directory (kept with go test -artifacts) and returns its path.
func (b *browser) failShot() string {
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "none: " + err.Error()
	}
	p := filepath.Join(b.t.ArtifactDir(), "failed.png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		return "none: " + err.Error()
	}
	return p
}

// lastDialog is the message of the last confirm() accepted, waiting a
// little for the listener to see it.
func (b *browser) lastDialog(n int) string {
	b.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		got := len(b.dialogs)
		var last string
		if got > 0 {
			last = b.dialogs[got-1]
		}
		b.mu.Unlock()
		if got >= n {
			return last
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%d confirm dialogs, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noErrors fails the test on any uncaught script error or CSP
// violation the probe recorded in the current document.
func (b *browser) noErrors() {
	b.t.Helper()
	if errs := eval[[]string](b, `window.__errors || []`); len(errs) > 0 {
		b.t.Errorf("page errors: %q", errs)
	}
}

// phone emulates a 375 px wide phone in dark mode, or undoes it.
func (b *browser) phone(on bool) {
	b.t.Helper()
	scheme, w, h := "light", int64(1280), int64(900)
	opts := []chromedp.EmulateViewportOption{}
	if on {
		scheme, w, h = "dark", 375, 812
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulatePortrait)
	}
	b.do("emulate a phone", chromedp.EmulateViewport(w, h, opts...), chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	}))
}

// number reads a count as shown on the page ("1,000").
func number(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		t.Fatalf("count %q is not a number", s)
	}
	return n
}

// statusSummary is what `syncd status --json` says.
type statusSummary struct {
	Items       int `json:"items"`
	Due         int `json:"due"`
	InFlight    int `json:"in_flight"`
	BackingOff  int `json:"backing_off"`
	Quarantined int `json:"quarantined"`
}

func (f *fleet) status(t *testing.T) statusSummary {
	t.Helper()
	r := f.syncd(t, "status", "-c", f.cfgs[0], "--json", "--limit", "1")
	var st struct {
		Summary statusSummary `json:"summary"`
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil {
		t.Fatalf("syncd status --json: %s", r)
	}
	return st.Summary
}
