package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	goleak.VerifyTestMain(m)
}

var prefixes atomic.Int64

func openStore(t *testing.T, addr string, shards int) *store.Store {
	t.Helper()
	cfg := store.Config{KeyPrefix: fmt.Sprintf("e%d", prefixes.Add(1)), Shards: shards}
	if addr != "" {
		cfg.Addrs = []string{addr}
	}
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// A new deployment: nobody can hold an earlier lease.
	for sh := range shards {
		s.MarkEpoch(context.Background(), sh, 0)
	}
	return s
}

func newEngine(t *testing.T, st *store.Store, sink sinks.Sink, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	e, err := engine.New(st, sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	return e
}

// event is one sync seen by a recording sink.
type event struct {
	id            string
	fence         uint64
	last          time.Time // lastSync the sink was given
	start, finish time.Time
	err           error
}

// recorder is a sink that records every sync and enforces fencing like a
// real target would.
type recorder struct {
	mu     sync.Mutex
	events []event
	guard  sinks.FenceGuard
	do     func(ctx context.Context, it sinks.Item) error
}

func (r *recorder) Sync(ctx context.Context, it sinks.Item) error {
	ev := event{id: it.ID, fence: it.Fence, last: it.LastSync, start: time.Now()}
	if err := r.guard.Accept(it.ID, it.Fence); err != nil {
		return err
	}
	if r.do != nil {
		ev.err = r.do(ctx, it)
	}
	ev.finish = time.Now()
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	return ev.err
}

func (r *recorder) Close() error { return nil }

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// stallMeter measures, until t ends, the longest a 5 ms sleep overslept:
// how long the machine kept this process from running a ready goroutine.
// It returns a reader of the longest so far.
func stallMeter(t *testing.T) func() time.Duration {
	var longest atomic.Int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			at := time.Now()
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if over := int64(time.Since(at) - 5*time.Millisecond); over > longest.Load() {
				longest.Store(over)
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return func() time.Duration { return time.Duration(longest.Load()) }
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, within, 10*time.Millisecond, what, cond)
}

// Fairness: 1,000 items, 8 workers, random sink durations. Items are
// served in the order they have waited, the longest wait past due stays
// within 1.5x the ideal bound, and a poison item slows nobody.
func TestFairnessLongestWaitingFirst(t *testing.T) {
	// Not parallel: it measures order and waits against timings, which
	// the package's parallel engines take CPU from (78 places off, of 48
	// allowed, twice under the whole suite).
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 4)
	const items, workers = 1000, 8
	const interval = 7 * time.Second
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprintf("cust-%04d", i)
	}
	ctx := context.Background()
	if _, err := st.Add(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	st.Add(ctx, "poison")
	var work atomic.Int64 // total sink time, ns
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		if it.ID == "poison" {
			return errors.New("poison item always fails")
		}
		d := time.Duration(20+rand.IntN(41)) * time.Millisecond
		work.Add(int64(d))
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}}
	e := newEngine(t, st, rec, engine.Config{Workers: workers, Interval: interval, Batch: 32, MaxAttempts: 4,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Poll: 10 * time.Millisecond,
		Ownership: ownership.Config{TTL: 5 * time.Second}})
	// stall is the longest this process was kept from running a ready
	// goroutine meanwhile (a 5 ms sleep overslept by it): starts that
	// many ms apart can swap places whatever the scheduler picked.
	stall := stallMeter(t)
	start := time.Now()
	e.Start(ctx)
	// Two full cycles: each item syncs twice.
	waitFor(t, 60*time.Second, "two cycles", func() bool {
		n := 0
		for _, ev := range rec.snapshot() {
			if ev.err == nil && !ev.last.IsZero() {
				n++
			}
		}
		return n >= items
	})
	e.Stop(ctx)
	evs := rec.snapshot()

	// Cycle 2 (items that had synced before): served in lastSync order.
	// Workers run concurrently and claim in batches, so allow a window.
	var second []event
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.err == nil && !ev.last.IsZero() && !seen[ev.id] {
			seen[ev.id] = true
			second = append(second, ev)
		}
	}
	slices.SortFunc(second, func(a, b event) int { return a.start.Compare(b.start) })
	byLast := slices.Clone(second)
	slices.SortFunc(byLast, func(a, b event) int { return a.last.Compare(b.last) })
	rank := map[string]int{}
	for i, ev := range byLast {
		rank[ev.id] = i
	}
	// Beyond that, the places served in the longest stall the machine
	// imposed (the whole suite on 2 cores: 58 places at load 10).
	window := 2*workers + 32
	if n := len(second); n > 1 {
		span := second[n-1].start.Sub(second[0].start)
		window += int(float64(n) * stall().Seconds() / max(span.Seconds(), 0.001))
	}
	worst, worstID := 0, ""
	for i, ev := range second {
		if d := abs(rank[ev.id] - i); d > worst {
			worst, worstID = d, ev.id
		}
	}
	if worst > window {
		t.Errorf("%s was served %d places away from its lastSync order (allowed %d, with a longest stall of %v); unrecorded syncs %d, lost leases %d",
			worstID, worst, window, stall().Round(time.Millisecond), e.Metrics().SyncsUnrecorded.Load(), e.Metrics().SyncsLost.Load())
	}

	// Longest wait past due, against the ideal bound: all the work spread
	// over all workers, plus the longest single sync.
	firstDue := start
	var maxWait, waitFirst, waitSecond time.Duration
	for _, ev := range evs {
		if ev.id == "poison" {
			continue
		}
		due := firstDue
		if !ev.last.IsZero() {
			due = ev.last.Add(interval)
			waitSecond = max(waitSecond, ev.start.Sub(due))
		} else {
			waitFirst = max(waitFirst, ev.start.Sub(due))
		}
		maxWait = max(maxWait, ev.start.Sub(due))
	}
	// The ideal: a cycle's work spread evenly over the workers, plus the
	// longest single sync.
	cycleWork := time.Duration(work.Load()) / 2 / workers
	ideal := cycleWork + 60*time.Millisecond
	t.Logf("longest wait past due %v (cycle 1 from a full backlog: %v, cycle 2: %v); ideal bound %v",
		maxWait, waitFirst, waitSecond, ideal)
	if maxWait > ideal*3/2 {
		t.Errorf("longest wait past due %v exceeds 1.5x the ideal bound %v", maxWait, ideal)
	}
	// The poison item failed, backed off and was quarantined.
	fails := 0
	for _, ev := range evs {
		if ev.id == "poison" {
			fails++
		}
	}
	if fails != 4 {
		t.Errorf("poison item tried %d times, want max_attempts = 4", fails)
	}
	if _, q, _ := st.Count(ctx, 10); !slices.Equal(q, []string{"poison"}) {
		t.Errorf("quarantined: %v", q)
	}
	if got := e.Metrics().Quarantined.Load(); got != 1 {
		t.Errorf("metrics: %d quarantined", got)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// A sync whose lease is lost is cancelled with ErrLeaseLost as the cause,
// and its lastSync is never written.
func TestLeaseLossCancelsSyncWithoutLastSync(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	st.Add(ctx, "x")
	causes := make(chan error, 1)
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}}
	// The item is due again at once after the force release, so the
	// engine starts it again; a short drain keeps Stop from waiting on it.
	// Claim-ahead is off: it would claim the item again while the first
	// sync still runs, and that sync would then see its lease taken by
	// that claim, not deleted.
	e := newEngine(t, st, rec, engine.Config{Workers: 1, Poll: 10 * time.Millisecond, DrainTimeout: 100 * time.Millisecond,
		ClaimAhead: engine.ClaimAheadOff, Ownership: ownership.Config{TTL: time.Second}})
	e.Start(ctx)
	waitFor(t, 5*time.Second, "the sync to start", func() bool { return e.Metrics().InFlight.Load() == 1 })
	if _, _, err := st.ForceRelease(ctx, "x"); err != nil { // an admin takes it away
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		var lost *ownership.LeaseLostError
		if !errors.As(cause, &lost) || lost.Reason != ownership.ReasonDeleted {
			t.Errorf("cause %v, want a lease lost as deleted", cause)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("sync not cancelled after its lease was lost")
	}
	e.Stop(ctx)
	if _, last, _ := store.ParseMeta(st.Client().HGet(ctx, st.Keys().Meta(0), "x").Val()); last != 0 {
		t.Errorf("lastSync %d was written for a lost lease", last)
	}
	if got := e.Metrics().SyncsLost.Load(); got < 1 {
		t.Errorf("metrics: %d lost syncs", got)
	}
}

// Stop drains: in-flight syncs finish within drain_timeout or are
// cancelled with ErrShutdown and handed back, so a peer resumes them at
// once instead of after the TTL.
func TestStopHandsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	st.Add(ctx, "a", "b", "c")
	slow := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}}
	cfg := engine.Config{Workers: 3, Poll: 10 * time.Millisecond, DrainTimeout: 200 * time.Millisecond,
		Ownership: ownership.Config{TTL: 30 * time.Second}}
	a := newEngine(t, st, slow, cfg)
	a.Start(ctx)
	waitFor(t, 5*time.Second, "3 syncs in flight", func() bool { return a.Metrics().InFlight.Load() == 3 })
	stopped := time.Now()
	// A Stop that runs past its ctx says so (it returned nil): here the
	// syncs take the 200 ms drain timeout, the ctx 50 ms.
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := a.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop past its ctx: %v, want DeadlineExceeded", err)
	}
	if err := a.Stop(ctx); err != nil { // twice is fine
		t.Errorf("second Stop: %v", err)
	}
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("Stop took %v with drain_timeout 200ms", took)
	}
	if got := a.Metrics().HandedBack.Load(); got != 3 {
		t.Errorf("%d handed back, want 3", got)
	}
	fast := &recorder{}
	b := newEngine(t, st, fast, cfg)
	b.Start(ctx)
	waitFor(t, 2*time.Second, "the peer to sync the handed-back items (ttl is 30s)", func() bool { return len(fast.snapshot()) == 3 })
}

func TestStartStopLifecycle(t *testing.T) {
	t.Parallel()
	st := openStore(t, "", 2)
	e := newEngine(t, st, &recorder{}, engine.Config{})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); !errors.Is(err, engine.ErrStarted) {
		t.Errorf("second Start: %v", err)
	}
	e.Stop(context.Background())
	e.Stop(context.Background())
	if err := e.Start(context.Background()); !errors.Is(err, engine.ErrStopped) {
		t.Errorf("Start after Stop: %v, want ErrStopped", err)
	}
	// A done ctx starts nothing (it used to return nil, and the engine
	// ran); Run with one stops at once, without an error.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	late := newEngine(t, st, &recorder{}, engine.Config{})
	if err := late.Start(done); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a done ctx: %v, want context.Canceled", err)
	}
	if err := late.Start(context.Background()); err != nil {
		t.Errorf("Start after a refused one: %v", err)
	}
	late.Stop(context.Background())
	if err := newEngine(t, st, &recorder{}, engine.Config{}).Run(done); err != nil {
		t.Errorf("Run with a done ctx: %v", err)
	}
	never := newEngine(t, st, &recorder{}, engine.Config{})
	never.Stop(context.Background()) // before Start
	if _, err := never.RunBatch(context.Background(), engine.BatchOptions{}); !errors.Is(err, engine.ErrStopped) {
		t.Errorf("RunBatch after Stop: %v, want ErrStopped", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg   engine.Config
		field string
	}{
		{engine.Config{Workers: -1}, "workers"},
		{engine.Config{Batch: 5000}, "batch"},
		{engine.Config{BackoffMin: time.Minute, BackoffMax: time.Second}, "backoff_max"},
		{engine.Config{Interval: time.Microsecond}, "interval"},
	}
	for _, tt := range tests {
		var ce *engine.ConfigError
		if err := tt.cfg.Validate(); !errors.As(err, &ce) || ce.Field != tt.field {
			t.Errorf("Validate(%+v) = %v, want field %s", tt.cfg, err, tt.field)
		}
	}
	var oe *ownership.ConfigError
	bad := engine.Config{Ownership: ownership.Config{TTL: time.Second, Heartbeat: 2 * time.Second}}
	if err := bad.Validate(); !errors.As(err, &oe) || oe.Field != "heartbeat" {
		t.Errorf("heartbeat >= ttl: %v", err)
	}
	// A nil store panicked after starting goroutines; a nil sink
	// quarantined every item, one recovered panic at a time.
	st := openStore(t, "", 1)
	if e, err := engine.New(nil, &recorder{}, engine.Config{}); err == nil || e != nil {
		t.Errorf("New with a nil store = %v, %v", e, err)
	}
	if e, err := engine.New(st, nil, engine.Config{}); err == nil || e != nil {
		t.Errorf("New with a nil sink = %v, %v", e, err)
	}
	var failed *recorder // a constructor's nil result, its error unchecked
	if e, err := engine.New(st, failed, engine.Config{}); err == nil || e != nil {
		t.Errorf("New with a nil *recorder = %v, %v", e, err)
	}
}

// Batch mode on the embedded store: every item once, then a report.
func TestBatchInProcess(t *testing.T) {
	t.Parallel()
	st := openStore(t, "", 4)
	ctx := context.Background()
	for i := range 200 {
		st.Add(ctx, fmt.Sprintf("b%d", i))
	}
	st.Add(ctx, "bad")
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		if it.ID == "bad" {
			return sinks.Permanent(errors.New("no such customer"))
		}
		return nil
	}}
	e := newEngine(t, st, rec, engine.Config{Workers: 8, Poll: 5 * time.Millisecond})
	var passes atomic.Int32
	rep, err := e.RunBatch(ctx, engine.BatchOptions{ProgressEvery: time.Millisecond, OnProgress: func(engine.Progress) { passes.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Items != 201 || rep.Synced != 200 || rep.Quarantined != 1 || rep.Unsynced != 0 || rep.OK() {
		t.Errorf("report %+v", rep)
	}
	if passes.Load() == 0 {
		t.Error("no progress reported")
	}
	// The items were counted during the run (syncd_items), as a daemon
	// counts them: none were before.
	if c, ok := e.Metrics().Items(); !ok || c.Items != 201 {
		t.Errorf("items counted during the batch run: %+v, %v; want 201", c, ok)
	}
	seen := map[string]int{}
	for _, ev := range rec.snapshot() {
		seen[ev.id]++
	}
	// "bad" twice: its first permanent failure cannot be told from the
	// target's; at its second no other item failed since, so it fails
	// alone and is its own (see engine.BreakerConfig).
	for id, n := range seen {
		if want := map[bool]int{true: 2, false: 1}[id == "bad"]; n != want {
			t.Errorf("%s synced %d times, want %d", id, n, want)
		}
	}
}

// Settle windows of successive claims overlap: with a settle delay the
// scheduler keeps claiming for free workers instead of sleeping through
// each window, so 32 workers fill up in a few windows, not 32/batch.
func TestSettleDoesNotSerialiseClaims(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	for i := range 32 {
		st.Add(ctx, fmt.Sprintf("s%d", i))
	}
	block := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}}
	e := newEngine(t, st, block, engine.Config{Workers: 32, Batch: 4, Poll: 5 * time.Millisecond, DrainTimeout: time.Millisecond,
		Ownership: ownership.Config{TTL: 10 * time.Second, Settle: 200 * time.Millisecond}})
	start := time.Now()
	e.Start(ctx)
	// One window at a time would take 8 x 200ms = 1.6s to fill 32 workers.
	waitFor(t, 5*time.Second, "32 syncs in flight", func() bool { return e.Metrics().InFlight.Load() == 32 })
	if took := time.Since(start); took > time.Second {
		t.Errorf("32 workers took %v to fill with a 200ms settle and batch 4: the settle windows did not overlap", took)
	}
	e.Stop(ctx)
}

// A sink that stopped at the lease's end (sinks.ErrLeaseEnded: the exec
// sink's supervisor, by itself) has the item handed back, not counted
// against it, though the engine's lease lives on. It counted as the
// item's failure (an outside trial: a paused syncd whose heartbeat won
// the race with the lease's timer), and with max_attempts 1 this
// quarantined a healthy item.
func TestSinkLeaseEndedHandsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	st.Add(ctx, "a")
	var calls atomic.Int64
	var attempts []int
	var mu sync.Mutex
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		mu.Lock()
		attempts = append(attempts, it.Attempt)
		mu.Unlock()
		if calls.Add(1) == 1 {
			return fmt.Errorf("exec: item %q: %w, and the supervisor stopped the command: exit status 143", it.ID, sinks.ErrLeaseEnded)
		}
		return nil
	}}
	e := newEngine(t, st, rec, engine.Config{Workers: 1, Poll: 10 * time.Millisecond, MaxAttempts: 1, Interval: time.Hour})
	e.Start(ctx)
	waitFor(t, 5*time.Second, "the second sync", func() bool { return e.Metrics().SyncsOK.Load() == 1 })
	e.Stop(ctx)
	m := e.Metrics()
	if m.SyncsLost.Load() != 1 || m.SyncsFailed.Load() != 0 || m.Quarantined.Load() != 0 {
		t.Errorf("metrics: %d lost, %d failed, %d quarantined; want 1, 0, 0", m.SyncsLost.Load(), m.SyncsFailed.Load(), m.Quarantined.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 1}) {
		t.Errorf("attempts %v, want [1 1]: the stopped sync is not counted", attempts)
	}
}

// An item in flight longer than one ttl is not due: the heartbeat holds
// it in the due index until its lease's new end, as the claim did. With
// every worker busy no claim round runs to move it, and status and the
// metrics read a false backlog ("4 due, 4 in flight").
func TestInFlightPastTTLNotDue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	st.Add(ctx, "a", "b")
	var ended atomic.Bool // set by a sync before it returns
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		defer ended.Store(true)
		select {
		case <-time.After(3 * time.Second): // three ttls
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}}
	// Claim-ahead is off: its claim rounds would move the items out of
	// the due range (store's held) and hide the heartbeat's part.
	e := newEngine(t, st, rec, engine.Config{Workers: 2, Poll: 10 * time.Millisecond, Interval: time.Hour,
		ClaimAhead: engine.ClaimAheadOff, Ownership: ownership.Config{TTL: time.Second}})
	e.Start(ctx)
	waitFor(t, 5*time.Second, "both syncs to start", func() bool { return e.Metrics().InFlight.Load() == 2 })
	start, reads := time.Now(), 0
	for {
		c, err := st.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ended.Load() { // the read may have seen a release
			break
		}
		reads++
		if c.Due != 0 || c.OldestDue != store.NoDue {
			t.Fatalf("%v into the syncs (ttl 1s): %d due, oldest due at %d; want none due while both are in flight",
				time.Since(start).Round(time.Millisecond), c.Due, c.OldestDue)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("a sync ended %v in, before it was past its first ttl", took)
	}
	t.Logf("%d reads, none due", reads)
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
