package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// fakeTarget is a targetStore that grants whatever it is asked, and
// records the admissions asked and the permits given back.
type fakeTarget struct {
	mu       sync.Mutex
	asked    []store.AdmitParams
	released []string
	gone     int // what the next extend reports
	open     bool
	// reporting, when set, gets each report as it comes, which then
	// waits for replied to be closed.
	reporting chan store.ReportParams
	replied   chan struct{}
}

func (f *fakeTarget) TargetAdmit(_ context.Context, p store.AdmitParams) (store.Admission, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, p)
	a := store.Admission{Granted: p.N, Ahead: p.Ahead, Breaker: store.BreakerState{Open: f.open}}
	if f.open {
		a.Granted, a.Probe, a.Ahead = 1, true, 0
	}
	for i := range a.Granted - min(p.HeldPermits, a.Granted) {
		if p.MaxInFlight > 0 { // as target_admit.lua: no cap, no permits
			a.Permits = append(a.Permits, fmt.Sprintf("%s:%d", p.Base, i+1))
		}
	}
	return a, nil
}

func (f *fakeTarget) TargetReport(_ context.Context, p store.ReportParams) (store.Report, error) {
	if f.reporting != nil {
		f.reporting <- p
		<-f.replied
	}
	return store.Report{}, nil
}

func (f *fakeTarget) TargetExtend(context.Context, []string, time.Duration) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gone, nil
}

func (f *fakeTarget) TargetRelease(_ context.Context, permits ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, permits...)
	return nil
}

func (f *fakeTarget) TargetState(context.Context) (store.TargetState, error) {
	return store.TargetState{}, nil
}

func (f *fakeTarget) counts() (asked int, released []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.asked), slices.Sorted(slices.Values(f.released))
}

func newFakeTarget(f *fakeTarget) *target {
	cfg := TargetConfig{Rate: Rate{N: 1000, Per: time.Second}, MaxInFlight: 100}.WithDefaults()
	return &target{st: f, cfg: cfg, ttl: time.Second, beat: time.Second, base: "h",
		m: newMetrics(nil), now: func() int64 { return time.Now().UnixMilli() }, permits: map[string]struct{}{}}
}

// A round the permits and rate tokens kept cover asks Redis nothing:
// permits come back when syncs end, tokens are taken ahead and lapse
// after aheadFor. An open breaker, as last seen, always asks Redis.
func TestTargetKeepsPermitsAndTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTarget{}
		tg := newFakeTarget(f)
		ctx := t.Context()
		admit := func(n int) grant {
			t.Helper()
			g, err := tg.admit(ctx, n)
			if err != nil || g.n != n {
				t.Fatalf("admit(%d) = %+v, %v", n, g, err)
			}
			return g
		}
		g := admit(4)
		if asked, _ := f.counts(); asked != 1 || f.asked[0].Ahead != 4 {
			t.Fatalf("first admit: %d asked, %+v", asked, f.asked)
		}
		tg.done(g.permits...)
		g2 := admit(4)
		if asked, _ := f.counts(); asked != 1 {
			t.Fatalf("a round the kept permits and tokens cover asked Redis: %+v", f.asked[1:])
		}
		if diff := cmp.Diff(slices.Sorted(slices.Values(g2.permits)), slices.Sorted(slices.Values(g.permits))); diff != "" {
			t.Errorf("permits reused (-got +want):\n%s", diff)
		}
		// The tokens are used up: Redis is asked, with the permits kept.
		tg.done(g2.permits[:2]...)
		admit(3)
		if asked, _ := f.counts(); asked != 2 || f.asked[1].HeldPermits != 2 || f.asked[1].HeldTokens != 0 || f.asked[1].Ahead != 16 {
			t.Fatalf("second ask: %+v, want 2 permits held, no token, 16 ahead (twice the 8 used)", f.asked[1])
		}
		// Tokens taken ahead lapse after aheadFor.
		tg.done(g2.permits[2:]...)
		time.Sleep(aheadFor)
		admit(1)
		if asked, _ := f.counts(); asked != 3 || f.asked[2].HeldPermits != 1 || f.asked[2].HeldTokens != 0 {
			t.Fatalf("after aheadFor: %d asked, %+v; want an ask with 1 permit held and no token", asked, f.asked[2:])
		}
		// Open as last seen: Redis decides the probe.
		f.open = true
		tg.see(store.BreakerState{Open: true})
		if g, _ := tg.admit(ctx, 1); !g.probe {
			t.Fatalf("admit with the breaker open: %+v, want the probe from Redis", g)
		}
		if asked, _ := f.counts(); asked != 4 {
			t.Fatalf("admit with the breaker open: %d asked", asked)
		}
	})
}

// Permits kept that no round used for a whole watch period are given
// back, all of them at Stop (wait), those held when some were found gone
// are given back when their syncs end instead of kept, and kept ones
// not extended within their ttl are given back, not used.
func TestTargetGivesBackPermits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTarget{}
		tg := newFakeTarget(f)
		ctx := t.Context()
		g, _ := tg.admit(ctx, 4)
		tg.done(g.permits[:3]...)
		tg.surplus() // a period starts with 3 kept
		g2, _ := tg.admit(ctx, 1)
		tg.surplus() // 2 were never used in it
		synctest.Wait()
		if _, rel := f.counts(); len(rel) != 2 {
			t.Fatalf("given back %v, want the 2 kept and unused", rel)
		}
		tg.done(g2.permits...)
		tg.wait()
		if _, rel := f.counts(); len(rel) != 3 {
			t.Fatalf("given back %v at Stop, want the 3 kept", rel)
		}
		// Some permits were found gone: the one whose sync runs is
		// given back when it ends.
		f.gone = 1
		tg.extend(ctx)
		tg.done(g.permits[3])
		tg.wait()
		if _, rel := f.counts(); len(rel) != 4 || len(tg.permits) != 0 || len(tg.idle) != 0 {
			t.Fatalf("given back %v, held %v, kept %v; want all 4 given back", rel, tg.permits, tg.idle)
		}
		// Not extended for a ttl (a stalled process): not used again.
		f.gone = 0
		g, _ = tg.admit(ctx, 2)
		tg.done(g.permits...)
		time.Sleep(tg.ttl)
		g, _ = tg.admit(ctx, 2)
		synctest.Wait()
		if last := f.asked[len(f.asked)-1]; last.HeldPermits != 0 {
			t.Errorf("asked with %d permits held past their ttl, want none", last.HeldPermits)
		}
		if _, rel := f.counts(); len(rel) != 6 {
			t.Errorf("given back %v, want the 2 past their ttl too", rel)
		}
		// Extended: kept and used again.
		time.Sleep(tg.ttl / 2)
		tg.extend(ctx)
		tg.done(g.permits...)
		if g, _ := tg.admit(ctx, 1); len(g.permits) != 1 || f.asked[len(f.asked)-1].HeldPermits != 1 {
			t.Errorf("admit after an extend: %+v, asked %+v; want the permit kept", g, f.asked[len(f.asked)-1])
		}
	})
}

// A rate alone (no max_in_flight) keeps tokens and no permits: a round
// the kept tokens cover grants without permits. It panicked (an outside
// trial: slice bounds out of range [-2:] in takeIdle, any rate above
// 20/s without max_in_flight), and max_in_flight alone keeps permits
// and no tokens.
func TestTargetKeepsOnlyWhatIsLimited(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  TargetConfig
	}{
		{"rate alone", TargetConfig{Rate: Rate{N: 100, Per: time.Second}}},
		{"max_in_flight alone", TargetConfig{MaxInFlight: 10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeTarget{}
				tg := newFakeTarget(f)
				tg.cfg = tt.cfg.WithDefaults()
				for round := range 4 {
					g, err := tg.admit(t.Context(), 2)
					if err != nil || g.n != 2 {
						t.Fatalf("round %d: admit(2) = %+v, %v", round, g, err)
					}
					want := 0
					if tt.cfg.MaxInFlight > 0 {
						want = 2
					}
					if len(g.permits) != want {
						t.Fatalf("round %d: %d permits, want %d", round, len(g.permits), want)
					}
					tg.done(g.permits...)
				}
				if asked, _ := f.counts(); asked > 2 {
					t.Errorf("4 rounds of 2 asked Redis %d times: the kept tokens or permits were not used", asked)
				}
			})
		})
	}
}

// A target failure holds this process's syncs at once, before the
// breaker's reply: in the report's round trip (70-100 ms under load),
// syncs of new claims started after a 429's Retry-After (an outside
// trial: 12 requests after the first 429 came back).
func TestTargetFailureHoldsAtOnce(t *testing.T) {
	f := &fakeTarget{reporting: make(chan store.ReportParams), replied: make(chan struct{})}
	tg := newFakeTarget(f)
	tg.cfg = TargetConfig{}.WithDefaults() // no limits: a closed breaker admits without a round trip
	if g, err := tg.admit(t.Context(), 4); err != nil || g.n != 4 {
		t.Fatalf("admit with the breaker closed = %+v, %v", g, err)
	}
	done := make(chan verdict)
	go func() {
		done <- tg.report("a", sinks.ClassTarget, 10*time.Second, errors.New("429 Too Many Requests"), false)
	}()
	<-f.reporting // the report is on its way; its reply is not back
	g, err := tg.admit(t.Context(), 4)
	if err != nil || g.n != 0 || g.wait < 9*time.Second {
		t.Errorf("admit while a target failure's report is in flight = %+v, %v; want none admitted, a wait of about 10s", g, err)
	}
	close(f.replied)
	if v := <-done; v != blameTarget {
		t.Errorf("report of a target failure = %v, want blameTarget", v)
	}
}
