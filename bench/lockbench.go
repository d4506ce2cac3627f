package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// LockScenario is one load shape for the lock benchmark.
type LockScenario struct {
	Name string
	G    int // goroutines
	Keys int // distinct keys; goroutine g uses key g % Keys
}

// LockScenarios are the shapes measured.
var LockScenarios = []LockScenario{
	{"1 goroutine", 1, 1},
	{"8 goroutines", 8, 8},
	{"64 goroutines", 64, 64},
	{"64 goroutines, 16 hot keys", 64, 16},
}

// LockRun is one measured run.
type LockRun struct {
	Impl, Scenario string
	Rep            int
	R              LoopResult
}

// LockResults are every run of the lock benchmark.
type LockResults struct {
	Runs []LockRun
	Warm time.Duration
	Dur  time.Duration
	Reps int
}

// lockKeys are the key names of a scenario.
func lockKeys(sc LockScenario) []string {
	keys := make([]string, sc.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	return keys
}

// lockWindow measures an implementation that is set up, once.
func lockWindow(ctx context.Context, srv *Server, impl *LockImpl, sc LockScenario, keys []string, warm, dur time.Duration) LoopResult {
	return runLoop(ctx, srv, impl.Counters, sc.G, warm, dur, func(g int) opFunc {
		cycle := impl.Worker(g)
		key := keys[g%len(keys)]
		return func(ctx context.Context) (bool, error) { return cycle(ctx, key) }
	})
}

// runLock sets up one implementation and measures it in one scenario.
func runLock(ctx context.Context, srv *Server, k lockKind, sc LockScenario, prefix string, warm, dur time.Duration) (LoopResult, error) {
	keys := lockKeys(sc)
	impl, err := k.setup(ctx, srv.Addr(), prefix, keys, sc.G)
	if err != nil {
		return LoopResult{}, fmt.Errorf("%s: setup: %w", k.name, err)
	}
	defer impl.Close()
	r := lockWindow(ctx, srv, impl, sc, keys, warm, dur)
	if r.Errs > 0 && r.OK == 0 {
		return r, fmt.Errorf("%s %s: every cycle failed: %w", k.name, sc.Name, r.FirstErr)
	}
	return r, nil
}

// merge adds b's counts, latencies and window to r.
func (r *LoopResult) merge(b LoopResult) {
	r.OK += b.OK
	r.Fail += b.Fail
	r.Errs += b.Errs
	if r.FirstErr == nil {
		r.FirstErr = b.FirstErr
	}
	r.Lat = append(r.Lat, b.Lat...)
	addWindows(&r.W, b.W)
}

// LockRounds is how many short windows each implementation gets per
// repetition, interleaved with the others': the machine is shared and
// its speed drifts over seconds, so ratios compare implementations
// measured within the same few hundred milliseconds.
const LockRounds = 6

// lockRewarm is the warm-up before each round after the first: the
// implementation is set up and warm already, only its goroutines are new.
const lockRewarm = 25 * time.Millisecond

// RunLocks runs every implementation in every scenario, reps times. In a
// repetition all implementations are set up, then measured in
// LockRounds interleaved windows of dur/LockRounds each (the order
// rotates every round); their sums are that repetition's result, and
// ratios are taken within a repetition.
func RunLocks(ctx context.Context, srv *Server, reps int, warm, dur time.Duration, logf func(string, ...any)) (*LockResults, error) {
	res := &LockResults{Warm: warm, Dur: dur, Reps: reps}
	for rep := range reps {
		for si, sc := range LockScenarios {
			keys := lockKeys(sc)
			impls := make([]*LockImpl, len(lockKinds))
			closeAll := func() {
				for _, impl := range impls {
					if impl != nil {
						impl.Close()
					}
				}
			}
			for i, k := range lockKinds {
				impl, err := k.setup(ctx, srv.Addr(), fmt.Sprintf("lk%d%d%s", rep, si, k.name), keys, sc.G)
				if err != nil {
					closeAll()
					return nil, fmt.Errorf("%s: setup: %w", k.name, err)
				}
				impls[i] = impl
			}
			acc := make([]LoopResult, len(lockKinds))
			for round := range LockRounds {
				w := lockRewarm
				if round == 0 {
					w = warm
				}
				for j := range lockKinds {
					i := (j + rep + round) % len(lockKinds)
					acc[i].merge(lockWindow(ctx, srv, impls[i], sc, keys, w, dur/LockRounds))
				}
			}
			closeAll()
			for i, k := range lockKinds {
				r := acc[i]
				slices.Sort(r.Lat)
				if r.Errs > 0 && r.OK == 0 {
					return nil, fmt.Errorf("%s %s: every cycle failed: %w", k.name, sc.Name, r.FirstErr)
				}
				logf("locks rep %d %-28s %-11s %8.0f cycles/s p99 %-8v errs %d | cpu: self %.2f redis %.2f other %.2f idle %.2f cores",
					rep+1, sc.Name, k.name, r.Rate(), r.P(99).Round(time.Microsecond), r.Errs, cores(r.W.CPU, r.W), cores(r.W.RedisCPU, r.W),
					cores(r.W.Foreign(), r.W), cores(r.W.HostIdle, r.W))
				res.Runs = append(res.Runs, LockRun{Impl: k.name, Scenario: sc.Name, Rep: rep, R: r})
			}
		}
		srv.FlushAll(ctx)
	}
	return res, nil
}

// get returns the runs of one implementation and scenario, by repetition.
func (lr *LockResults) get(impl, scenario string) []LoopResult {
	out := make([]LoopResult, lr.Reps)
	for _, r := range lr.Runs {
		if r.Impl == impl && r.Scenario == scenario {
			out[r.Rep] = r.R
		}
	}
	return out
}

// spread summarises f over an implementation's repetitions.
func (lr *LockResults) spread(impl, scenario string, f func(LoopResult) float64) Spread {
	var vs []float64
	for _, r := range lr.get(impl, scenario) {
		vs = append(vs, f(r))
	}
	return spreadOf(vs)
}

// ratio summarises rate(a)/rate(b), each repetition on its own.
func (lr *LockResults) ratio(a, b, scenario string) Spread {
	ra, rb := lr.get(a, scenario), lr.get(b, scenario)
	var vs []float64
	for i := range ra {
		vs = append(vs, ra[i].Rate()/rb[i].Rate())
	}
	return spreadOf(vs)
}

// cores is d as a number of cores busy over the window.
func cores(d time.Duration, w Window) float64 { return d.Seconds() / w.Wall.Seconds() }
