package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/sinks"
	httpsink "github.com/syncd/syncd/sinks/http"
	"github.com/syncd/syncd/sinks/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newSink returns a sink that the test closes when it ends.
func newSink(t *testing.T, cfg httpsink.Config) *httpsink.Sink {
	t.Helper()
	s, err := httpsink.New(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// newServer starts a test server; its handlers may call hang.
func newServer(t *testing.T, h func(w nethttp.ResponseWriter, r *nethttp.Request, hang func())) *httptest.Server {
	t.Helper()
	stop := make(chan struct{})
	hang := func(r *nethttp.Request) func() {
		return func() {
			// The server notices that the client went away only once
			// the request body has been read.
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-stop: // so that srv.Close cannot hang on a broken test
			}
		}
	}
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		h(w, r, hang(r))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs before srv.Close
	return srv
}

type wire struct {
	ID       string     `json:"id"`
	Fence    uint64     `json:"fence"`
	Owner    string     `json:"owner"`
	Attempt  int        `json:"attempt"`
	LastSync *time.Time `json:"last_sync"`
}

// decode reads a request body strictly as the documented payload.
func decode(r *nethttp.Request) (sinks.Item, error) {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return sinks.Item{}, err
	}
	it := sinks.Item{ID: w.ID, Fence: w.Fence, Owner: w.Owner, Attempt: w.Attempt}
	if w.LastSync != nil {
		it.LastSync = *w.LastSync
	}
	return it, nil
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T, b sinktest.Behavior) sinktest.Instance {
			var (
				mu       sync.Mutex
				received []sinks.Item
			)
			srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, hang func()) {
				switch b {
				case sinktest.Succeed:
					it, err := decode(r)
					if err != nil {
						nethttp.Error(w, err.Error(), nethttp.StatusBadRequest)
						return
					}
					mu.Lock()
					received = append(received, it)
					mu.Unlock()
					w.WriteHeader(nethttp.StatusNoContent)
				case sinktest.Fail:
					nethttp.Error(w, "backend exploded", nethttp.StatusInternalServerError)
				case sinktest.Block:
					hang()
				}
			})
			s, err := httpsink.New(httpsink.Config{URL: srv.URL + "/hook"}, zerolog.New(zerolog.NewTestWriter(t)))
			if err != nil {
				t.Fatal(err)
			}
			return sinktest.Instance{Sink: s, Received: func() []sinks.Item {
				mu.Lock()
				defer mu.Unlock()
				return append([]sinks.Item(nil), received...)
			}}
		},
		FailText: `status 500 Internal Server Error: body "backend exploded"`,
	})
}

func TestRequest(t *testing.T) {
	type request struct {
		Method, Path, Host string
		Header             map[string]string
		Body               string
	}
	reqs := make(chan request, 2)
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		body, _ := io.ReadAll(r.Body)
		h := make(map[string]string)
		for _, k := range []string{"Content-Type", "X-Syncd-Fence", "Authorization", "X-Extra", "User-Agent"} {
			h[k] = r.Header.Get(k)
		}
		reqs <- request{r.Method, r.URL.RequestURI(), r.Host, h, string(body)}
	})
	s := newSink(t, httpsink.Config{
		URL: srv.URL + "/hook?src=syncd",
		Headers: map[string]string{
			"authorization": "Bearer t0ken",
			"X-Extra":       "<&>",
			"Host":          "example.test",
		},
	})

	last := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.FixedZone("CEST", 2*3600))
	if err := s.Sync(t.Context(), sinks.Item{ID: `a "quoted"/ü`, Fence: 1<<53 + 1, Owner: "h/1/r/w3", Attempt: 2, LastSync: last}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(t.Context(), sinks.Item{ID: "b", Fence: 7, Owner: "w", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	want := []request{
		{
			Method: "POST", Path: "/hook?src=syncd", Host: "example.test",
			Header: map[string]string{
				"Content-Type": "application/json", "X-Syncd-Fence": "9007199254740993",
				"Authorization": "Bearer t0ken", "X-Extra": "<&>", "User-Agent": "syncd",
			},
			Body: `{"id":"a \"quoted\"/ü","fence":9007199254740993,"owner":"h/1/r/w3","attempt":2,"last_sync":"2024-05-01T10:00:00.123456789Z"}`,
		},
		{
			Method: "POST", Path: "/hook?src=syncd", Host: "example.test",
			Header: map[string]string{
				"Content-Type": "application/json", "X-Syncd-Fence": "7",
				"Authorization": "Bearer t0ken", "X-Extra": "<&>", "User-Agent": "syncd",
			},
			Body: `{"id":"b","fence":7,"owner":"w","attempt":1,"last_sync":null}`,
		},
	}
	for i, w := range want {
		if diff := cmp.Diff(<-reqs, w); diff != "" {
			t.Errorf("request %d (-got +want):\n%s", i, diff)
		}
	}
}

func TestStatusMapping(t *testing.T) {
	const (
		ok        = sinks.ClassNone
		retry     = sinks.ClassItem
		target    = sinks.ClassTarget
		permanent = sinks.ClassPermanent
		stale     = sinks.ClassStale
	)
	kind := func(err error) sinks.Class {
		class, _ := sinks.Classify(err)
		return class
	}
	tests := []struct {
		code int
		want sinks.Class
	}{
		{200, ok}, {201, ok}, {202, ok}, {204, ok},
		{301, retry}, {302, retry}, {303, retry}, {304, retry},
		{400, permanent}, {401, permanent}, {403, permanent}, {404, permanent},
		{405, permanent}, {410, permanent}, {413, permanent}, {422, permanent},
		{408, retry}, {429, target},
		{409, stale},
		{500, retry}, {501, retry}, {505, retry},
		{502, target}, {503, target}, {504, target},
	}
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/200")
		}
		w.WriteHeader(code)
		if code != 204 && code != 304 {
			fmt.Fprintf(w, "  reason for %d\n", code)
		}
	})
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			s := newSink(t, httpsink.Config{URL: fmt.Sprintf("%s/%d", srv.URL, tt.code)})
			err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 1})
			if got := kind(err); got != tt.want {
				t.Fatalf("Sync = %v: class %v, want %v", err, got, tt.want)
			}
			if err == nil {
				return
			}
			t.Log(err)
			if !strings.HasPrefix(err.Error(), `http: item "a": `) {
				t.Errorf("error %q does not start with the package name and item", err)
			}
			var se *httpsink.StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.code {
				t.Fatalf("error %v does not wrap a StatusError with code %d", err, tt.code)
			}
			if tt.code != 304 && se.Body != fmt.Sprintf("reason for %d", tt.code) {
				t.Errorf("StatusError.Body = %q, want the trimmed body", se.Body)
			}
		})
	}
}

func TestRedirect(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		if r.URL.Path == "/old" {
			nethttp.Redirect(w, r, "/new", nethttp.StatusPermanentRedirect)
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Method+" "+string(b))
		mu.Unlock()
	})
	s := newSink(t, httpsink.Config{URL: srv.URL + "/old"})
	if err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 3}); err != nil {
		t.Fatal(err)
	}
	want := []string{`POST {"id":"a","fence":3,"owner":"","attempt":0,"last_sync":null}`}
	if diff := cmp.Diff(bodies, want); diff != "" {
		t.Errorf("requests at the redirect target (-got +want):\n%s", diff)
	}
}

func TestLongBodySnippet(t *testing.T) {
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		w.WriteHeader(500)
		io.WriteString(w, strings.Repeat("é", 100<<10))
	})
	s := newSink(t, httpsink.Config{URL: srv.URL})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	var se *httpsink.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Sync = %v, want a StatusError", err)
	}
	if len(se.Body) > 300 || !strings.HasSuffix(se.Body, "é…") {
		t.Errorf("Body = %q (%d bytes), want a short prefix cut on a rune", se.Body, len(se.Body))
	}
}

func TestCancelMidRequest(t *testing.T) {
	arrived := make(chan struct{})
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, hang func()) {
		close(arrived)
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
	select {
	case err := <-done:
		if !errors.Is(err, cause) || sinks.IsPermanent(err) {
			t.Fatalf("Sync = %v, want a retryable error wrapping %v", err, cause)
		}
		t.Log(err)
	case <-time.After(5 * time.Second):
		t.Fatal("Sync did not return after cancel")
	}
}

func TestTimeout(t *testing.T) {
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, hang func()) {
		hang()
	})
	s := newSink(t, httpsink.Config{URL: srv.URL, Timeout: 50 * time.Millisecond})
	start := time.Now()
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timeout after 50ms") {
		t.Fatalf("Sync = %v, want a timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Sync took %v", took)
	}
}

func TestNetworkError(t *testing.T) {
	srv := httptest.NewServer(nethttp.NotFoundHandler())
	url := srv.URL
	srv.Close()
	s := newSink(t, httpsink.Config{URL: url})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if err == nil || sinks.IsPermanent(err) || errors.Is(err, sinks.ErrStaleFence) {
		t.Fatalf("Sync to a closed server = %v, want a retryable error", err)
	}
	t.Log(err)
}

// TestRealServer runs against a plain net/http.Server on a TCP listener, as
// a deployed target would be, including graceful shutdown.
func TestRealServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan sinks.Item, 1)
	srv := &nethttp.Server{
		Handler: nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
			it, err := decode(r)
			if err != nil || r.Header.Get("X-Syncd-Fence") != fmt.Sprint(it.Fence) {
				nethttp.Error(w, fmt.Sprint("bad request: ", err), nethttp.StatusBadRequest)
				return
			}
			got <- it
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	s := newSink(t, httpsink.Config{URL: "http://" + ln.Addr().String() + "/"})
	want := sinktest.Items("", 2)[1]
	if err := s.Sync(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(<-got, want); diff != "" {
		t.Errorf("received (-got +want):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, nethttp.ErrServerClosed) {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		cfg  httpsink.Config
		want string
	}{
		{httpsink.Config{URL: "http://localhost:8080/x"}, ""},
		{httpsink.Config{URL: "HTTPS://example.com", Timeout: time.Second, Headers: map[string]string{"Authorization": "x", "Host": "h"}}, ""},
		{httpsink.Config{}, "http: url: must not be empty"},
		{httpsink.Config{URL: "ftp://example.com"}, "http: url: scheme must be http or https"},
		{httpsink.Config{URL: "example.com/hook"}, "http: url: scheme must be http or https"},
		{httpsink.Config{URL: "http:///hook"}, "http: url: host must not be empty"},
		{httpsink.Config{URL: "http://:80/hook"}, "http: url: host must not be empty"},
		{httpsink.Config{URL: "http://a b/"}, "http: url: "},
		// A # in the password makes the rest the fragment and a piece of
		// the password the host (an outside trial: sent to host "ss").
		{httpsink.Config{URL: "http://user:p@ss#x@127.0.0.1:7484/hook"}, "http: url: has a # (a fragment, which requests never carry): write a # in the user's password or the path as %23"},
		{httpsink.Config{URL: "http://h/hook#part"}, "http: url: has a #"},
		// Before parsing, whose error quoted the password's start as a
		// port (a second outside trial: invalid port ":Zq9Secr3t").
		{httpsink.Config{URL: "http://alice:Zq9Secr3t#@127.0.0.1:7594/x"}, "http: url: has a #"},
		{httpsink.Config{URL: "http://alice:pa?ss@127.0.0.1:7594/x"}, `http: url: parse "http://alice:xxxxx@127.0.0.1:7594/x": invalid port after the host (a password that holds / or ? must write them %2F and %3F)`},
		{httpsink.Config{URL: "http://user:p%40ss%23x@127.0.0.1:7484/hook"}, ""},
		{httpsink.Config{URL: "http://h", Headers: map[string]string{"Bad Name": "x"}}, "http: headers: invalid header name"},
		{httpsink.Config{URL: "http://h", Headers: map[string]string{"": "x"}}, "http: headers: invalid header name"},
		{httpsink.Config{URL: "http://h", Headers: map[string]string{"X-A": "a\r\nX-B: b"}}, "http: headers: value of X-A"},
		{httpsink.Config{URL: "http://h", Headers: map[string]string{"content-type": "text/plain"}}, "http: headers: Content-Type is set by the sink"},
		{httpsink.Config{URL: "http://h", Headers: map[string]string{"X-Syncd-Fence": "1"}}, "http: headers: X-Syncd-Fence is set by the sink"},
		{httpsink.Config{URL: "http://h", Timeout: -time.Second}, "http: timeout: must not be negative"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v.Validate() = %v, want nil", tt.cfg, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v.Validate() = %v, want prefix %q", tt.cfg, err, tt.want)
		}
		if _, err := httpsink.New(tt.cfg, zerolog.Nop()); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", tt.cfg)
		}
	}
}

func TestValidateEveryField(t *testing.T) {
	err := httpsink.Config{
		URL:     "ftp://example.com",
		Headers: map[string]string{"X-Syncd-Fence": "1", "Bad Name": "x", "X-A": "a\nb"},
		Timeout: -1,
	}.Validate()
	if err == nil {
		t.Fatal("Validate = nil")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		`http: url: scheme must be http or https, got "ftp"`,
		`http: headers: invalid header name "Bad Name"`,
		"http: headers: value of X-A contains a line break or NUL",
		"http: headers: X-Syncd-Fence is set by the sink",
		"http: timeout: must not be negative, got -1ns",
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Validate (-got +want):\n%s", diff)
	}
}

func TestWithDefaults(t *testing.T) {
	if got := (httpsink.Config{}).WithDefaults(); got.Timeout != httpsink.TimeoutDefault {
		t.Errorf("WithDefaults().Timeout = %v, want %v", got.Timeout, httpsink.TimeoutDefault)
	}
	if got := (httpsink.Config{Timeout: time.Second}).WithDefaults(); got.Timeout != time.Second {
		t.Errorf("WithDefaults overrode Timeout: %v", got.Timeout)
	}
}

func TestValidateRedirects(t *testing.T) {
	for _, r := range []string{"", "none", "same-origin", "any"} {
		if err := (httpsink.Config{URL: "http://h", Redirects: r}).Validate(); err != nil {
			t.Errorf("Redirects %q: %v", r, err)
		}
	}
	err := httpsink.Config{URL: "http://h", Redirects: "all"}.Validate()
	if want := `http: redirects: must be same-origin, none or any, got "all"`; err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %q", err, want)
	}
	if got := (httpsink.Config{}).WithDefaults().Redirects; got != httpsink.RedirectsDefault || httpsink.RedirectsDefault != "same-origin" {
		t.Errorf("WithDefaults().Redirects = %q", got)
	}
}

// TestValidateHidesPassword: a URL that does not parse is quoted with its
// password and query values masked.
func TestValidateHidesPassword(t *testing.T) {
	err := httpsink.Config{URL: "http://user:hunter2@host/%zz?token=abc"}.Validate()
	want := `http: url: parse "http://user:xxxxx@host/%zz?token=xxxxx": invalid URL escape "%zz"`
	if err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %q", err, want)
	}
}
