package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/store"
)

// The phases of a reconcile run, in order, each on the state the one
// before left.
const (
	RecAddAll  = "add all"    // from an empty set: every id added
	RecChanged = "1% changed" // RecChurn removed, as many new ones added
	RecNoop    = "no change"  // the same set again: what every refresh pays
)

// RecPhases are the phases in run order.
var RecPhases = []string{RecAddAll, RecChanged, RecNoop}

// RecChurn is the share of the set that the changed phase removes, and
// again the share it adds: 1% changed in all.
const RecChurn = 0.005

// RecMaxRemoval is the guard of the changed phase, in percent: the
// default, far above the RecChurn it removes.
const RecMaxRemoval = engine.MaxRemovalDefault

// ReconcileRun is one engine.Reconcile call.
type ReconcileRun struct {
	Phase string
	Res   engine.ReconcileResult
	W     Window
	// Scripts is the reconcile.lua calls the client sent.
	Scripts int64
	// PeakHeap is the client's heap (live and not yet collected objects)
	// at its highest during the call, minus the heap right before it.
	PeakHeap uint64
}

// Changed is the ids the call added or removed.
func (r ReconcileRun) Changed() int { return r.Res.Added + r.Res.Removed }

// Rate is ids of the desired set per second.
func (r ReconcileRun) Rate() float64 { return float64(r.Res.Desired) / r.W.Wall.Seconds() }

// ReconcileResults are the runs of each phase, one per repetition.
type ReconcileResults struct {
	N      int // ids in the set
	Shards int
	Runs   map[string][]ReconcileRun
}

// recID is the i-th id of the set: scale's ids, so the two sections
// measure the same id length.
func recID(i int) string { return scaleID(i) }

// reconcileSets returns the set of n ids and the changed set: every
// 1/RecChurn-th id gone and as many new ones, spread over the shards as
// the whole set is.
func reconcileSets(n int) (all, changed []string) {
	all = make([]string, n)
	for i := range all {
		all[i] = recID(i)
	}
	step := int(1 / RecChurn)
	changed = make([]string, 0, n)
	for i, id := range all {
		if i%step != 0 {
			changed = append(changed, id)
		}
	}
	for i := range n / step {
		changed = append(changed, recID(n+i))
	}
	return all, changed
}

// RunReconcile reconciles a set of n ids reps times, each time on a fresh
// key prefix: from empty (every id added), then with 1% changed, then
// unchanged.
func RunReconcile(ctx context.Context, srv *Server, n, reps int, logf func(string, ...any)) (*ReconcileResults, error) {
	all, changed := reconcileSets(n)
	res := &ReconcileResults{N: n, Runs: map[string][]ReconcileRun{}}
	step := int(1 / RecChurn)
	want := map[string][2]int{ // added, removed
		RecAddAll:  {n, 0},
		RecChanged: {n / step, (n + step - 1) / step},
		RecNoop:    {0, 0},
	}
	sets := map[string][]string{RecAddAll: all, RecChanged: changed, RecNoop: changed}
	for rep := range reps {
		srv.FlushAll(ctx)
		st, cnt, err := openStore(ctx, srv.Addr(), fmt.Sprintf("rc%d", rep), nil)
		if err != nil {
			return nil, err
		}
		res.Shards = st.Keys().Shards()
		for _, ph := range RecPhases {
			run, err := reconcileOnce(ctx, srv, st, cnt, sets[ph])
			if err != nil {
				st.Close()
				return nil, fmt.Errorf("reconcile %s, %s: %w", humanCount(n), ph, err)
			}
			run.Phase = ph
			if w := want[ph]; run.Res.Added != w[0] || run.Res.Removed != w[1] || run.Res.Refused != nil {
				st.Close()
				return nil, fmt.Errorf("reconcile %s, %s: added %d, removed %d (refused: %v), want %d and %d",
					humanCount(n), ph, run.Res.Added, run.Res.Removed, run.Res.Refused, w[0], w[1])
			}
			logf("reconcile rep %d %s ids, %-10s: %v, %s ids/s, Redis CPU %v, client CPU %v, %d reconcile.lua calls, peak heap +%.0f MB",
				rep+1, humanCount(n), ph, run.W.Wall.Round(time.Millisecond), fmtRate(run.Rate()),
				run.W.RedisCPU.Round(time.Millisecond), run.W.CPU.Round(time.Millisecond), run.Scripts, float64(run.PeakHeap)/1e6)
			res.Runs[ph] = append(res.Runs[ph], run)
		}
		st.Close()
	}
	srv.FlushAll(ctx)
	return res, nil
}

// reconcileOnce measures one engine.Reconcile of ids.
func reconcileOnce(ctx context.Context, srv *Server, st *store.Store, cnt *Counter, ids []string) (ReconcileRun, error) {
	var run ReconcileRun
	runtime.GC() // the heap before is what is live, not the last phase's garbage
	h0 := heapObjects()
	stop, peak := sampleHeap(h0)
	w := beginWindow(ctx, srv, cnt)
	source := func(context.Context) ([]string, error) { return ids, nil }
	r, err := engine.Reconcile(ctx, st, source, engine.ReconcileOptions{MaxRemoval: RecMaxRemoval, Logger: zerolog.Nop()})
	win := w.stop()
	stop()
	w.redisStats(ctx, &win)
	if err != nil {
		return run, err
	}
	run.Res, run.W, run.Scripts, run.PeakHeap = r, win, win.ByName["reconcile.lua"], *peak-h0
	return run, nil
}

// heapObjects is the bytes of heap objects, live and not yet swept.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sampleHeap records the highest heapObjects every millisecond until
// stop returns; *peak is final then.
func sampleHeap(h0 uint64) (stop func(), peak *uint64) {
	peak = new(uint64)
	*peak = h0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			*peak = max(*peak, heapObjects())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }, peak
}
