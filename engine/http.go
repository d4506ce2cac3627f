package engine

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns an http.Handler that serves e's /metrics, /healthz and
// /readyz (see Endpoints), so a program with a sink of its own gets them
// in one line:
//
//	go http.ListenAndServe(":9090", engine.Handler(e))
func Handler(e *Engine) http.Handler {
	ep := NewEndpoints(e.cfg.Version)
	ep.Attach(e)
	mux := http.NewServeMux()
	ep.Register(mux)
	return mux
}

// Endpoints serves an engine's operational endpoints, from before the
// engine exists (a daemon that waits for Redis is alive but not ready)
// until it stops:
//
//	GET /metrics  Prometheus text: the engine's Collector, syncd_build_info,
//	              and the Go and process collectors, on a registry of its
//	              own (never the global one); before Attach only
//	              syncd_build_info, syncd_redis_up 0 and the Go and process
//	              metrics
//	GET /healthz  200 "ok" while the process serves HTTP
//	GET /readyz   200 "ready" while the attached engine claims and every
//	              shard works; 503 before Attach, while Redis is
//	              unreachable or does not answer (saying since when),
//	              saying that Redis refuses writes while it is out of
//	              memory, naming what Redis's ACL refuses while it
//	              refuses the claims, and "degraded" naming each damaged
//	              shard and each shard out of reach (a Cluster master)
//
// It is safe for concurrent use.
type Endpoints struct {
	e       atomic.Pointer[Engine]
	version string
	reg     *prometheus.Registry
	metrics http.Handler
}

// NewEndpoints returns Endpoints with no engine yet; version goes into
// syncd_build_info ("" for the module version Go recorded).
func NewEndpoints(version string) *Endpoints {
	if version == "" {
		version = moduleVersion()
	}
	p := &Endpoints{version: version, reg: prometheus.NewRegistry()}
	p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		lateCollector{p})
	p.metrics = promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return p
}

// Attach makes e the engine the endpoints report on.
func (p *Endpoints) Attach(e *Engine) { p.e.Store(e) }

// Registry returns the registry /metrics serves, for a program to
// register collectors of its own on.
func (p *Endpoints) Registry() *prometheus.Registry { return p.reg }

// Register adds GET /metrics, GET /healthz and GET /readyz to mux.
func (p *Endpoints) Register(mux *http.ServeMux) {
	mux.Handle("GET /metrics", p.metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", p.readyz)
}

func (p *Endpoints) readyz(w http.ResponseWriter, r *http.Request) {
	e := p.e.Load()
	if e == nil {
		http.Error(w, "not ready: starting, redis not reached yet", http.StatusServiceUnavailable)
		return
	}
	code, text := Readiness(e.ReadyState())
	if code != http.StatusOK {
		http.Error(w, text, code)
		return
	}
	fmt.Fprintln(w, text)
}

// ReadyState is what /readyz answers from (Readiness).
type ReadyState struct {
	// Ready: the engine runs and its last claim round went through, or
	// Redis refused it for lack of memory after one did (Engine.Ready).
	Ready bool
	// SilentSince is when Redis last answered the engine's monitor,
	// while it does not (a paused or cut-off server); SilentErr is the
	// monitor's last error then (nil: its round trip has not come back).
	// Zero while Redis answers.
	SilentSince time.Time
	SilentErr   error
	// Refused is what Redis's ACL refuses the claims (Engine.Refused);
	// ReleasesRefused, the releases (Engine.ReleasesRefused).
	Refused         []string
	ReleasesRefused []string
	// OutOfMemorySince is when Redis began to refuse the engine's
	// writes for lack of memory (maxmemory reached under noeviction),
	// while it does and until a write went through and none was refused
	// for one registry period (2 s): just at maxmemory Redis takes some
	// writes and refuses others. Zero while it takes them.
	OutOfMemorySince time.Time
	// Damaged are the damaged shards' errors (Engine.Damaged) and those
	// of the shards out of reach (Engine.OutOfReach).
	Damaged []error
}

// ReadyState returns what /readyz answers from, now.
func (e *Engine) ReadyState() ReadyState {
	s := ReadyState{Ready: e.Ready(), Refused: e.Refused(), ReleasesRefused: e.ReleasesRefused(),
		Damaged: slices.Concat(e.Damaged(), e.OutOfReach())}
	s.SilentSince, s.SilentErr = e.health.silent()
	s.OutOfMemorySince = e.health.outOfMemory()
	return s
}

// Readiness is the answer to /readyz: 200 "ready" while the engine
// claims and every shard works; 503 saying since when Redis has not
// answered while it does not (SilentSince), where it said "ready" for
// as long as a claim round waited on a hung Redis (about 21 s in an
// outside trial); 503 naming what Redis's ACL refuses while it refuses
// the claims (Engine.Refused), where it said "not claiming yet" while
// syncd_redis_up said 1; 503 saying that Redis refuses writes for lack
// of memory while it does, where it said "redis unreachable" while
// syncd_redis_up said 1; 503 while Redis is unreachable or the engine
// is not claiming yet, and 503 "degraded", naming each damaged shard
// and its error, while a shard's damaged key keeps its items waiting
// (every other shard syncs on); degraded lists the shards out of reach
// (Engine.OutOfReach) too.
func Readiness(s ReadyState) (int, string) {
	if !s.SilentSince.IsZero() {
		text := "not ready: redis not answering since " + since(s.SilentSince)
		if s.SilentErr != nil {
			text += ": " + printable(s.SilentErr.Error(), 500)
		}
		return http.StatusServiceUnavailable, text
	}
	if len(s.Refused) > 0 {
		return http.StatusServiceUnavailable, "not ready: claims refused by Redis ACL: " +
			printable(strings.Join(s.Refused, ", "), 500) + "; see ACL LOG"
	}
	if len(s.ReleasesRefused) > 0 {
		// Claims go through, so the daemon syncs, but nothing it syncs
		// is recorded: each item syncs again once its claim expires (an
		// outside trial read "ready" the while).
		return http.StatusServiceUnavailable, "not ready: releases refused by Redis ACL: " +
			printable(strings.Join(s.ReleasesRefused, ", "), 500) + "; syncs are not recorded; see ACL LOG"
	}
	if !s.OutOfMemorySince.IsZero() {
		return http.StatusServiceUnavailable, "not ready: redis refuses writes: out of memory (maxmemory reached) since " +
			since(s.OutOfMemorySince) + ": claims, releases and the daemon registry fail until memory is freed or maxmemory raised"
	}
	if !s.Ready {
		return http.StatusServiceUnavailable, "not ready: redis unreachable or not claiming yet"
	}
	if len(s.Damaged) == 0 {
		return http.StatusOK, "ready"
	}
	lines := make([]string, len(s.Damaged))
	for i, err := range s.Damaged {
		// Without the package name, as status and the API say it.
		lines[i] = "degraded: " + printable(strings.TrimPrefix(err.Error(), "store: "), 500)
	}
	return http.StatusServiceUnavailable, strings.Join(lines, "\n")
}

// since is t and how long ago it was, as /readyz says them:
// "2025-03-01T12:00:00Z (3.2s)".
func since(t time.Time) string {
	return fmt.Sprintf("%s (%v)", t.UTC().Format(time.RFC3339Nano), time.Since(t).Round(100*time.Millisecond))
}

// printable cuts s to n runes and escapes, as Go strings do, what a
// terminal would act on: text read back from Redis must not move the
// cursor of whoever curls /readyz.
func printable(s string, n int) string {
	var b strings.Builder
	for i, r := range []rune(s) {
		switch {
		case i == n:
			fmt.Fprintf(&b, "...(%d bytes)", len(s))
			return b.String()
		case unicode.IsPrint(r) || r == ' ':
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}

// lateCollector collects the attached engine's metrics, and before one
// is attached syncd_build_info and syncd_redis_up 0. It describes
// nothing (an unchecked collector), as what it collects changes when
// the engine comes.
type lateCollector struct{ p *Endpoints }

func (lateCollector) Describe(chan<- *prometheus.Desc) {}

func (c lateCollector) Collect(ch chan<- prometheus.Metric) {
	if e := c.p.e.Load(); e != nil {
		col := e.Collector()
		col.version = c.p.version
		col.Collect(ch)
		return
	}
	ch <- buildInfo(c.p.version)
	ch <- prometheus.MustNewConstMetric(familyDesc("syncd_redis_up"), prometheus.GaugeValue, 0)
}
