package http_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/sinks"
	httpsink "github.com/syncd/syncd/sinks/http"
)

// TestClassify: the class of each kind of failure, and how long the target
// asked to be left alone, from real responses.
func TestClassify(t *testing.T) {
	dateIn := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(nethttp.TimeFormat) }
	tests := []struct {
		name     string
		code     int
		header   map[string]string // "Date": "" drops the server's Date
		class    sinks.Class
		min, max time.Duration // of the Retry-After
		text     string        // the start of the error
	}{
		{"503/seconds", 503, map[string]string{"Retry-After": "10"}, sinks.ClassTarget, 10 * time.Second, 10 * time.Second,
			`http: item "a": target unavailable (retry after 10s): status 503 Service Unavailable: body "busy"`},
		// HTTP-dates have whole seconds: 20 s ahead may read 19 s.
		{"429/date", 429, map[string]string{"Retry-After": dateIn(20 * time.Second)}, sinks.ClassTarget, 18 * time.Second, 21 * time.Second,
			`http: item "a": target unavailable (retry after `},
		{"429/date-no-Date", 429, map[string]string{"Retry-After": dateIn(20 * time.Second), "Date": ""}, sinks.ClassTarget, 18 * time.Second, 21 * time.Second,
			`http: item "a": target unavailable (retry after `},
		{"503/past", 503, map[string]string{"Retry-After": dateIn(-time.Minute)}, sinks.ClassTarget, 0, 0,
			`http: item "a": target unavailable: status 503 Service Unavailable: body "busy"`},
		{"503/capped", 503, map[string]string{"Retry-After": "86400"}, sinks.ClassTarget, httpsink.RetryAfterMax, httpsink.RetryAfterMax,
			`http: item "a": target unavailable (retry after 1h0m0s): status 503`},
		{"503/malformed", 503, map[string]string{"Retry-After": "soon"}, sinks.ClassTarget, 0, 0,
			`http: item "a": target unavailable: status 503`},
		{"502", 502, nil, sinks.ClassTarget, 0, 0, `http: item "a": target unavailable: status 502 Bad Gateway: body "busy"`},
		{"504", 504, nil, sinks.ClassTarget, 0, 0, `http: item "a": target unavailable: status 504 Gateway Timeout`},
		{"500", 500, map[string]string{"Retry-After": "10"}, sinks.ClassItem, 0, 0, `http: item "a": status 500 Internal Server Error: body "busy"`},
		{"408", 408, nil, sinks.ClassItem, 0, 0, `http: item "a": status 408 Request Timeout`},
		{"400", 400, nil, sinks.ClassPermanent, 0, 0, `http: item "a": permanent: status 400 Bad Request`},
		{"409", 409, nil, sinks.ClassStale, 0, 0, `http: item "a": status 409 Conflict: body "busy": sinks: stale fence`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
				for k, v := range tt.header {
					if v == "" {
						w.Header()[k] = nil
						continue
					}
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.code)
				w.Write([]byte("busy"))
			})
			s := newSink(t, httpsink.Config{URL: srv.URL})
			err := s.Sync(t.Context(), sinks.Item{ID: "a"})
			t.Log(err)
			class, after := sinks.Classify(err)
			if class != tt.class || after < tt.min || after > tt.max {
				t.Errorf("Classify(%v) = %v, %v, want %v, %v to %v", err, class, after, tt.class, tt.min, tt.max)
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.text) {
				t.Errorf("Sync = %v, want it to start with %q", err, tt.text)
			}
			var se *httpsink.StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.code {
				t.Errorf("Sync = %v, want a StatusError with code %d", err, tt.code)
			}
		})
	}
}

// TestClassifyRefused: a port nobody listens on is the target unavailable.
func TestClassifyRefused(t *testing.T) {
	srv := httptest.NewServer(nethttp.NotFoundHandler())
	url := srv.URL
	srv.Close()
	s := newSink(t, httpsink.Config{URL: url})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if class, after := sinks.Classify(err); class != sinks.ClassTarget || after != 0 {
		t.Errorf("Classify(%v) = %v, %v, want target, 0", err, class, after)
	}
	if err == nil || !strings.HasPrefix(err.Error(), `http: item "a": target unavailable: Post "`) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Sync = %v, want the refused connection", err)
	}
}

// TestClassifyTimeout: a target that took the request and did not answer
// within the sink's timeout failed this item, as a 500 would: an
// ordinary error, so that a target slow for one item alone costs that
// item its retries and does not open the fleet's breaker (it did, as a
// target failure, in an outside trial: 16 times in 102 s).
func TestClassifyTimeout(t *testing.T) {
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, hang func()) {
		hang()
	})
	s := newSink(t, httpsink.Config{URL: srv.URL, Timeout: 50 * time.Millisecond})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if class, _ := sinks.Classify(err); class != sinks.ClassItem || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Classify(%v) = %v, want a timeout of class item", err, class)
	}
	if err == nil || !strings.HasPrefix(err.Error(), `http: item "a": no response: timeout after 50ms: `) {
		t.Errorf("Sync = %v, want the timeout", err)
	}
}

// TestClassifyTimeoutUnsent: a target that cannot take the request
// within the timeout (here it accepts connections and never finishes a
// TLS handshake) is unavailable.
func TestClassifyTimeoutUnsent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	s := newSink(t, httpsink.Config{URL: "https://" + ln.Addr().String() + "/hook", Timeout: 50 * time.Millisecond})
	err = s.Sync(t.Context(), sinks.Item{ID: "a"})
	if class, _ := sinks.Classify(err); class != sinks.ClassTarget {
		t.Errorf("Classify(%v) = %v, want a timeout of class target", err, class)
	}
	if err == nil || !strings.HasPrefix(err.Error(), `http: item "a": target unavailable: timeout after 50ms: `) {
		t.Errorf("Sync = %v, want the timeout", err)
	}
}

// TestClassifyCancel: when the caller's context ends (the lease was lost),
// the target did not fail, even when the context's deadline passed.
func TestClassifyCancel(t *testing.T) {
	arrived := make(chan struct{}, 2)
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, hang func()) {
		arrived <- struct{}{}
		hang()
	})
	s := newSink(t, httpsink.Config{URL: srv.URL})

	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- s.Sync(ctx, sinks.Item{ID: "a"}) }()
	<-arrived
	cause := errors.New("lease lost")
	cancel(cause)
	err := <-done
	if class, _ := sinks.Classify(err); class != sinks.ClassItem || !errors.Is(err, cause) {
		t.Errorf("Classify(%v) = %v, want the cause, of class item", err, class)
	}

	dctx, dcancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer dcancel()
	err = s.Sync(dctx, sinks.Item{ID: "b"})
	if class, _ := sinks.Classify(err); class != sinks.ClassItem || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Classify(%v) = %v, want the caller's deadline, of class item", err, class)
	}
}

// TestClassifyUntrustedCertificate: a certificate the sink does not trust
// is a configuration problem, not the target down.
func TestClassifyUntrustedCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(nethttp.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the client's refusal of its certificate
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s := newSink(t, httpsink.Config{URL: srv.URL}) // the system's roots, not the test server's
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if class, _ := sinks.Classify(err); class != sinks.ClassItem {
		t.Errorf("Classify(%v) = %v, want item", err, class)
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Sync = %v, want the certificate error", err)
	}
}

// TestClassifyPlainHTTP: https to a plain HTTP server is a configuration
// problem too.
func TestClassifyPlainHTTP(t *testing.T) {
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {})
	s := newSink(t, httpsink.Config{URL: "https" + strings.TrimPrefix(srv.URL, "http")})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if class, _ := sinks.Classify(err); class != sinks.ClassItem {
		t.Errorf("Classify(%v) = %v, want item", err, class)
	}
}

// TestClassifyTLSAlert: a target that refuses the handshake, here for want
// of a client certificate, disagrees with the configuration: not down.
func TestClassifyTLSAlert(t *testing.T) {
	srv := httptest.NewUnstartedServer(nethttp.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	s := newSink(t, httpsink.Config{URL: srv.URL, TLS: &tls.Config{RootCAs: roots}})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if class, _ := sinks.Classify(err); class != sinks.ClassItem {
		t.Errorf("Classify(%v) = %v, want item", err, class)
	}
	if err == nil || !strings.Contains(err.Error(), "remote error: tls:") {
		t.Errorf("Sync = %v, want the target's TLS alert", err)
	}
}
