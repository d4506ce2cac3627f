package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
)

// The claim-ahead tests run over fakeOwn with a settle delay, in synctest
// bubbles: every time below is exact.

// settleFake returns a fake with the given settle delay and n items on one
// shard, item i due since i+1 s before now (so "i000" waits longest).
func settleFake(settle time.Duration, n int) *fakeOwn {
	f := newFakeOwn(1)
	f.cfg.Settle = settle
	for i := range n {
		f.add(0, fmt.Sprintf("i%03d", i), -time.Duration(n-i)*time.Second)
	}
	return f
}

// With a settle delay, claims wait out their settle window without a
// worker: the workers stay busy, so the settle costs one window at the
// start instead of one per item.
func TestAheadKeepsWorkersBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const items, workers = 200, 4
		const settle, hold = 500 * time.Millisecond, 100 * time.Millisecond
		f := settleFake(settle, items)
		sink := &syncLog{hold: hold}
		start := time.Now()
		e := startFake(t, f, sink, Config{Workers: workers, Batch: 8, Interval: time.Hour})
		// Ideal: one settle, then items/workers syncs back to back (5s).
		// Holding a worker through each settle would take 30s.
		ideal := settle + items/workers*hold
		time.Sleep(ideal + 500*time.Millisecond)
		stopped := time.Now()
		e.Stop(context.Background())
		got := sink.order()
		if len(got) != items {
			t.Fatalf("%d of %d synced %v after start; ideal %v", len(got), items, time.Since(start), ideal)
		}
		var last time.Time
		for _, at := range sink.at {
			if at.After(last) {
				last = at
			}
		}
		if took := last.Sub(start) + hold; took > ideal+ideal/10 {
			t.Errorf("all synced after %v, want within 10%% of %v", took, ideal)
		}
		if sink.max != workers {
			t.Errorf("at most %d syncs at once, want %d", sink.max, workers)
		}
		// (Order: TestAheadStartsInDueOrder. Here the first settle
		// window's claims, made on a guess of the sync time, 1/32 of the
		// settle, were more than the workers could start within the
		// bound: those were handed back and synced later.)
		// Once the mean is known, nothing is, after an echo (the first
		// wave's leases, handed back, are the longest waiting, and are
		// claimed again together): no claims made only to be handed back.
		for _, r := range f.releaseLog() {
			if r.kind == ownership.OutcomeHandBack && r.at.Sub(start) > 3*time.Second && r.at.Before(stopped) {
				t.Errorf("%s handed back at +%v, after the start", r.id, r.at.Sub(start))
			}
		}
		t.Logf("%d handed back at the start", e.m.AheadLate.Load())
	})
}

// Claimed-ahead items start longest-waiting first. The claims that
// confirm at one instant (here all of the first settle window's) reach
// the queue one by one: the first to arrive may start first.
func TestAheadStartsInDueOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Syncs as long as the guess the first claims are made on (1/32
		// of the settle): none waits past the bound.
		f := settleFake(320*time.Millisecond, 30)
		sink := &syncLog{hold: 10 * time.Millisecond}
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 4, Interval: time.Hour})
		time.Sleep(3 * time.Second)
		e.Stop(context.Background())
		got := sink.order()
		if len(got) != 30 {
			t.Fatalf("%d of 30 synced", len(got))
		}
		rest := slices.DeleteFunc(slices.Clone(got), func(id string) bool { return id == got[0] })
		if !slices.IsSorted(rest) {
			t.Errorf("sync order %v: after the first, not longest-waiting first", got)
		}
		if n := e.m.AheadLate.Load(); n > 0 {
			t.Errorf("%d handed back for waiting too long, want none", n)
		}
	})
}

// Stop hands back at once every lease that waits for a worker, in its
// place in line, with the syncs cancelled at the drain timeout: nothing
// stays claimed.
func TestAheadStopHandsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := settleFake(200*time.Millisecond, 40)
		due := map[string]int64{}
		for i := range 40 {
			id := fmt.Sprintf("i%03d", i)
			due[id] = f.due(id)
		}
		sink := &syncLog{} // each sync runs until its context ends
		const drain = time.Second
		e := startFake(t, f, sink, Config{Workers: 2, Batch: 4, DrainTimeout: drain, Interval: time.Hour})
		time.Sleep(300 * time.Millisecond) // between a confirm and a bound
		synctest.Wait()
		ahead := len(f.claimed()) - 2 // settling, or waiting for a worker
		e.ahead.mu.Lock()
		queued := len(e.ahead.queue)
		e.ahead.mu.Unlock()
		if queued == 0 {
			e.Stop(context.Background())
			t.Fatalf("%d claimed with 2 workers busy, none waiting for a worker", ahead+2)
		}
		stop := time.Now()
		e.Stop(context.Background())
		if left := f.claimed(); len(left) > 0 {
			t.Errorf("still claimed after Stop: %v", left)
		}
		for id, d := range due {
			if got := f.due(id); got != d {
				t.Errorf("%s due at %d after Stop, want %d (where it was)", id, got, d)
			}
		}
		var atStop, atDrain int
		for _, r := range f.releaseLog() {
			if r.kind != ownership.OutcomeHandBack {
				t.Errorf("%s released as %v, want a hand-back", r.id, r.kind)
			}
			switch r.at.Sub(stop) {
			case 0:
				atStop++
			case drain:
				atDrain++
			}
		}
		if atStop != ahead || atDrain != 2 {
			t.Errorf("handed back %d at Stop and %d at the drain timeout, want %d (claimed ahead) and 2 (syncing)", atStop, atDrain, ahead)
		}
		if n := e.Metrics().HandedBack.Load(); n != int64(queued+2) {
			t.Errorf("HandedBack = %d, want %d", n, queued+2)
		}
	})
}

// timedSink syncs for the duration dur returns, and records when each
// sync started and whether its lease was still trusted then.
type timedSink struct {
	dur func(id string, n int) time.Duration

	mu     sync.Mutex
	starts map[string][]time.Time
	n      int
	dead   []string // started with its context already ended
}

func (s *timedSink) Sync(ctx context.Context, it sinks.Item) error {
	s.mu.Lock()
	if s.starts == nil {
		s.starts = map[string][]time.Time{}
	}
	s.starts[it.ID] = append(s.starts[it.ID], time.Now())
	if ctx.Err() != nil {
		s.dead = append(s.dead, it.ID)
	}
	s.n++
	d := s.dur(it.ID, s.n)
	s.mu.Unlock()
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (s *timedSink) Close() error { return nil }

// A confirmed lease that gets no worker within the bound (the settle
// delay and a mean sync) is handed back, in its place in
// line, and claimed again later: when the workers slow down, nothing
// claimed ahead waits past the bound.
func TestAheadWaitBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const settle = 100 * time.Millisecond
		f := settleFake(settle, 60)
		// Quick syncs, then one that takes 2s: what was claimed for the
		// one worker meanwhile cannot start in time.
		sink := &timedSink{dur: func(id string, n int) time.Duration {
			if n == 10 {
				return 2 * time.Second
			}
			return 10 * time.Millisecond
		}}
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 4, Interval: time.Hour})
		time.Sleep(5 * time.Second)
		e.Stop(context.Background())
		picked := map[string][]time.Time{}
		for _, p := range f.pickLog() {
			for _, id := range p.got {
				picked[id] = append(picked[id], p.at)
			}
		}
		handedBack := 0
		for _, r := range f.releaseLog() {
			if r.kind == ownership.OutcomeHandBack && r.at.Before(time.Now()) {
				handedBack++
			}
		}
		if handedBack == 0 || e.m.AheadLate.Load() == 0 {
			t.Errorf("%d handed back (%d for waiting) while the worker was busy for 2s", handedBack, e.m.AheadLate.Load())
		}
		bound := e.ahead.bound()
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for id, starts := range sink.starts {
			for _, st := range starts {
				// The claim this sync came from: the last pick before it.
				var claimed time.Time
				for _, at := range picked[id] {
					if !at.After(st) {
						claimed = at
					}
				}
				if waited := st.Sub(claimed) - settle; waited > bound {
					t.Errorf("%s waited %v for a worker after its confirm, bound %v", id, waited, bound)
				}
			}
		}
	})
}

// A lease whose trust window closes while it waits for a worker is not
// started: it is handed back (nothing to record) and claimed again.
func TestAheadLostWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The fake renews no lease: one is trusted 200ms past its
		// confirm, less than it may wait for a worker (the settle).
		const settle = 400 * time.Millisecond
		f := settleFake(settle, 20)
		f.cfg.TTL = 600 * time.Millisecond
		sink := &timedSink{dur: func(string, int) time.Duration { return 800 * time.Millisecond }}
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 4, Interval: time.Hour})
		time.Sleep(6 * time.Second)
		e.Stop(context.Background())
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.dead) > 0 {
			t.Errorf("syncs started on leases already lost: %v", sink.dead)
		}
		if e.m.AheadLost.Load() == 0 {
			t.Error("no lease was lost while it waited: the test tests nothing")
		}
		if sink.n < 6 {
			t.Errorf("%d syncs in 6s, want at least 6", sink.n)
		}
	})
}

// With nothing due, claims ahead rest a poll between tries, as rounds
// with nothing to claim do: a claim's outcome is only known once it
// returns, so the scheduler would otherwise claim in a loop.
func TestAheadRestsWhenNothingDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := settleFake(500*time.Millisecond, 0)
		const poll = 250 * time.Millisecond
		e := startFake(t, f, &syncLog{hold: time.Millisecond}, Config{Workers: 4, Poll: poll, Interval: time.Hour})
		time.Sleep(2 * time.Second)
		f.add(0, "late", 0)
		time.Sleep(2 * time.Second)
		e.Stop(context.Background())
		// Each poll, the claims sent before the first empty one returned
		// (a burst, up to the budget); without the rest, the loops would
		// spin. A round with nothing to claim and no settle delay rests
		// 1ms.
		if n := len(f.pickLog()); n > 400 {
			t.Errorf("%d picks in 4s with a poll of %v", n, poll)
		}
		var got time.Time
		for _, p := range f.pickLog() {
			if len(p.got) > 0 {
				got = p.at
			}
		}
		if got.IsZero() {
			t.Fatal("the item added was never claimed")
		}
	})
}

// Without a settle delay and before any sync has ended, claim-ahead holds
// no more than the free workers: a worker a lease is on its way to is not
// free. (The dispatcher gave the lease's budget back before its sync
// counted as running, and a claim loop woken by that took a second item
// for the one busy worker, which then waited a whole sync for it.)
func TestAheadNoMeanClaimsOnlyFreeWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := settleFake(0, 5)
		sink := &syncLog{} // each sync runs until its context ends
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 4, Interval: time.Hour, Poll: 5 * time.Millisecond})
		for range 20 { // many claim rounds' worth of wake-ups
			time.Sleep(50 * time.Millisecond)
			synctest.Wait()
			if got := f.claimed(); len(got) != 1 {
				e.Stop(context.Background())
				t.Fatalf("claimed %v with one worker and no sync ended yet, want one", got)
			}
		}
		e.Stop(context.Background())
	})
}

// With syncs of a microsecond the workers' turn is set by starting and
// ending syncs, not by the sink: claim-ahead sizes its budget and its
// wait bound from the gap between the dispatcher's starts (times the
// workers) when that is longer than the mean sync. From the sync alone 8
// workers got a budget of a thousand leases they could not start within
// the bound: most were handed back (24k in 2 s against 64k synced, bench
// TestZZAhead), and the claims and hand-backs halved the throughput.
func TestAheadBudgetFollowsStartGap(t *testing.T) {
	e := &Engine{cfg: Config{Workers: 8}}
	a := &ahead{e: e, max: 1024}
	a.meanNs.Store(int64(time.Microsecond))
	a.lagNs.Store(int64(time.Millisecond))
	if got := a.limit(); got != 1024 {
		t.Fatalf("limit with no gap measured = %d, want the cap 1024", got)
	}
	a.gapNs.Store(int64(33 * time.Microsecond)) // 30k starts/s
	// A turn of 8 x 33 µs: a lag of 1 ms frees 3.8 turns per worker,
	// plus two leases of slack per worker: 46.
	if got := a.limit(); got < 40 || got > 50 {
		t.Errorf("limit = %d, want about 46: the leases 8 workers start in one lag, and slack", got)
	}
	if got, want := a.bound(), time.Millisecond+8*33*time.Microsecond; got != want {
		t.Errorf("bound = %v, want lag + one turn = %v", got, want)
	}
	// Long syncs: the sync is the turn, whatever the gap.
	a.meanNs.Store(int64(time.Second))
	if got, want := a.bound(), time.Millisecond+time.Second; got != want {
		t.Errorf("bound with 1s syncs = %v, want %v", got, want)
	}
}
