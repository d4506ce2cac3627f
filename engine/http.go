package engine

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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
//	              unreachable, naming what Redis's ACL refuses while it
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
	code, text := Readiness(e.Ready(), e.Refused(), slices.Concat(e.Damaged(), e.OutOfReach()))
	if code != http.StatusOK {
		http.Error(w, text, code)
		return
	}
	fmt.Fprintln(w, text)
}

// Readiness is the answer to /readyz: 200 "ready" while the engine
// claims and every shard works; 503 naming what Redis's ACL refuses
// while it refuses the claims (Engine.Refused), where it said "not
// claiming yet" while syncd_redis_up said 1; 503 while Redis is
// unreachable or the engine is not claiming yet, and 503 "degraded",
// naming each damaged shard and its error, while a shard's damaged key
// keeps its items waiting (every other shard syncs on); degraded lists
// the shards out of reach (Engine.OutOfReach) too.
func Readiness(ready bool, refused []string, damaged []error) (int, string) {
	if len(refused) > 0 {
		return http.StatusServiceUnavailable, "not ready: claims refused by Redis ACL: " +
			printable(strings.Join(refused, ", "), 500) + "; see ACL LOG"
	}
	if !ready {
		return http.StatusServiceUnavailable, "not ready: redis unreachable or not claiming yet"
	}
	if len(damaged) == 0 {
		return http.StatusOK, "ready"
	}
	lines := make([]string, len(damaged))
	for i, err := range damaged {
		// Without the package name, as status and the API say it.
		lines[i] = "degraded: " + printable(strings.TrimPrefix(err.Error(), "store: "), 500)
	}
	return http.StatusServiceUnavailable, strings.Join(lines, "\n")
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
