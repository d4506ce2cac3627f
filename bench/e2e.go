package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// E2EWorkers are the concurrencies measured end to end.
var E2EWorkers = []int{1, 8, 16, 64}

// E2ESettles are the ownership.Config.Settle values measured.
var E2ESettles = []time.Duration{0, 50 * time.Millisecond}

// E2ERun is one measured window of an end-to-end run.
type E2ERun struct {
	Done      int64 // items synced (SyncsOK) or tasks processed in the window
	Pool      int   // items or tasks available
	Exhausted bool  // the pool ran out before the window ended
	W         Window
}

// Rate is items per second.
func (r E2ERun) Rate() float64 { return float64(r.Done) / r.W.Wall.Seconds() }

// Rounds is the engine's scheduler rounds per second, counted by their
// pick claims (claim_pick.lua calls).
func (r E2ERun) Rounds() float64 {
	return float64(r.W.ByName["claim_pick.lua"]) / r.W.Wall.Seconds()
}

// E2ETargetWorkers is the concurrency at which the target's limiter and
// breaker (engine.Config.Target) are measured, with settle 0.
const E2ETargetWorkers = 64

// TargetVariant is one engine.Config.Target measured end to end.
type TargetVariant struct {
	Name   string // for progress lines and lookups
	Label  string // for the report
	Target engine.TargetConfig
}

// E2ETargetVariants are (a) the default, (b) the breaker off, which costs
// nothing per round, and (c) limits far above what the fleet reaches, so
// that what (c) loses against (b) is the cost of asking Redis, not the
// limit itself. Burst and MaxInFlight are within TargetConfig's bounds
// (≤ 1,000,000), the rate is engine.RateMax.
var E2ETargetVariants = []TargetVariant{
	{Name: "default", Label: "(a) breaker on, no limits (default)"},
	{Name: "breaker-off", Label: "(b) breaker off, no limits",
		Target: engine.TargetConfig{Breaker: engine.BreakerConfig{Disabled: true}}},
	{Name: "limits", Label: "(c) rate 1M/s, burst 1M, max_in_flight 100k, breaker on",
		Target: engine.TargetConfig{Rate: engine.Rate{N: 1_000_000, Per: time.Second}, Burst: 1_000_000, MaxInFlight: 100_000}},
}

// TargetGoal is the least (c) may reach of (b): the limiter's and the
// breaker's cost at a limit the fleet does not reach, under 10%.
const TargetGoal = 0.90

// E2ERow is one system at one concurrency.
type E2ERow struct {
	System  string // "syncd" or "asynq"
	Workers int
	Settle  time.Duration
	Target  string // a TargetVariant's Name; "" in the main table
	Runs    []E2ERun
}

// E2EResults holds the end-to-end table.
type E2EResults struct {
	Rows []*E2ERow
	// TargetRows are E2ETargetVariants' rows, in their order.
	TargetRows []*E2ERow
	Warm, Dur  time.Duration
}

// row finds a row of the main table.
func (e *E2EResults) row(system string, workers int, settle time.Duration) *E2ERow {
	for _, r := range e.Rows {
		if r.System == system && r.Workers == workers && r.Settle == settle {
			return r
		}
	}
	return nil
}

// targetRow finds a TargetVariant's row.
func (e *E2EResults) targetRow(name string) *E2ERow {
	for _, r := range e.TargetRows {
		if r.Target == name {
			return r
		}
	}
	return nil
}

// targetRatio is variant a's rate over variant b's, per repetition.
func (e *E2EResults) targetRatio(a, b string) Spread {
	ra, rb := e.targetRow(a), e.targetRow(b)
	if ra == nil || rb == nil {
		return spreadOf(nil)
	}
	return runRatio(ra.Runs, rb.Runs)
}

// runRatio is a's rate over b's, repetition by repetition.
func runRatio(a, b []E2ERun) Spread {
	var vs []float64
	for i := range min(len(a), len(b)) {
		vs = append(vs, a[i].Rate()/b[i].Rate())
	}
	return spreadOf(vs)
}

// engineConfig is the engine's configuration in the end-to-end run.
func engineConfig(workers int, settle time.Duration, tc engine.TargetConfig) engine.Config {
	return engine.Config{Workers: workers, Interval: time.Hour, Target: tc,
		Ownership: ownership.Config{TTL: LockTTL, Settle: settle}}
}

// engineTarget is a Redis an engine runs against end to end: the Server,
// or a local Cluster.
type engineTarget interface {
	redisTarget
	FlushAll(ctx context.Context) error
	// StoreConfig says how to reach it: Addrs, and Cluster.
	StoreConfig() store.Config
}

// runEngine adds pool items to a fresh deployment, starts an engine with
// a no-op sink and the target configuration tc, and counts SyncsOK over a
// window after warm.
func runEngine(ctx context.Context, srv engineTarget, workers int, settle time.Duration, tc engine.TargetConfig, pool int, warm, dur time.Duration) (E2ERun, error) {
	sink := sinks.Func(func(ctx context.Context, it sinks.Item) error { return nil })
	return runEngineWith(ctx, srv, engineConfig(workers, settle, tc), sink, pool, warm, dur)
}

// runEngineWith adds pool items to a fresh deployment, starts an engine
// with cfg and sink, and counts SyncsOK over a window after warm.
func runEngineWith(ctx context.Context, srv engineTarget, cfg engine.Config, sink sinks.Sink, pool int, warm, dur time.Duration) (E2ERun, error) {
	srv.FlushAll(ctx)
	st, cnt, err := openStoreConfig(ctx, srv.StoreConfig(), "e2e")
	if err != nil {
		return E2ERun{}, err
	}
	defer st.Close()
	ids := make([]string, pool)
	for i := range ids {
		ids[i] = fmt.Sprintf("it-%07d", i)
	}
	if _, err := st.Add(ctx, ids...); err != nil {
		return E2ERun{}, err
	}
	e, err := engine.New(st, sink, cfg)
	if err != nil {
		return E2ERun{}, err
	}
	if err := e.Start(ctx); err != nil {
		return E2ERun{}, err
	}
	defer e.Stop(context.Background())
	time.Sleep(warm)
	m := e.Metrics()
	w := beginWindow(ctx, srv, cnt)
	s0 := m.SyncsOK.Load()
	time.Sleep(dur)
	s1 := m.SyncsOK.Load()
	win := w.stop()
	w.redisStats(ctx, &win)
	if n := m.SyncsFailed.Load() + m.SyncsLost.Load() + m.SyncsUnrecorded.Load(); n > 0 {
		return E2ERun{}, fmt.Errorf("engine %d workers: %d syncs did not succeed", cfg.Workers, n)
	}
	return E2ERun{Done: s1 - s0, Pool: pool, Exhausted: s1 >= int64(pool), W: win}, nil
}

// runAsynq enqueues pool no-op tasks, starts an asynq server with the
// given concurrency and counts processed tasks over a window after warm.
func runAsynq(ctx context.Context, srv *Server, workers, pool int, warm, dur time.Duration) (E2ERun, error) {
	srv.FlushAll(ctx)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	cl := asynq.NewClientFromRedisClient(rdb)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(pool) {
				if _, err := cl.Enqueue(asynq.NewTask("noop", nil)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return E2ERun{}, fmt.Errorf("asynq enqueue: %w", e.(error))
	}
	// The server gets its own client (default pool, as syncd's) so that
	// only its traffic is counted.
	srdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer srdb.Close()
	cnt := new(Counter).Attach(srdb)
	var done atomic.Int64
	s := asynq.NewServerFromRedisClient(srdb, asynq.Config{Concurrency: workers, LogLevel: asynq.FatalLevel})
	h := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { done.Add(1); return nil })
	if err := s.Start(h); err != nil {
		return E2ERun{}, err
	}
	defer s.Shutdown()
	time.Sleep(warm)
	w := beginWindow(ctx, srv, cnt)
	d0 := done.Load()
	time.Sleep(dur)
	d1 := done.Load()
	win := w.stop()
	w.redisStats(ctx, &win)
	return E2ERun{Done: d1 - d0, Pool: pool, Exhausted: d1 >= int64(pool), W: win}, nil
}

// RunE2E measures the engine against asynq at each concurrency.
// enginePool and asynqPool size the work so that it lasts past the window.
func RunE2E(ctx context.Context, srv *Server, reps, enginePool, settlePool, asynqPool int, warm, dur time.Duration, logf func(string, ...any)) (*E2EResults, error) {
	res := &E2EResults{Warm: warm, Dur: dur}
	for _, w := range E2EWorkers {
		for _, s := range E2ESettles {
			res.Rows = append(res.Rows, &E2ERow{System: "syncd", Workers: w, Settle: s})
		}
		res.Rows = append(res.Rows, &E2ERow{System: "asynq", Workers: w})
	}
	for rep := range reps {
		// Every other repetition runs the rows in reverse (ABBA), so
		// that drift over the run (a machine warming up, a neighbour's
		// load) falls on syncd and asynq alike rather than on the rows
		// run last.
		order := slices.Clone(res.Rows)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, row := range order {
			var r E2ERun
			var err error
			if row.System == "asynq" {
				r, err = runAsynq(ctx, srv, row.Workers, asynqPool, warm, dur)
			} else {
				p := enginePool
				if row.Settle > 0 {
					p = settlePool
				}
				r, err = runEngine(ctx, srv, row.Workers, row.Settle, engine.TargetConfig{}, p, warm, dur)
			}
			if err != nil {
				return nil, err
			}
			logf("e2e rep %d %-5s workers %2d settle %-5v %8.0f items/s exhausted=%v", rep+1, row.System, row.Workers, row.Settle, r.Rate(), r.Exhausted)
			row.Runs = append(row.Runs, r)
		}
		if err := runTargetVariants(ctx, srv, res, rep, enginePool, warm, dur, logf); err != nil {
			return nil, err
		}
	}
	srv.FlushAll(ctx)
	return res, nil
}

// runTargetVariants runs one repetition of E2ETargetVariants back to
// back, starting one further along each repetition so that no variant
// always runs first (the first of a series sees a cooler machine).
func runTargetVariants(ctx context.Context, srv *Server, res *E2EResults, rep, pool int, warm, dur time.Duration, logf func(string, ...any)) error {
	if res.TargetRows == nil {
		for _, v := range E2ETargetVariants {
			res.TargetRows = append(res.TargetRows, &E2ERow{System: "syncd", Workers: E2ETargetWorkers, Target: v.Name})
		}
	}
	n := len(E2ETargetVariants)
	for i := range n {
		k := (rep + i) % n
		v, row := E2ETargetVariants[k], res.TargetRows[k]
		r, err := runEngine(ctx, srv, row.Workers, 0, v.Target, pool, warm, dur)
		if err != nil {
			return fmt.Errorf("target %s: %w", v.Name, err)
		}
		logf("e2e rep %d syncd workers %2d target %-11s %8.0f items/s exhausted=%v", rep+1, row.Workers, v.Name, r.Rate(), r.Exhausted)
		row.Runs = append(row.Runs, r)
	}
	return nil
}
