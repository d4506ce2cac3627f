package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// scrape returns what h serves at /metrics.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rr.Code != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", rr.Code, rr.Body)
	}
	return rr.Body.String()
}

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// parse parses the Prometheus text format as Prometheus does.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mf, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, text)
	}
	return mf
}

// labelled returns the value of the series of f whose label name has
// value, and whether there is one.
func labelled(f *dto.MetricFamily, name, value string) (float64, bool) {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				switch {
				case m.Gauge != nil:
					return m.Gauge.GetValue(), true
				case m.Counter != nil:
					return m.Counter.GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestMetricsScrape: /metrics of a real engine over a real Redis parses
// as Prometheus text, keeps every name syncd has exposed with its type,
// adds the Go and process collectors, build info, Redis up and lease
// left at heartbeat, and its items-by-state gauges equal store.Counts.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 4)
	ctx := t.Context()
	var ids []string
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("ok-%d", i))
	}
	ids = append(ids, "bad-0", "bad-1", "bad-2", "slow-0", "slow-1")
	st.Add(ctx, ids...)
	sink := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		switch {
		case strings.HasPrefix(it.ID, "bad-"):
			return sinks.Permanent(errors.New("bad data"))
		case strings.HasPrefix(it.ID, "slow-"):
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	const ttl = time.Second
	cfg := engine.Config{Workers: 8, Interval: time.Hour, Poll: 10 * time.Millisecond, CountInterval: 100 * time.Millisecond,
		MaxAttempts: 1, DrainTimeout: time.Millisecond, Version: "v1.2.3-test"}
	cfg.Ownership.TTL = ttl
	e := newEngine(t, st, sink, cfg)
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m := e.Metrics()
	waitFor(t, 10*time.Second, "10 synced, 3 quarantined, 2 in flight", func() bool {
		return m.SyncsOK.Load() == 10 && m.Quarantined.Load() == 3 && m.InFlight.Load() == 2
	})
	waitFor(t, 10*time.Second, "the items counted and a heartbeat landed", func() bool {
		c, ok := m.Items()
		return ok && c.Items == 15 && c.InFlight == 2 && c.Quarantined == 3 && c.Due == 0 && c.BackingOff == 0 &&
			m.RedisUp.Load() == 1 && strings.Contains(scrape(t, engine.Handler(e)), "syncd_lease_left_at_heartbeat_seconds_count 2")
	})

	hs := httptest.NewServer(engine.Handler(e))
	defer hs.Close()
	code, text := get(t, hs.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	mf := parse(t, text)
	types := map[string]dto.MetricType{
		"syncd_claims_total": dto.MetricType_COUNTER, "syncd_syncs_total": dto.MetricType_COUNTER,
		"syncd_target_up": dto.MetricType_GAUGE, "syncd_target_transitions_total": dto.MetricType_COUNTER,
		"syncd_target_probes_total": dto.MetricType_COUNTER, "syncd_target_waits_total": dto.MetricType_COUNTER,
		"syncd_redis_data_losses_total": dto.MetricType_COUNTER, "syncd_reconciles_total": dto.MetricType_COUNTER,
		"syncd_reconcile_refusing": dto.MetricType_GAUGE, "syncd_target_permits_lost_total": dto.MetricType_COUNTER,
		"syncd_claim_ahead_handed_back_total": dto.MetricType_COUNTER,
		"syncd_quarantined_total":             dto.MetricType_COUNTER, "syncd_items_damaged_total": dto.MetricType_COUNTER,
		"syncd_lease_losses_total": dto.MetricType_COUNTER, "syncd_heartbeats_total": dto.MetricType_COUNTER,
		"syncd_heartbeat_errors_total": dto.MetricType_COUNTER, "syncd_in_flight": dto.MetricType_GAUGE,
		"syncd_due_backlog": dto.MetricType_GAUGE, "syncd_shards_damaged": dto.MetricType_GAUGE,
		"syncd_oldest_due_seconds": dto.MetricType_GAUGE, "syncd_sync_duration_seconds": dto.MetricType_HISTOGRAM,
		"syncd_build_info": dto.MetricType_GAUGE, "syncd_redis_up": dto.MetricType_GAUGE, "syncd_items": dto.MetricType_GAUGE,
		"syncd_target_open": dto.MetricType_GAUGE, "syncd_target_suspects": dto.MetricType_GAUGE,
		"syncd_target_permits_in_use":           dto.MetricType_GAUGE,
		"syncd_lease_left_at_heartbeat_seconds": dto.MetricType_HISTOGRAM,
		"go_goroutines":                         dto.MetricType_GAUGE, "process_cpu_seconds_total": dto.MetricType_COUNTER,
	}
	for name, typ := range types {
		switch f, ok := mf[name]; {
		case !ok:
			t.Errorf("/metrics lacks %s", name)
		case f.GetType() != typ:
			t.Errorf("%s is a %v, want %v", name, f.GetType(), typ)
		}
	}
	if v, _ := labelled(mf["syncd_syncs_total"], "outcome", "ok"); v != 10 {
		t.Errorf(`syncd_syncs_total{outcome="ok"} = %v, want 10`, v)
	}
	if h := mf["syncd_sync_duration_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleCount() != 13 || len(h.GetBucket()) != 10 {
		t.Errorf("syncd_sync_duration_seconds: %d samples in %d buckets, want 13 in 10 (+Inf included)", h.GetSampleCount(), len(h.GetBucket()))
	}
	if h := mf["syncd_lease_left_at_heartbeat_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleCount() < 2 ||
		h.GetSampleSum() <= 0 || h.GetSampleSum() > float64(h.GetSampleCount())*ttl.Seconds() {
		t.Errorf("syncd_lease_left_at_heartbeat_seconds: %d samples summing to %vs", h.GetSampleCount(), h.GetSampleSum())
	}
	bi := mf["syncd_build_info"].GetMetric()[0]
	if v, _ := labelled(mf["syncd_build_info"], "version", "v1.2.3-test"); v != 1 || bi.GetLabel()[0].GetValue() != runtime.Version() {
		t.Errorf("syncd_build_info = %v", bi)
	}
	if v := mf["syncd_redis_up"].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Errorf("syncd_redis_up = %v, want 1", v)
	}
	counts, err := st.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for state, n := range map[string]int64{"all": counts.Items, "due": counts.Due, "in_flight": counts.InFlight,
		"backing_off": counts.BackingOff, "quarantined": counts.Quarantined} {
		if v, ok := labelled(mf["syncd_items"], "state", state); !ok || v != float64(n) {
			t.Errorf(`syncd_items{state=%q} = %v (present %v), store.Counts says %d`, state, v, ok, n)
		}
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		if code, body := get(t, hs.URL+path); code != http.StatusOK || strings.TrimSpace(body) != want {
			t.Errorf("%s = %d %q, want 200 %q", path, code, body, want)
		}
	}
}

// TestEndpointsBeforeAttach: before an engine is attached the process
// is alive, not ready, and /metrics says Redis is down.
func TestEndpointsBeforeAttach(t *testing.T) {
	t.Parallel()
	ep := engine.NewEndpoints("v0-test")
	mux := http.NewServeMux()
	ep.Register(mux)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	if code, _ := get(t, hs.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready") {
		t.Errorf("/readyz = %d %q, want 503 not ready", code, body)
	}
	_, text := get(t, hs.URL+"/metrics")
	mf := parse(t, text)
	if v := mf["syncd_redis_up"].GetMetric()[0].GetGauge().GetValue(); v != 0 {
		t.Errorf("syncd_redis_up = %v, want 0", v)
	}
	if v, ok := labelled(mf["syncd_build_info"], "version", "v0-test"); !ok || v != 1 {
		t.Errorf("syncd_build_info lacks version v0-test:\n%s", text)
	}
	if _, ok := mf["syncd_items"]; ok {
		t.Error("syncd_items before any engine counted anything")
	}
	if _, ok := mf["go_goroutines"]; !ok {
		t.Error("no Go collector")
	}
}

// /readyz answers 503 naming each damaged shard and its error.
func TestReadyzNamesDamagedShards(t *testing.T) {
	damage := &store.DamageError{Shard: 3, Problem: "p:{s3}:meta is a string, want a hash",
		Err: errors.New("WRONGTYPE Operation against a key holding the wrong kind of value script: 4a203ea7, on @user_script:101.")}
	odd := &store.DamageError{Shard: 2, Err: errors.New("odd\x1b[31m")}
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		state engine.ReadyState
		code  int
		want  string
	}{
		{engine.ReadyState{Ready: true}, http.StatusOK, "ready"},
		{engine.ReadyState{}, http.StatusServiceUnavailable, "not ready: redis unreachable"},
		{engine.ReadyState{Damaged: []error{damage}}, http.StatusServiceUnavailable, "not ready: redis unreachable"},
		// Without the script's sha and line, which say nothing to an
		// operator (an outside trial).
		{engine.ReadyState{Ready: true, Damaged: []error{damage}}, http.StatusServiceUnavailable,
			`degraded: shard 3 damaged: p:{s3}:meta is a string, want a hash (WRONGTYPE Operation against a key holding the wrong kind of value)`},
		{engine.ReadyState{Ready: true, Damaged: []error{odd}}, http.StatusServiceUnavailable, `degraded: shard 2 damaged: odd\x1b[31m`},
		// What Redis's ACL refuses, where it said "not claiming yet"
		// while syncd_redis_up said 1 (an outside trial).
		{engine.ReadyState{Refused: []string{"command evalsha", "a key"}, Damaged: []error{damage}}, http.StatusServiceUnavailable,
			"not ready: claims refused by Redis ACL: command evalsha, a key; see ACL LOG"},
		{engine.ReadyState{Ready: true, ReleasesRefused: []string{"a command a script calls"}}, http.StatusServiceUnavailable,
			"not ready: releases refused by Redis ACL: a command a script calls; syncs are not recorded; see ACL LOG"},
		// Redis silent: said first, with the monitor's error, whatever
		// the scheduler last saw (a round blocked on a hung Redis
		// leaves Ready true).
		{engine.ReadyState{Ready: true, SilentSince: since, SilentErr: errors.New("store: TIME: i/o timeout"), Refused: []string{"a key"}},
			http.StatusServiceUnavailable, "not ready: redis not answering since 2025-03-01T12:00:00Z ("},
		{engine.ReadyState{Ready: true, SilentSince: since}, http.StatusServiceUnavailable,
			"not ready: redis not answering since 2025-03-01T12:00:00Z ("},
		// Redis out of memory, where it said "redis unreachable" while
		// syncd_redis_up said 1 (an outside trial).
		{engine.ReadyState{OutOfMemorySince: since}, http.StatusServiceUnavailable,
			"not ready: redis refuses writes: out of memory (maxmemory reached) since 2025-03-01T12:00:00Z ("},
	}
	for _, tt := range tests {
		code, text := engine.Readiness(tt.state)
		if code != tt.code || !strings.HasPrefix(text, tt.want) {
			t.Errorf("Readiness(%+v) = %d %q, want %d %q", tt.state, code, text, tt.code, tt.want)
		}
	}
	silent := engine.ReadyState{SilentSince: since, SilentErr: errors.New("store: TIME: i/o timeout")}
	if _, text := engine.Readiness(silent); !strings.HasSuffix(text, "): store: TIME: i/o timeout") {
		t.Errorf("Readiness(%+v) = %q, want the monitor's error last", silent, text)
	}
}

// /readyz turns 503 within a few seconds of Redis stopping to answer
// (SIGSTOP), saying since when, and 200 again once it answers. An outside
// trial saw it say "ready" for about 21 s, until every lease was lost:
// the scheduler's claim round, blocked on the hung Redis, never failed.
func TestReadyzRedisPaused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 4)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%d", i)
	}
	if _, err := st.Add(t.Context(), ids...); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Workers: 4, Interval: 200 * time.Millisecond, DrainTimeout: time.Millisecond}
	cfg.Ownership.TTL = 10 * time.Second
	e := newEngine(t, st, &recorder{}, cfg)
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(engine.Handler(e))
	defer hs.Close()
	var code int
	var body string
	readyz := func() bool { code, body = get(t, hs.URL+"/readyz"); return code == http.StatusOK }
	waitFor(t, 10*time.Second, "/readyz ready", readyz)
	srv.Pause(t)
	paused := time.Now()
	waitFor(t, 6*time.Second, "/readyz 503 with redis paused", func() bool { return !readyz() })
	const want = "not ready: redis not answering since "
	if !strings.HasPrefix(body, want) {
		t.Errorf("/readyz %v after the pause = %d %q, want 503 %q...", time.Since(paused).Round(time.Millisecond), code, body, want)
	}
	t.Logf("/readyz %v after the pause: %q", time.Since(paused).Round(time.Millisecond), body)
	srv.Resume(t)
	waitFor(t, 15*time.Second, "/readyz ready after the resume", readyz)
}

// /readyz says that Redis refuses writes for lack of memory while it
// does (maxmemory reached under noeviction), and 200 again once memory
// is freed. An outside trial saw "redis unreachable or not claiming yet"
// while syncd_redis_up said 1.
func TestReadyzRedisOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 4)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
	}
	if _, err := st.Add(t.Context(), ids...); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Workers: 4, Interval: 100 * time.Millisecond, Poll: 20 * time.Millisecond, DrainTimeout: time.Millisecond}
	cfg.Ownership.TTL = 10 * time.Second
	e := newEngine(t, st, &recorder{}, cfg)
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(engine.Handler(e))
	defer hs.Close()
	var code int
	var body string
	readyz := func() bool { code, body = get(t, hs.URL+"/readyz"); return code == http.StatusOK }
	waitFor(t, 10*time.Second, "/readyz ready", readyz)
	free := srv.FillMemory(t)
	const want = "not ready: redis refuses writes: out of memory (maxmemory reached) since "
	waitFor(t, 10*time.Second, "/readyz saying redis is out of memory", func() bool {
		return !readyz() && strings.HasPrefix(body, want)
	})
	if up := e.Metrics().RedisUp.Load(); up != 1 {
		t.Errorf("syncd_redis_up = %d while redis is out of memory, want 1: it answers", up)
	}
	free()
	waitFor(t, 10*time.Second, "/readyz ready once memory is freed", readyz)
}

// Once memory is freed, /readyz says ready as soon as Redis takes this
// daemon's writes again (its registry write, every 2 s, then the claims
// it wakes) and the out-of-memory spell's hold (one registry period)
// ends, never "not claiming yet" on the way. Before, the registry write
// cleared the spell while the claim rounds, refused for lack of memory,
// had backed off to 5 s: a trial of the binary read "not ready: redis
// unreachable or not claiming yet" for up to 3.4 s after memory was
// freed, and this test for 5 s.
func TestReadyzReadyOnceWritesGoThrough(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 4)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%d", i)
	}
	if _, err := st.Add(t.Context(), ids...); err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	cfg := engine.Config{Workers: 4, Interval: 100 * time.Millisecond, Poll: 20 * time.Millisecond, DrainTimeout: time.Millisecond,
		Logger: zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), &logs)).Level(zerolog.WarnLevel)}
	cfg.Ownership.TTL = 10 * time.Second
	e, err := engine.New(st, &recorder{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(engine.Handler(e))
	defer hs.Close()
	var code int
	var body string
	readyz := func() bool { code, body = get(t, hs.URL+"/readyz"); return code == http.StatusOK }
	waitFor(t, 10*time.Second, "/readyz ready", readyz)

	free := srv.FillMemory(t)
	// Held well below its use, Redis refuses the registry writes and
	// the claims until freed; filled just to maxmemory, it takes some as
	// memory frees up.
	if err := srv.Client(t).ConfigSet(t.Context(), "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	oom := func() bool {
		return !readyz() && strings.HasPrefix(body, "not ready: redis refuses writes: out of memory")
	}
	waitFor(t, 10*time.Second, "/readyz saying redis is out of memory", oom)
	waitFor(t, 20*time.Second, "the claim rounds' backoff at its 5 s cap", func() bool {
		return strings.Contains(logs.String(), `"retry_in_ms":5000`)
	})
	// Freed while /readyz says so (the code before went back to ready
	// whenever a write went through, a claim that DELs first among them).
	waitFor(t, 10*time.Second, "/readyz saying redis is out of memory", oom)
	free()
	freed := time.Now()
	var seen []string
	waitFor(t, 10*time.Second, "/readyz ready once memory is freed", func() bool {
		ok := readyz()
		if s := strings.SplitN(body, " since ", 2)[0]; len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		return ok
	})
	took := time.Since(freed)
	t.Logf("/readyz after memory was freed, %v to ready: %q", took.Round(time.Millisecond), seen)
	for _, s := range seen {
		if strings.HasPrefix(s, "not ready: redis unreachable or not claiming yet") {
			t.Errorf("/readyz said %q after memory was freed; want out of memory, then ready", s)
		}
	}
	// A registry period for a write to go through, one for the hold.
	if took > 5*time.Second {
		t.Errorf("/readyz ready %v after memory was freed; want within 5 s", took)
	}
}
