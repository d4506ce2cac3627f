package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// Fairness parameters, modelled on engine.TestFairnessLongestWaitingFirst:
// 1,000 items on 4 shards, 8 workers, two cycles; syncs of 10-30ms and a
// 4s interval keep a run short and make the engine's own cost per item
// count.
const (
	FairItems    = 1000
	FairWorkers  = 8
	FairShards   = 4
	FairInterval = 4 * time.Second
)

// FairScenario is one load shape.
type FairScenario struct {
	Name string
	// Engines share the workers (FairWorkers / Engines each).
	Engines int
	// Load runs hand-rolled lock cycles from this many goroutines on the
	// same Redis during the run.
	Load int
	// Settle is the engines' settle delay (claim-ahead at its default).
	// No sync can start sooner than this after its claim: it is added
	// to the ideal bound.
	Settle time.Duration
}

// FairScenarios are the shapes measured.
var FairScenarios = []FairScenario{
	{"1 engine, 8 workers", 1, 0, 0},
	{"1 engine, 8 workers, Redis busy (32 goroutines of lock cycles)", 1, 32, 0},
	{"2 engines x 4 workers sharing the items", 2, 0, 0},
	{"1 engine, 8 workers, settle 500ms (claim-ahead)", 1, 0, 500 * time.Millisecond},
}

// FairRun is one run of a scenario.
type FairRun struct {
	MaxWait, WaitFirst, WaitSecond time.Duration
	Ideal                          time.Duration // cycle work / workers + longest sync
	Worst, Window                  int           // places out of lastSync order, and the allowed window
	LoadRate                       float64       // background lock cycles per second
	Other                          float64       // cores other processes used during the run
}

// Ratio is the longest wait past due over the ideal bound.
func (r FairRun) Ratio() float64 { return float64(r.MaxWait) / float64(r.Ideal) }

// FairResults holds the runs per scenario.
type FairResults struct {
	Scenarios []FairScenario
	Runs      map[string][]FairRun
}

type fairEvent struct {
	id    string
	last  time.Time
	start time.Time
}

func runFairness(ctx context.Context, srv *Server, sc FairScenario, tag string) (FairRun, error) {
	srv.FlushAll(ctx)
	cfg := &store.Config{Shards: FairShards}
	st, _, err := openStore(ctx, srv.Addr(), "fair"+tag, cfg)
	if err != nil {
		return FairRun{}, err
	}
	defer st.Close()
	ids := make([]string, FairItems)
	for i := range ids {
		ids[i] = fmt.Sprintf("cust-%04d", i)
	}
	if _, err := st.Add(ctx, ids...); err != nil {
		return FairRun{}, err
	}
	var mu sync.Mutex
	var evs []fairEvent
	var work, started atomic.Int64
	sink := sinks.Func(func(ctx context.Context, it sinks.Item) error {
		ev := fairEvent{id: it.ID, last: it.LastSync, start: time.Now()}
		d := time.Duration(10+rand.IntN(21)) * time.Millisecond
		work.Add(int64(d))
		started.Add(1)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		mu.Lock()
		evs = append(evs, ev)
		mu.Unlock()
		return nil
	})
	// Background load on the same Redis.
	stopLoad := make(chan struct{})
	var loadDone sync.WaitGroup
	var loadOps atomic.Int64
	if sc.Load > 0 {
		impl, err := setupHandRolled(ctx, srv.Addr(), "load", nil, sc.Load)
		if err != nil {
			return FairRun{}, err
		}
		defer impl.Close()
		for g := range sc.Load {
			loadDone.Add(1)
			go func() {
				defer loadDone.Done()
				cycle := impl.Worker(g)
				key := fmt.Sprintf("bg%02d", g)
				for {
					select {
					case <-stopLoad:
						return
					default:
					}
					if ok, _ := cycle(ctx, key); ok {
						loadOps.Add(1)
					}
				}
			}()
		}
	}
	stop := func() { close(stopLoad); loadDone.Wait() }
	var engines []*engine.Engine
	for i := range sc.Engines {
		s := st
		if i > 0 { // another process: its own connection pool
			s2, _, err := openStore(ctx, srv.Addr(), "fair"+tag, cfg)
			if err != nil {
				stop()
				return FairRun{}, err
			}
			defer s2.Close()
			s = s2
		}
		e, err := engine.New(s, sink, engine.Config{Workers: FairWorkers / sc.Engines, Interval: FairInterval, Batch: 32,
			Poll: 10 * time.Millisecond, Ownership: ownership.Config{TTL: 5 * time.Second, Settle: sc.Settle}})
		if err != nil {
			stop()
			return FairRun{}, err
		}
		engines = append(engines, e)
	}
	w := beginWindow(ctx, srv)
	start := time.Now()
	for _, e := range engines {
		e.Start(ctx)
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		mu.Lock()
		n := 0
		for _, ev := range evs {
			if !ev.last.IsZero() {
				n++
			}
		}
		mu.Unlock()
		if n >= FairItems {
			break
		}
		if time.Now().After(deadline) {
			stop()
			return FairRun{}, fmt.Errorf("fairness %q: two cycles not done in 40s (%d of %d)", sc.Name, n, FairItems)
		}
		time.Sleep(10 * time.Millisecond)
	}
	loadSecs := time.Since(start).Seconds()
	win := w.stop()
	for _, e := range engines {
		e.Stop(ctx)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()

	var run FairRun
	run.LoadRate = float64(loadOps.Load()) / loadSecs
	run.Other = cores(win.Foreign(), win)
	// Order: cycle-2 syncs, by start, against their lastSync order.
	var second []fairEvent
	seen := map[string]bool{}
	for _, ev := range evs {
		if !ev.last.IsZero() && !seen[ev.id] { // a third sync may have started
			seen[ev.id] = true
			second = append(second, ev)
		}
	}
	slices.SortFunc(second, func(a, b fairEvent) int { return a.start.Compare(b.start) })
	byLast := slices.Clone(second)
	slices.SortFunc(byLast, func(a, b fairEvent) int { return a.last.Compare(b.last) })
	rank := map[string]int{}
	for i, ev := range byLast {
		rank[ev.id] = i
	}
	run.Window = 2*FairWorkers + 32
	for i, ev := range second {
		d := rank[ev.id] - i
		run.Worst = max(run.Worst, d, -d)
	}
	for _, ev := range evs {
		due := start
		if !ev.last.IsZero() {
			due = ev.last.Add(FairInterval)
			run.WaitSecond = max(run.WaitSecond, ev.start.Sub(due))
		} else {
			run.WaitFirst = max(run.WaitFirst, ev.start.Sub(due))
		}
		run.MaxWait = max(run.MaxWait, ev.start.Sub(due))
	}
	// The ideal: one cycle's sink time spread evenly over all workers,
	// plus the longest single sync (the engine test's bound, with the
	// cycle's work taken from the mean sync time).
	mean := time.Duration(work.Load() / max(started.Load(), 1))
	cycleWork := mean * FairItems / FairWorkers
	run.Ideal = cycleWork + 30*time.Millisecond + sc.Settle
	return run, nil
}

// RunFairness runs each scenario reps times.
func RunFairness(ctx context.Context, srv *Server, scenarios []FairScenario, reps int, logf func(string, ...any)) (*FairResults, error) {
	res := &FairResults{Scenarios: scenarios, Runs: map[string][]FairRun{}}
	for rep := range reps {
		for i, sc := range scenarios {
			r, err := runFairness(ctx, srv, sc, fmt.Sprintf("%d%d", rep, i))
			if err != nil {
				return nil, err
			}
			logf("fairness rep %d %-62s longest wait %v, ideal %v (%.2fx), order off by %d (window %d)",
				rep+1, sc.Name, r.MaxWait.Round(time.Millisecond), r.Ideal.Round(time.Millisecond), r.Ratio(), r.Worst, r.Window)
			res.Runs[sc.Name] = append(res.Runs[sc.Name], r)
		}
	}
	srv.FlushAll(ctx)
	return res, nil
}
