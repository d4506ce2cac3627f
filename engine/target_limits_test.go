package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// With limits, an engine keeps its permits and takes rate tokens ahead,
// but starts nothing once it has seen the breaker open (watch reads it
// every 200 ms), however many it keeps: only Redis grants the probe.
func TestTargetLimitsHonourABreakerOpenedElsewhere(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 2)
	ctx := context.Background()
	st.Add(ctx, idRange(0, 3000)...)
	var down atomic.Bool
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		time.Sleep(5 * time.Millisecond)
		if down.Load() {
			return sinks.Unavailable(errors.New("503"))
		}
		return nil
	}}
	newEngine(t, st, rec, engine.Config{Workers: 8, Interval: time.Hour, Poll: 5 * time.Millisecond,
		Target: engine.TargetConfig{Rate: engine.Rate{N: 10_000, Per: time.Second}, MaxInFlight: 100,
			Breaker: engine.BreakerConfig{ProbeInterval: 500 * time.Millisecond}}}).Start(ctx)
	waitFor(t, 10*time.Second, "syncs under way", func() bool { return len(rec.snapshot()) >= 100 })
	// Another daemon saw the target fail, for the next 2 s: the breaker
	// opens; its probe is due in 1 s, then every 500 ms.
	down.Store(true)
	r, err := st.TargetReport(ctx, store.ReportParams{Outcome: store.TargetFailed, RetryAfter: time.Second, ProbeEvery: time.Second})
	if err != nil || !r.Open {
		t.Fatalf("open the breaker: %+v, %v", r, err)
	}
	opened := time.Now()
	time.Sleep(2 * time.Second)
	down.Store(false)
	// Syncs running when it opened end; then only probes start.
	var starts []time.Duration
	for _, ev := range rec.snapshot() {
		if d := ev.start.Sub(opened); d > 300*time.Millisecond && d < 2*time.Second {
			starts = append(starts, d.Round(time.Millisecond))
		}
	}
	t.Logf("starts while open: %v", starts)
	if len(starts) > 3 || len(starts) > 0 && starts[0] < 900*time.Millisecond {
		t.Errorf("syncs started while the breaker was open, after it opened: %v; want about one probe at 1 s and 1.5 s", starts)
	}
	waitFor(t, 10*time.Second, "syncs again after the target came back", func() bool {
		n := 0
		for _, ev := range rec.snapshot() {
			if ev.start.After(opened.Add(2 * time.Second)) {
				n++
			}
		}
		return n >= 10
	})
}
