package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// get fetches url; code 0 when the request failed.
func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrapeMetrics fetches and parses /metrics as Prometheus does.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, text := get("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", code, text)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mf, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, text)
	}
	return mf
}

// gauge returns the value of f's series whose label has value ("" for
// a family without labels), -1 when there is none.
func gauge(f *dto.MetricFamily, label, value string) float64 {
	for _, m := range f.GetMetric() {
		if label == "" && len(m.GetLabel()) == 0 {
			return m.GetGauge().GetValue()
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// daemonAddr waits for the daemon's "serving /metrics" log line and
// returns its address.
func daemonAddr(t *testing.T, stderr *testutil.Buffer) string {
	t.Helper()
	waitFor(t, 10*time.Second, "the HTTP server", func() bool { return strings.Contains(stderr.String(), "serving /metrics") })
	return logField(t, stderr.String(), "serving /metrics", "addr")
}

// TestMetricsMatchStatus: /metrics of a running daemon parses with
// expfmt, and its items-by-state gauges equal `syncd status --json`:
// items synced (idle), one in flight, three backing off. perm-0's
// permanent failure (exit 65) is backed off, not quarantined, while other
// items fail too and none succeeded since: it may be the target's (the
// breaker's rule for permanent failures).
func TestMetricsMatchStatus(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	cfg := writeConfig(t, redisConfig(srv, "metrics", `engine:
  interval: 1h
  workers: 8
  max_attempts: 3
  backoff_min: 1h
  backoff_max: 2h
items:
  ids: [ok-0, ok-1, ok-2, ok-3, ok-4, ok-5, fail-0, fail-1, perm-0, slow-0]
sink:
  type: exec
  exec:
    command: ["sh", "-c", "case $SYNCD_ID in fail-*) exit 1;; perm-*) exit 65;; slow-*) exec sleep 60;; esac"]
http:
  listen: 127.0.0.1:0
`))
	_, stderr := startDaemon(t, cfg)
	addr := daemonAddr(t, stderr)
	type summary struct {
		Items, Due, InFlight, BackingOff, Quarantined int
	}
	var st struct {
		Summary struct {
			Items       int `json:"items"`
			Due         int `json:"due"`
			InFlight    int `json:"in_flight"`
			BackingOff  int `json:"backing_off"`
			Quarantined int `json:"quarantined"`
		} `json:"summary"`
	}
	want := summary{Items: 10, InFlight: 1, BackingOff: 3}
	waitFor(t, 20*time.Second, "status: 1 in flight, 3 backing off", func() bool {
		r := run(t, "status", "--json", "-c", cfg)
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil {
			return false
		}
		return summary(st.Summary) == want
	})
	// The gauges are counted every 10 s (engine.CountIntervalDefault).
	var got summary
	var mf map[string]*dto.MetricFamily
	waitFor(t, 25*time.Second, "syncd_items to match status --json", func() bool {
		mf = scrapeMetrics(t, addr)
		it := mf["syncd_items"]
		got = summary{Items: int(gauge(it, "state", "all")), Due: int(gauge(it, "state", "due")),
			InFlight: int(gauge(it, "state", "in_flight")), BackingOff: int(gauge(it, "state", "backing_off")),
			Quarantined: int(gauge(it, "state", "quarantined"))}
		return got == want
	})
	for name, typ := range map[string]dto.MetricType{"syncd_items": dto.MetricType_GAUGE, "syncd_syncs_total": dto.MetricType_COUNTER,
		"syncd_build_info": dto.MetricType_GAUGE, "syncd_redis_up": dto.MetricType_GAUGE,
		"syncd_sync_duration_seconds": dto.MetricType_HISTOGRAM, "syncd_lease_left_at_heartbeat_seconds": dto.MetricType_HISTOGRAM,
		"go_goroutines": dto.MetricType_GAUGE, "process_resident_memory_bytes": dto.MetricType_GAUGE} {
		if f, ok := mf[name]; !ok || f.GetType() != typ {
			t.Errorf("%s missing or not a %v", name, typ)
		}
	}
	if v := gauge(mf["syncd_redis_up"], "", ""); v != 1 {
		t.Errorf("syncd_redis_up = %v, want 1", v)
	}
}

// TestHealthWhileRedisDown: `syncd run` serves /healthz (200) and
// /readyz (503) within a second or two while Redis is unreachable, with
// syncd_redis_up 0 in /metrics, logs go-redis's dial errors at most once
// per 10 s, and is ready once Redis comes up on that port.
func TestHealthWhileRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	srv.Kill(t) // its port stays reserved, and closed
	cfg := writeConfig(t, redisConfig(srv, "health", `items:
  ids: [a, b]
sink:
  type: exec
  exec:
    command: ["true"]
http:
  listen: 127.0.0.1:0
`))
	syncd.Path(t) // built first: the clock below is the daemon's
	start := time.Now()
	_, stderr := startDaemon(t, cfg)
	addr := daemonAddr(t, stderr)
	waitFor(t, 2*time.Second, "/healthz 200 and /readyz 503", func() bool {
		h, _ := get("http://" + addr + "/healthz")
		r, _ := get("http://" + addr + "/readyz")
		return h == http.StatusOK && r == http.StatusServiceUnavailable
	})
	t.Logf("live, not ready, %v after start", time.Since(start).Round(time.Millisecond))
	if v := gauge(scrapeMetrics(t, addr)["syncd_redis_up"], "", ""); v != 0 {
		t.Errorf("syncd_redis_up = %v while redis is down, want 0", v)
	}
	if code, body := get("http://" + addr + "/api/v1/items/sync"); code != http.StatusServiceUnavailable {
		t.Errorf("/api/ before redis = %d %s, want 503", code, body)
	}

	time.Sleep(time.Until(start.Add(6 * time.Second)))
	dials := 0
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, `"component":"go-redis"`) && strings.Contains(l, "failed to dial") {
			dials++
		}
	}
	t.Logf("go-redis dial errors logged in %v of redis down: %d", time.Since(start).Round(time.Second), dials)
	if dials > 1 {
		t.Errorf("%d go-redis dial error lines in 6 s, want at most 1 (one per 10 s):\n%s", dials, stderr.String())
	}

	srv.Restart(t)
	waitFor(t, 20*time.Second, "/readyz 200 once redis is up", func() bool {
		code, _ := get("http://" + addr + "/readyz")
		return code == http.StatusOK
	})
	waitFor(t, 5*time.Second, "syncd_redis_up 1", func() bool {
		return gauge(scrapeMetrics(t, addr)["syncd_redis_up"], "", "") == 1
	})
}

// TestLogMillisecondsAndUnits: the daemon's JSON log has RFC 3339 times
// to the millisecond and durations as *_ms numbers.
func TestLogMillisecondsAndUnits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	cfg := writeConfig(t, redisConfig(srv, "logs", `engine:
  interval: 1h
items:
  ids: [a]
sink:
  type: exec
  exec:
    command: ["true"]
`))
	_, stderr := startDaemon(t, cfg)
	waitFor(t, 10*time.Second, "engine started", func() bool { return strings.Contains(stderr.String(), "engine started") })
	var m map[string]any
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "engine started") {
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
		}
	}
	ts, _ := m["time"].(string)
	if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", ts); err != nil || len(ts) != len("2006-01-02T15:04:05.000Z") {
		t.Errorf("time %q: not RFC 3339 UTC with milliseconds", ts)
	}
	if v, ok := m["interval_ms"].(float64); !ok || v != float64(time.Hour.Milliseconds()) {
		t.Errorf("interval_ms = %v (%T), want %d: %v", m["interval_ms"], m["interval_ms"], time.Hour.Milliseconds(), m)
	}
	if _, ok := m["interval"]; ok {
		t.Errorf("a unitless interval field: %v", m)
	}
}
