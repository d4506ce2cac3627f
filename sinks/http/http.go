// Package http provides a sink that POSTs each item as JSON to a URL:
//
//	POST /hook HTTP/1.1
//	Content-Type: application/json
//	X-Syncd-Fence: 12
//
//	{"id":"a","fence":12,"owner":"host/41/run/w3","attempt":1,"last_sync":"2024-05-01T10:00:00.123Z"}
//
// last_sync is RFC 3339 with nanoseconds, in UTC, or null when the item
// never synced. The fence is also sent as the X-Syncd-Fence header so that
// a proxy or the target can check it without parsing the body; a target that
// enforces fencing (see package sinks) answers 409 Conflict to a stale one.
//
// The response status decides the outcome (see sinks.Classify):
//
//	2xx                          success
//	409 Conflict                 error wrapping sinks.ErrStaleFence: dropped
//	429, 502, 503, 504           sinks.RetryAfter: the target is unavailable,
//	                             for as long as its Retry-After says
//	408, other 5xx, 3xx          ordinary error: retried with backoff
//	other 4xx                    sinks.Permanent: quarantined (see
//	                             sinks.ClassPermanent for when)
//
// and without a response:
//
//	refused, reset, DNS failure, sinks.Unavailable: the target is
//	closed before the response,  unavailable
//	Config.Timeout passed before
//	the request was sent
//	Config.Timeout passed after  ordinary error: the target took the
//	the request was sent         request and did not answer in time,
//	                             which says no more than a 500 does
//	                             whether it or the item is at fault
//	the sync's context ended     ordinary error wrapping its cause: the
//	                             caller gave up, not the target
//	untrusted certificate, TLS   ordinary error: a configuration problem,
//	alert, any other error       which waiting on the target cannot fix
//
// A target failure is not counted against the item (see package sinks).
// A timeout once the request was sent is not one: a target slow for one
// big item alone must cost that item its retries, not hold the fleet's
// breaker open (an outside trial: one item answered after 10 s, past a 2 s
// timeout, opened the breaker 16 times in 102 s and was never counted).
// Timeouts of several distinct items still open the breaker, as any
// ordinary failures do (see package engine).
// Retry-After (RFC 9110 §10.2.3) may be delay-seconds or an HTTP-date; a
// date is measured from the response's Date, the target's own clock, when
// it has one. A date not in the future or a malformed value counts as no
// Retry-After, and a longer one as RetryAfterMax (1 hour).
//
// # Tracing
//
// When the sync's context carries a valid span (the engine's syncd.sync
// span, with engine.Config.TracerProvider set), the request carries its
// W3C Trace Context: a traceparent header, and tracestate when the span
// has one. The target's own spans then join the sync's trace. Without a
// span nothing is added. The sink uses a propagator of its own, not
// otel's global one.
//
// Errors carry the start of the response body. The sink does not use
// proxies: it reads no environment variables.
//
// # Redirects
//
// Only redirects that keep the method and body (307, 308) are followed;
// any other 3xx is reported as an error rather than silently turned into a
// GET. Config.Redirects says where to:
//
//	same-origin  the default: only to the origin of Config.URL (its
//	             scheme, host and port), so never to another host, and
//	             never from https to plain http
//	none         never
//	any          anywhere, also from https to http; Config.Headers
//	             (Authorization, Cookie, API keys) and the Referer are then
//	             sent only to Config.URL's origin, never to another
//
// A redirect refused by this rule is an ordinary, retryable error wrapping
// ErrRedirect.
//
// # Secrets
//
// The sink's errors are logged, and the engine stores them with the item,
// where `syncd status` shows them; a target's response may echo a header or
// the URL. So a URL in the sink's errors and logs has no userinfo, its
// query values read xxxxx but those of harmless names (page=, sort=,
// ...), and so does a webhook's token in its path; and any text the
// sink quotes in an error (the start of a response body, a transport
// error) has each configured header value, the credentials in it, and
// what the logs hide of the URL replaced with [redacted], and
// credentials named as such (password=, Authorization: ...) xxxxx.
// Values shorter than 4 bytes are left alone.
package http

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/propagation"

	"github.com/syncd/syncd/internal/redact"
	"github.com/syncd/syncd/sinks"
)

// Log field keys.
const (
	fieldComponent = "component"
	fieldURL       = "url"
	fieldID        = "id"
	fieldStatus    = "status"
	fieldTook      = "took"
)

// TimeoutDefault is the per-request timeout when Config.Timeout is zero.
const TimeoutDefault = 30 * time.Second

// DefaultTimeout is the old name of TimeoutDefault.
//
// Deprecated: use TimeoutDefault.
const DefaultTimeout = TimeoutDefault

const (
	// maxSnippet is how much of a response body an error quotes.
	maxSnippet = 256
	// maxDrain is how much of a response body is read to reuse the
	// connection; a longer body closes it instead.
	maxDrain = 64 << 10
	// maxRedirects bounds 307/308 chains.
	maxRedirects = 10
)

// traceContext writes the sync's span into the request as W3C Trace
// Context headers: a value of our own, not otel's global propagator, so
// that what a target receives does not depend on what else the program
// set up.
var traceContext propagation.TraceContext

// Config configures an HTTP sink.
type Config struct {
	// URL is the http or https URL to POST to. Required.
	URL string

	// Headers are extra request headers, such as Authorization. A "Host"
	// entry sets the request's Host. Content-Type, Content-Length and
	// X-Syncd-Fence are set by the sink and may not be given. Default none.
	Headers map[string]string

	// Timeout bounds each request, from dialling to reading the response
	// body. Default TimeoutDefault (30 s).
	Timeout time.Duration

	// Redirects says which 307 and 308 redirects the sink follows:
	// RedirectsSameOrigin, RedirectsNone or RedirectsAny (see the package
	// documentation). Default RedirectsDefault (same-origin).
	Redirects string

	// TLS configures https connections, for instance the roots to trust
	// (RootCAs). The sink uses a clone. Default nil: Go's defaults and the
	// system's roots.
	TLS *tls.Config
}

// Values of Config.Redirects.
const (
	RedirectsSameOrigin = "same-origin"
	RedirectsNone       = "none"
	RedirectsAny        = "any"

	// RedirectsDefault is Config.Redirects when it is empty.
	RedirectsDefault = RedirectsSameOrigin
)

// ErrRedirect is wrapped by the error of a sync whose target redirected it
// where Config.Redirects does not allow.
var ErrRedirect = errors.New("http: redirect refused")

// Validate reports every invalid field of c, each error naming its field,
// joined with errors.Join.
func (c Config) Validate() error {
	var errs []error
	if err := validateURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		if err := validateHeader(name, c.Headers[name]); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, sinks.ConfigErrorf("http", "timeout", "must not be negative, got %v", c.Timeout))
	}
	switch c.Redirects {
	case "", RedirectsSameOrigin, RedirectsNone, RedirectsAny:
	default:
		errs = append(errs, sinks.ConfigErrorf("http", "redirects", "must be %s, %s or %s, got %q",
			RedirectsSameOrigin, RedirectsNone, RedirectsAny, c.Redirects))
	}
	return errors.Join(errs...)
}

func validateURL(raw string) error {
	if raw == "" {
		return sinks.ConfigErrorf("http", "url", "must not be empty")
	}
	if strings.Contains(raw, "#") {
		// A request never carries its fragment, so a # in a URL meant
		// for one is a mistake: most often a password's, which makes
		// the rest of the password the fragment and a piece of it the
		// host (an outside trial: "user:p@ss#x@127.0.0.1/hook" was
		// shown with that host and sent to host "ss", through DNS). Told
		// before parsing, whose errors quote what came before the #
		// (invalid port ":Zq9Secr3t"), and without quoting the URL.
		return sinks.ConfigErrorf("http", "url", "has a # (a fragment, which requests never carry): write a # in the user's password or the path as %%23")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the whole URL, password and all, and a port
		// it refuses, which is a password's start when the password
		// holds a / or ? (user:pa?ss@h reads as host user, port pa).
		var ue *url.Error
		if errors.As(err, &ue) {
			inner := ue.Err
			if strings.Contains(inner.Error(), "invalid port") {
				inner = errors.New("invalid port after the host (a password that holds / or ? must write them %2F and %3F)")
			}
			err = &url.Error{Op: ue.Op, URL: redact.URL(raw, redact.Password), Err: inner}
		}
		return sinks.ConfigErrorf("http", "url", "%w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return sinks.ConfigErrorf("http", "url", "scheme must be http or https, got %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return sinks.ConfigErrorf("http", "url", "host must not be empty in %q", redact.URL(raw, redact.Password))
	}
	return nil
}

func validateHeader(name, value string) error {
	if !validHeaderName(name) {
		return headerError(name, "invalid header name %q", name)
	}
	switch http.CanonicalHeaderKey(name) {
	case "Content-Type", "Content-Length", "X-Syncd-Fence":
		return headerError(name, "%s is set by the sink", http.CanonicalHeaderKey(name))
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return headerError(name, "value of %s contains a line break or NUL", name)
	}
	return nil
}

// headerError is an error about the header called name.
func headerError(name, format string, args ...any) error {
	e := sinks.ConfigErrorf("http", "headers", format, args...)
	e.Entry = name
	return e
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
	if c.Redirects == "" {
		c.Redirects = RedirectsDefault
	}
	return c
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// StatusError reports a response whose status is not 2xx. Sync wraps it,
// and for some statuses also sinks.ErrStaleFence or sinks.Permanent; use
// errors.As to get it.
type StatusError struct {
	StatusCode int    // 503
	Status     string // "503 Service Unavailable"
	Body       string // the start of the response body, trimmed
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return "status " + e.Status
	}
	return fmt.Sprintf("status %s: body %q", e.Status, e.Body)
}

// Sink is a sink that POSTs items to a URL. It is safe for concurrent use.
type Sink struct {
	url       string
	origin    *url.URL // of url: where Headers may go
	header    http.Header
	custom    []string // canonical names of Config.Headers, but Host
	host      string
	timeout   time.Duration
	redirects string
	red       *redactor
	transport *http.Transport
	client    *http.Client
	logger    zerolog.Logger
}

var _ sinks.Sink = (*Sink)(nil)

// New returns an HTTP sink with its own connection pool, which logs to a
// sub-logger of logger with the field component=sink.http.
func New(cfg Config, logger zerolog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	origin, _ := url.Parse(cfg.URL) // Validate parsed it
	s := &Sink{
		url:       cfg.URL,
		origin:    origin,
		header:    make(http.Header),
		timeout:   cfg.Timeout,
		redirects: cfg.Redirects,
		red:       newRedactor(cfg.URL, cfg.Headers),
		logger:    logger.With().Str(fieldComponent, "sink.http").Str(fieldURL, redact.URL(cfg.URL, redact.Display)).Logger(),
	}
	s.header.Set("User-Agent", "syncd")
	for name, value := range cfg.Headers {
		if http.CanonicalHeaderKey(name) == "Host" {
			s.host = value
			continue
		}
		s.header.Set(name, value)
		s.custom = append(s.custom, http.CanonicalHeaderKey(name))
	}
	s.header.Set("Content-Type", "application/json")

	// A transport of our own, so that Close can release its connections
	// without touching other users of http.DefaultTransport.
	s.transport = http.DefaultTransport.(*http.Transport).Clone()
	s.transport.Proxy = nil
	if cfg.TLS != nil {
		s.transport.TLSClientConfig = cfg.TLS.Clone()
	}
	s.client = &http.Client{Transport: s.transport, CheckRedirect: s.checkRedirect}
	return s, nil
}

// checkRedirect applies the redirect rules of the package documentation.
// It is called with the next request, whose headers net/http copied from
// the first one.
func (s *Sink) checkRedirect(req *http.Request, via []*http.Request) error {
	switch req.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		// The default policy turns a POST into a GET on 301, 302 and
		// 303, and a target that answers that GET with 200 would look
		// like a successful sync that never happened.
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	same := sameOrigin(req.URL, s.origin)
	switch {
	case s.redirects == RedirectsNone:
		return fmt.Errorf("%w: redirects: %s", ErrRedirect, RedirectsNone)
	case !same && s.redirects != RedirectsAny:
		return fmt.Errorf("%w: to another origin (redirects: %s)", ErrRedirect, s.redirects)
	}
	// net/http sets the Referer to the previous URL, query and all; no
	// target needs it.
	req.Header.Del("Referer")
	if !same {
		// net/http drops Authorization and Cookie only for another
		// domain, not from https to http on the same host, and keeps
		// every other header.
		for _, name := range s.custom {
			req.Header.Del(name)
		}
	}
	return nil
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) &&
		strings.EqualFold(a.Hostname(), b.Hostname()) &&
		port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

type payload struct {
	ID       string     `json:"id"`
	Fence    uint64     `json:"fence"`
	Owner    string     `json:"owner"`
	Attempt  int        `json:"attempt"`
	LastSync *time.Time `json:"last_sync"`
}

// Sync POSTs item and maps the response status as the package
// documentation describes. When ctx is done first, the error wraps
// context.Cause(ctx).
func (s *Sink) Sync(ctx context.Context, item sinks.Item) error {
	p := payload{ID: item.ID, Fence: item.Fence, Owner: item.Owner, Attempt: item.Attempt}
	if !item.LastSync.IsZero() {
		t := item.LastSync.UTC()
		p.LastSync = &t
	}
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("http: item %q: encode: %w", item.ID, err)
	}

	reqCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("http: item %q: %w", item.ID, err)
	}
	req.Header = s.header.Clone()
	req.Header.Set("X-Syncd-Fence", strconv.FormatUint(item.Fence, 10))
	traceContext.Inject(ctx, propagation.HeaderCarrier(req.Header)) // nothing without a valid span
	if s.host != "" {
		req.Host = s.host
	}

	// Whether the request was written tells a target that could not be
	// reached in time from one that took the request and did not answer
	// (each redirect's request starts over: GetConn).
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn:      func(string) { sent.Store(false) },
		WroteRequest: func(w httptrace.WroteRequestInfo) { sent.Store(w.Err == nil) },
	}))
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return s.requestError(ctx, reqCtx, item.ID, sent.Load(), err)
	}
	snippet := s.snippet(resp.Body)
	resp.Body.Close()
	s.logger.Debug().Str(fieldID, item.ID).Int(fieldStatus, resp.StatusCode).
		Dur(fieldTook, time.Since(start)).Msg("posted")

	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		return nil
	}
	serr := &StatusError{StatusCode: code, Status: resp.Status, Body: snippet}
	switch {
	case code == http.StatusConflict:
		return fmt.Errorf("http: item %q: %w: %w", item.ID, serr, sinks.ErrStaleFence)
	case code == http.StatusTooManyRequests, code == http.StatusBadGateway,
		code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		// The target, or the proxy in front of it, is down or overloaded.
		return fmt.Errorf("http: item %q: %w", item.ID, sinks.RetryAfter(serr, retryAfter(resp.Header, time.Now())))
	case code == http.StatusRequestTimeout:
		// The target gave up waiting for this request: nothing says it
		// is down.
		return fmt.Errorf("http: item %q: %w", item.ID, serr)
	case code >= 400 && code <= 499:
		return fmt.Errorf("http: item %q: %w", item.ID, sinks.Permanent(serr))
	}
	return fmt.Errorf("http: item %q: %w", item.ID, serr)
}

// requestError returns the error of a request that got no response, err,
// classified as the package documentation says; sent: the request was
// written to the target.
func (s *Sink) requestError(ctx, reqCtx context.Context, id string, sent bool, err error) error {
	err = s.red.cleanError(err)
	switch {
	case ctx.Err() != nil:
		// The caller gave up (the lease was lost, syncd is stopping),
		// not the target. Recent net/http already wraps the cause; do
		// not say it twice.
		if cause := context.Cause(ctx); !errors.Is(err, cause) {
			return fmt.Errorf("http: item %q: %w: %w", id, cause, err)
		}
		return fmt.Errorf("http: item %q: %w", id, err)
	case reqCtx.Err() != nil && sent:
		return fmt.Errorf("http: item %q: no response: timeout after %v: %w", id, s.timeout, err)
	case reqCtx.Err() != nil:
		return fmt.Errorf("http: item %q: %w", id, sinks.Unavailable(fmt.Errorf("timeout after %v: %w", s.timeout, err)))
	case unreachable(err):
		return fmt.Errorf("http: item %q: %w", id, sinks.Unavailable(err))
	}
	return fmt.Errorf("http: item %q: %w", id, err)
}

// unreachable reports whether err, of a request that got no response, says
// that the target could not be reached or broke off: a connection refused
// or reset, a DNS lookup that failed, a connection closed before the
// response, a transport timeout (the TLS handshake's, say).
//
// A certificate the sink does not trust, a TLS alert from the target or
// a plain-HTTP answer to TLS say instead that the two ends disagree: a
// configuration problem that no waiting fixes and that needs an operator.
// As an ordinary error it is counted against the items, which end in
// quarantine where `syncd status` shows why, rather than holding the
// breaker open as if the target were down.
func unreachable(err error) bool {
	var (
		cert *tls.CertificateVerificationError
		hdr  tls.RecordHeaderError
		op   *net.OpError
		ne   net.Error
	)
	switch {
	case errors.As(err, &cert), errors.As(err, &hdr):
		return false
	case errors.As(err, &op):
		// crypto/tls reports the target's alert as an OpError.
		return op.Op != "remote error"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &ne):
		return ne.Timeout()
	}
	return false
}

// snippet returns the start of body, trimmed, valid UTF-8 and cleaned of
// secrets, and drains a bounded rest of it so the connection can be
// reused.
func (s *Sink) snippet(body io.Reader) string {
	// Read enough to see whole any secret that starts in the snippet.
	buf := make([]byte, maxSnippet+s.red.Longest()+1)
	n, _ := io.ReadFull(body, buf)
	io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	end := s.red.Extend(buf[:n], min(n, maxSnippet))
	cut := n > end
	b := buf[:end]
	if cut {
		// Do not split the last rune.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	// Credentials named as such (password=, Cookie:, Authorization:)
	// too, not only the configured ones: a target may echo a secret of
	// its own (an outside trial saw a 404 quote a password and a cookie).
	text := strings.TrimSpace(s.red.CleanPairs(strings.ToValidUTF8(string(b), "\uFFFD")))
	if cut {
		text += "…"
	}
	return text
}

// Close closes the sink's idle connections.
func (s *Sink) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}
