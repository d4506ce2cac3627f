package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/tests/redistest"
)

// overlapSink records every sync and fails the test's check when two
// syncs of one item overlap or a fence does not rise.
type overlapSink struct {
	hold time.Duration

	mu      sync.Mutex
	active  map[string]bool
	fences  map[string]uint64
	count   map[string]int
	starts  []time.Time
	overlap []string
	stale   []string
}

func (s *overlapSink) Sync(ctx context.Context, it sinks.Item) error {
	s.mu.Lock()
	if s.active[it.ID] {
		s.overlap = append(s.overlap, it.ID)
	}
	if it.Fence <= s.fences[it.ID] {
		s.stale = append(s.stale, fmt.Sprintf("%s fence %d after %d", it.ID, it.Fence, s.fences[it.ID]))
	}
	s.active[it.ID], s.fences[it.ID] = true, it.Fence
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	select {
	case <-time.After(s.hold):
	case <-ctx.Done():
	}
	s.mu.Lock()
	delete(s.active, it.ID)
	s.count[it.ID]++
	s.mu.Unlock()
	return context.Cause(ctx)
}

func (s *overlapSink) Close() error { return nil }

func (s *overlapSink) synced(times int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.count {
		if c >= times {
			n++
		}
	}
	return n
}

// With a settle delay, claiming ahead keeps the workers busy on real
// Redis: the first cycle takes about one settle plus the syncs, not one
// settle per item per worker; no item is synced by two workers at once,
// and every sync gets a higher fence than the last.
func TestClaimAheadRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 4)
	ctx := context.Background()
	const items, workers = 160, 8
	const settle, hold = 500 * time.Millisecond, 50 * time.Millisecond
	for i := range items {
		st.Add(ctx, fmt.Sprintf("a%03d", i))
	}
	sink := &overlapSink{hold: hold, active: map[string]bool{}, fences: map[string]uint64{}, count: map[string]int{}}
	e := newEngine(t, st, sink, engine.Config{Workers: workers, Batch: 8, Interval: 2 * time.Second, Poll: 10 * time.Millisecond,
		Ownership: ownership.Config{TTL: 5 * time.Second, Settle: settle}})
	start := time.Now()
	e.Start(ctx)
	// Ideal: 0.5s + 160 x 50ms / 8 = 1.5s. A worker held through each
	// settle: 160 x 550ms / 8 = 11s. A coarse check, not a benchmark.
	waitFor(t, 20*time.Second, "the first cycle", func() bool { return sink.synced(1) == items })
	first := time.Since(start)
	if first > 5*time.Second {
		t.Errorf("first cycle took %v; ideal 1.5s, 11s with workers held through each settle", first)
	}
	waitFor(t, 20*time.Second, "the second cycle", func() bool { return sink.synced(2) == items })
	e.Stop(ctx)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.overlap) > 0 {
		t.Errorf("synced by two workers at once: %v", sink.overlap)
	}
	if len(sink.stale) > 0 {
		t.Errorf("fences that did not rise: %v", sink.stale)
	}
	m := e.Metrics()
	if n := m.SyncsLost.Load() + m.SyncsUnrecorded.Load() + m.SyncsFailed.Load(); n > 0 {
		t.Errorf("%d syncs lost, unrecorded or failed", n)
	}
	t.Logf("first cycle of %d items on %d workers, settle %v, sync %v: %v", items, workers, settle, hold, first.Round(time.Millisecond))
}

// Stop hands back what was claimed ahead as well as the syncs it
// cancels: nothing stays claimed in Redis, every item is due again where
// it was, and a peer syncs them at once, well before the ttl.
func TestClaimAheadStopHandsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	const items = 30
	var ids []string
	for i := range items {
		ids = append(ids, fmt.Sprintf("h%02d", i))
	}
	st.Add(ctx, ids...)
	block := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}}
	cfg := engine.Config{Workers: 2, Batch: 4, Poll: 10 * time.Millisecond, DrainTimeout: 100 * time.Millisecond,
		Ownership: ownership.Config{TTL: 30 * time.Second, Settle: 200 * time.Millisecond}}
	a := newEngine(t, st, block, cfg)
	a.Start(ctx)
	waitFor(t, 5*time.Second, "2 syncs in flight", func() bool { return a.Metrics().InFlight.Load() == 2 })
	time.Sleep(100 * time.Millisecond) // the next claims are confirmed and wait
	claimed := 0
	for _, id := range ids {
		if d, err := st.Item(ctx, id); err == nil && d.LeaseLeft > 0 {
			claimed++
		}
	}
	if claimed <= 2 {
		t.Fatalf("%d items claimed with 2 workers busy: nothing claimed ahead", claimed)
	}
	a.Stop(ctx)
	for _, id := range ids {
		d, err := st.Item(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.LeaseLeft > 0 {
			t.Errorf("%s still claimed after Stop (%v left)", id, d.LeaseLeft)
		}
	}
	due, _, err := st.Backlog(ctx)
	if err != nil || due != items {
		t.Errorf("%d items due after Stop (%v), want all %d", due, err, items)
	}
	fast := &recorder{}
	b := newEngine(t, st, fast, engine.Config{Workers: 8, Poll: 10 * time.Millisecond, Ownership: ownership.Config{TTL: 30 * time.Second}})
	b.Start(ctx)
	// Handed back, the items are due at once; kept, they would wait out
	// the 30s ttl. 10s tells the two apart on a loaded 2-core machine
	// (3s was once too short there, with other suites running).
	waitFor(t, 10*time.Second, "the peer to sync every item (ttl is 30s)", func() bool { return len(fast.snapshot()) == items })
	t.Logf("%d claimed (2 syncing) at Stop; all handed back", claimed)
}
