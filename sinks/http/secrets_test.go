package http_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/sinks"
	httpsink "github.com/syncd/syncd/sinks/http"
)

// Every secret in these tests contains "s3cret", so that one search finds
// any that leaked.
const leak = "s3cret"

var secretHeaders = map[string]string{
	"Authorization": "Bearer bear-s3cret",
	"X-Api-Key":     "key-s3cret",
	"Cookie":        "session=cook-s3cret; theme=dark",
}

// logBuffer collects a sink's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newLoggedSink returns a sink that logs at debug level to the returned
// buffer as well as to the test log.
func newLoggedSink(t *testing.T, cfg httpsink.Config) (*httpsink.Sink, *logBuffer) {
	t.Helper()
	logs := new(logBuffer)
	w := zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))
	s, err := httpsink.New(cfg, zerolog.New(w).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

// TestSecretsNotShown: a 4xx whose body echoes the request's credentials
// and URL is stored and logged without them, and the URL in the logs has
// no userinfo and no query values.
func TestSecretsNotShown(t *testing.T) {
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		w.WriteHeader(nethttp.StatusUnauthorized)
		fmt.Fprintf(w, "denied: Authorization=%q X-Api-Key=%q Cookie=%q url=http://%s%s; your password=echoPw-s3cret",
			r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("Cookie"), r.Host, r.URL.RequestURI())
	})
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("user-s3cret", "pw-s3cret")
	u.Path = "/hook"
	u.RawQuery = "access_token=tok-s3cret&page=2"
	s, logs := newLoggedSink(t, httpsink.Config{URL: u.String(), Headers: secretHeaders})

	err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 1})
	var se *httpsink.StatusError
	if !errors.As(err, &se) || !sinks.IsPermanent(err) {
		t.Fatalf("Sync = %v, want a permanent StatusError", err)
	}
	t.Log(err)
	if strings.Contains(err.Error(), leak) || strings.Contains(se.Body, leak) {
		t.Errorf("the error shows a secret: %v", err)
	}
	if !strings.Contains(se.Body, `Authorization="xxxxx"`) || !strings.Contains(se.Body, "/hook?access_token=xxxxx&page=2") ||
		!strings.Contains(se.Body, "your password=xxxxx") {
		t.Errorf("Body = %q, want the echoed secrets redacted and the rest kept", se.Body)
	}
	out := logs.String()
	if strings.Contains(out, leak) {
		t.Errorf("the logs show a secret:\n%s", out)
	}
	if want := `"url":"` + srv.URL + `/hook?access_token=xxxxx&page=2"`; !strings.Contains(out, want) {
		t.Errorf("the logs lack %s:\n%s", want, out)
	}
}

// TestSecretsAsLogged: a quoted body loses what the logs hide of the
// configured URL (a secret query value, a webhook's token in its path),
// and keeps the values the logged URL shows (sort=, q=), which were
// [redacted] wherever they appeared.
func TestSecretsAsLogged(t *testing.T) {
	const token, sorted, query = "HookTok3n-s3cret-0123456789", "created_at", "hello-world"
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		w.WriteHeader(nethttp.StatusBadRequest)
		fmt.Fprintf(w, "no such hook %s (%s); rows sorted by %s, search %s", strings.TrimPrefix(r.URL.Path, "/hooks/"),
			r.URL.Query().Get("key"), r.URL.Query().Get("sort"), r.URL.Query().Get("q"))
	})
	s, logs := newLoggedSink(t, httpsink.Config{URL: srv.URL + "/hooks/" + token + "?key=key-s3cret&sort=" + sorted + "&q=" + query})
	err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 1})
	var se *httpsink.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Sync = %v, want a StatusError", err)
	}
	t.Log(err)
	if want := "no such hook [redacted] ([redacted]); rows sorted by created_at, search hello-world"; se.Body != want {
		t.Errorf("Body = %q, want %q", se.Body, want)
	}
	if want := `"url":"` + srv.URL + `/hooks/xxxxx?key=xxxxx&sort=created_at&q=hello-world"`; !strings.Contains(logs.String(), want) {
		t.Errorf("the logs lack %s:\n%s", want, logs)
	}
	if strings.Contains(err.Error(), leak) || strings.Contains(logs.String(), leak) {
		t.Errorf("a secret shows: %v\n%s", err, logs)
	}
}

// TestSecretOfWordsAfterName: a configured secret of several words that
// the body echoes after a secret's name reads as one [redacted]: Pairs
// hid its first word before the configured secrets were looked for
// ("token=xxxxx [redacted]", the rest caught as a piece of the secret).
func TestSecretOfWordsAfterName(t *testing.T) {
	const words = "hunter two words"
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		w.WriteHeader(nethttp.StatusUnauthorized)
		fmt.Fprintf(w, "bad token=%s for key %s", r.Header.Get("X-Api-Key"), r.Header.Get("X-Api-Key"))
	})
	s, logs := newLoggedSink(t, httpsink.Config{URL: srv.URL, Headers: map[string]string{"X-Api-Key": words}})
	err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 1})
	var se *httpsink.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Sync = %v, want a StatusError", err)
	}
	if want := "bad token=[redacted] for key [redacted]"; se.Body != want {
		t.Errorf("Body = %q, want %q", se.Body, want)
	}
	if strings.Contains(logs.String(), "two words") {
		t.Errorf("a piece of the secret shows:\n%s", logs)
	}
}

// TestTransportErrorHidesURL: net/http's *url.Error quotes the URL; the
// sink's error does not show its userinfo or query values.
func TestTransportErrorHidesURL(t *testing.T) {
	srv := httptest.NewServer(nethttp.NotFoundHandler())
	u, _ := url.Parse(srv.URL)
	srv.Close()
	u.User = url.UserPassword("user", "pw-s3cret")
	u.RawQuery = "access_token=tok-s3cret"
	s, logs := newLoggedSink(t, httpsink.Config{URL: u.String(), Headers: secretHeaders})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("Sync = %v, want a *url.Error", err)
	}
	t.Log(err)
	if strings.Contains(err.Error(), leak) || strings.Contains(ue.URL, leak) || strings.Contains(logs.String(), leak) {
		t.Errorf("a secret shows: %v\n%s", err, logs)
	}
	if !strings.Contains(err.Error(), "?access_token=xxxxx") {
		t.Errorf("Sync = %v, want the URL with its query masked", err)
	}
}

// TestSnippetCutInSecret: the body is cut for the error in the middle of
// an echoed secret; no piece of it shows.
func TestSnippetCutInSecret(t *testing.T) {
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		w.WriteHeader(nethttp.StatusForbidden)
		io.WriteString(w, strings.Repeat("a", 250)+r.Header.Get("X-Api-Key")+strings.Repeat("b", 100))
	})
	s, _ := newLoggedSink(t, httpsink.Config{URL: srv.URL, Headers: map[string]string{"X-Api-Key": "key-s3cret-0123456789"}})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	var se *httpsink.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Sync = %v, want a StatusError", err)
	}
	if strings.Contains(se.Body, "key-") || !strings.HasSuffix(se.Body, "[redacted]…") {
		t.Errorf("Body = %q, want it to end with the whole secret redacted", se.Body)
	}
}

// received records what a test server got.
type received struct {
	mu   sync.Mutex
	reqs []map[string]string
}

func (rc *received) record(r *nethttp.Request) {
	body, _ := io.ReadAll(r.Body)
	h := map[string]string{"Method": r.Method, "Body": string(body)}
	for _, k := range []string{"Authorization", "X-Api-Key", "Cookie", "Referer", "X-Syncd-Fence"} {
		if v := r.Header.Get(k); v != "" {
			h[k] = v
		}
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, h)
	rc.mu.Unlock()
}

func (rc *received) get() []map[string]string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.reqs
}

// TestRedirects: a 307 to another origin, or from https to http, is
// refused unless redirects is any, and then the configured headers stay
// behind; within the origin they go along.
func TestRedirects(t *testing.T) {
	const body = `{"id":"a","fence":3,"owner":"","attempt":0,"last_sync":null}`
	var atTarget, atTLS received
	target := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		atTarget.record(r)
	})
	redirect := func(w nethttp.ResponseWriter, r *nethttp.Request) bool {
		switch r.URL.Path {
		case "/to-other":
			nethttp.Redirect(w, r, target.URL+"/landed?sig=loc-s3cret", nethttp.StatusTemporaryRedirect)
		case "/to-self":
			nethttp.Redirect(w, r, "/landed", nethttp.StatusPermanentRedirect)
		default:
			return false
		}
		return true
	}
	plain := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		if !redirect(w, r) {
			atTarget.record(r)
		}
	})
	tlsSrv := httptest.NewTLSServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if !redirect(w, r) {
			atTLS.record(r)
		}
	}))
	t.Cleanup(tlsSrv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(tlsSrv.Certificate())

	withSecrets := map[string]string{"Method": "POST", "Body": body, "X-Syncd-Fence": "3",
		"Authorization": "Bearer bear-s3cret", "X-Api-Key": "key-s3cret", "Cookie": "session=cook-s3cret; theme=dark"}
	without := map[string]string{"Method": "POST", "Body": body, "X-Syncd-Fence": "3"}
	tests := []struct {
		name      string
		url       string
		redirects string
		refused   bool
		at        *received
		want      map[string]string
	}{
		{"other origin refused by default", plain.URL + "/to-other", "", true, &atTarget, nil},
		{"other origin refused by same-origin", plain.URL + "/to-other", httpsink.RedirectsSameOrigin, true, &atTarget, nil},
		{"https to http refused by default", tlsSrv.URL + "/to-other", "", true, &atTarget, nil},
		{"same origin refused by none", plain.URL + "/to-self", httpsink.RedirectsNone, true, &atTarget, nil},
		{"other origin with any, headers stay", plain.URL + "/to-other", httpsink.RedirectsAny, false, &atTarget, without},
		{"https to http with any, headers stay", tlsSrv.URL + "/to-other", httpsink.RedirectsAny, false, &atTarget, without},
		{"same origin https followed with headers", tlsSrv.URL + "/to-self", "", false, &atTLS, withSecrets},
		{"same origin http followed with headers", plain.URL + "/to-self", "", false, &atTarget, withSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.at.mu.Lock()
			tt.at.reqs = nil
			tt.at.mu.Unlock()
			s, logs := newLoggedSink(t, httpsink.Config{
				URL: tt.url, Headers: secretHeaders, Redirects: tt.redirects,
				TLS: &tls.Config{RootCAs: roots},
			})
			err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 3})
			if strings.Contains(fmt.Sprint(err), leak) || strings.Contains(logs.String(), leak) {
				t.Errorf("a secret shows: %v\n%s", err, logs)
			}
			if tt.refused {
				if !errors.Is(err, httpsink.ErrRedirect) || sinks.IsPermanent(err) {
					t.Fatalf("Sync = %v, want a retryable error wrapping ErrRedirect", err)
				}
				t.Log(err)
				if got := tt.at.get(); len(got) != 0 {
					t.Errorf("the redirect target got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.at.get(), []map[string]string{tt.want}); diff != "" {
				t.Errorf("requests at the redirect target (-got +want):\n%s", diff)
			}
		})
	}
}

// A URL's userinfo goes out as a Basic Authorization header that
// net/http makes: echoed back, its base64 form is redacted too.
func TestURLUserinfoBasicNotShown(t *testing.T) {
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		w.WriteHeader(nethttp.StatusInternalServerError)
		// Not in header form, which redact.Pairs hides by its name: the
		// sink's own redactor must know the base64 itself.
		fmt.Fprintf(w, "got (%s)", strings.TrimPrefix(r.Header.Get("Authorization"), "Basic "))
	})
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("user", "UrlPassSECRET")
	s, _ := newLoggedSink(t, httpsink.Config{URL: u.String()})
	err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 1})
	basic := base64.StdEncoding.EncodeToString([]byte("user:UrlPassSECRET"))
	if err == nil || strings.Contains(err.Error(), basic) || !strings.Contains(err.Error(), "got ([redacted])") {
		t.Errorf("Sync = %v; want the echoed Basic credentials redacted", err)
	}
}
