package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// pipeTally counts what the traffic saw, and every violation.
type pipeTally struct {
	locks, claims, unknown atomic.Int64
	mu                     sync.Mutex
	bad                    []string
	errs                   map[string]int // the calls that failed, by error
}

// failed counts a call that failed after go-redis's retries; not one cut
// short by the end of the traffic (ctx).
func (c *pipeTally) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.unknown.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.errs == nil {
		c.errs = map[string]int{}
	}
	c.errs[err.Error()]++
}

func (c *pipeTally) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) < 20 {
		c.bad = append(c.bad, fmt.Sprintf(format, args...))
	}
}

// exclusive is in-process ownership of names, and the last fence each was
// held with: a second holder at once is double ownership, and a fence
// that does not rise is a stale one.
type exclusive struct {
	mu     sync.Mutex
	holder map[string]string
	fence  map[string]uint64
}

func (e *exclusive) take(name, who string, fence uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if h, ok := e.holder[name]; ok {
		return fmt.Errorf("%q held by %s and %s at once", name, h, who)
	}
	if last := e.fence[name]; fence <= last {
		return fmt.Errorf("%q: fence %d after %d", name, fence, last)
	}
	e.holder[name], e.fence[name] = who, fence
	return nil
}

func (e *exclusive) give(name string) {
	e.mu.Lock()
	delete(e.holder, name)
	e.mu.Unlock()
}

// TestAutoPipelineCutMidBatch runs Locker and claim/release traffic
// through the auto-pipeliner while a proxy cuts connections mid-batch, so
// go-redis re-sends whole batches that Redis has already run (or not).
// It checks that a lock the caller holds is never reported not obtained,
// a release of a held lock or claim never reports the lease ended first,
// and nothing is owned twice (fences rise; the records in Redis agree).
func TestAutoPipelineCutMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server; skipped with -short")
	}
	for _, v := range []struct {
		name          string
		after, before float64
	}{
		{"cut-after-forwarding", 0.04, 0},
		{"cut-before-forwarding", 0, 0.04},
		{"both", 0.03, 0.02},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			runCutTraffic(t, v.after, v.before, 3*time.Second)
		})
	}
}

func runCutTraffic(t *testing.T, after, before float64, d time.Duration) {
	srv := redistest.Start(t, nil)
	px := newProxy(t, srv.Addr())
	const shards = 2
	open := func(addr string, pipe bool) *store.Store {
		st, err := store.Open(t.Context(), store.Config{Addrs: []string{addr}, KeyPrefix: "ap", Shards: shards,
			AutoPipeline: pipe, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	direct := open(srv.Addr(), false) // reads records without cuts
	piped := open(px.Addr(), true)
	items := make([]string, 16)
	for i := range items {
		items[i] = fmt.Sprintf("item-%d", i)
	}
	if _, err := direct.Add(t.Context(), items...); err != nil {
		t.Fatal(err)
	}
	for sh := range shards {
		if _, err := direct.MarkEpoch(t.Context(), sh, 0); err != nil { // no hold-off on a fresh Redis
			t.Fatal(err)
		}
	}
	var tally pipeTally
	ex := &exclusive{holder: map[string]string{}, fence: map[string]uint64{}}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	px.arm(after, before)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() { lockTraffic(ctx, t, g, piped, direct, ex, &tally) })
	}
	for g := range 4 {
		wg.Go(func() { claimTraffic(ctx, t, g, items, piped, direct, ex, &tally) })
	}
	wg.Wait()
	px.disarm()
	t.Logf("%d lock cycles, %d claim cycles, %d calls that failed after go-redis's retries; cuts: %d after Redis replied, %d before forwarding",
		tally.locks.Load(), tally.claims.Load(), tally.unknown.Load(), px.cutAfter.Load(), px.cutBefore.Load())
	for e, n := range tally.errs {
		t.Logf("%d× %s", n, e)
	}
	for _, b := range tally.bad {
		t.Error(b)
	}
	if px.cutAfter.Load()+px.cutBefore.Load() == 0 || tally.locks.Load() == 0 || tally.claims.Load() == 0 {
		t.Errorf("the traffic did not run into cuts: nothing was tested")
	}
	if after > 0 && px.cutAfter.Load() == 0 {
		t.Errorf("no connection was cut after Redis replied")
	}
}

// lockTraffic takes and releases one of a few shared names in a loop,
// with a Locker of its own over the auto-pipelined store.
func lockTraffic(ctx context.Context, t *testing.T, g int, piped, direct *store.Store, ex *exclusive, tally *pipeTally) {
	lk, err := ownership.NewLocker(ownership.LockerConfig{Config: ownership.Config{TTL: 5 * time.Second,
		Owner: store.Owner{Host: "locker", PID: g, Run: "cut"}}}, piped)
	if err != nil {
		t.Error(err)
		return
	}
	defer lk.Close()
	who := fmt.Sprintf("locker %d", g)
	for n := 0; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("lock-%d", rand.N(4))
		md := fmt.Sprintf("%d/%d", g, n) // names this attempt in Redis
		l, err := lk.TryLock(ctx, name, ownership.WithMetadata(md))
		switch {
		case errors.Is(err, ownership.ErrNotObtained) && !store.IsUnavailable(err):
			if rec, _, rerr := direct.ReadLock(context.Background(), name); rerr == nil && rec != nil && rec.Metadata == md {
				tally.fail("%s: %q reported not obtained, but Redis holds it for this attempt", who, name)
			}
			continue
		case err != nil:
			tally.failed(ctx, err)
			continue
		}
		if err := ex.take(name, who, l.Fence()); err != nil {
			tally.fail("%s: %v", who, err)
		}
		if rec, _, rerr := direct.ReadLock(context.Background(), name); rerr != nil || rec == nil || rec.Token != l.Token() || rec.Fence != l.Fence() {
			tally.fail("%s: holds %q with fence %d, Redis has %+v (%v)", who, name, l.Fence(), rec, rerr)
		}
		ex.give(name)
		lost := l.Err()
		code, err := l.Unlock(context.Background())
		switch {
		case err != nil:
			tally.failed(ctx, err)
		case code != store.Released && lost == nil:
			tally.fail("%s: unlock of %q it held = %v: a false lease-lost", who, name, code)
		default:
			tally.locks.Add(1)
		}
	}
}

// claimTraffic claims items (by id, or the longest waiting) with a Manager
// of its own over the auto-pipelined store, and releases them synced.
func claimTraffic(ctx context.Context, t *testing.T, g int, items []string, piped, direct *store.Store, ex *exclusive, tally *pipeTally) {
	m, err := ownership.New(piped, ownership.Config{TTL: 5 * time.Second,
		Owner: store.Owner{Host: "claimer", PID: g, Run: "cut"}})
	if err != nil {
		t.Error(err)
		return
	}
	defer m.Close()
	who := fmt.Sprintf("claimer %d", g)
	keys := piped.Keys()
	for n := 0; ctx.Err() == nil; n++ {
		var leases []*ownership.Lease
		shard := n % keys.Shards()
		if g%2 == 0 {
			id := items[rand.N(len(items))]
			leases, err = m.ClaimIDs(ctx, ownership.ClaimIDsParams{Shard: keys.Shard(id), IDs: []string{id}})
		} else {
			var res *ownership.ClaimPickResult
			if res, err = m.ClaimPick(ctx, ownership.ClaimPickParams{Shard: shard, Workers: []int{0, 1}}); err == nil {
				leases = res.Leases
			}
		}
		if err != nil {
			tally.failed(ctx, err)
			continue
		}
		outs := make([]ownership.Outcome, len(leases))
		lost := make([]error, len(leases))
		for i, l := range leases {
			outs[i] = ownership.Outcome{Kind: ownership.OutcomeSynced}
			lost[i] = l.Err()
			if err := ex.take(l.ID(), who, l.Fence()); err != nil {
				tally.fail("%s: %v", who, err)
			}
			rec, rerr := direct.ReadRecord(context.Background(), keys.Record(l.Shard(), l.ID()))
			if rerr != nil || rec == nil || rec.Token != l.Token() || rec.Fence != l.Fence() {
				tally.fail("%s: holds %q with fence %d, Redis has %+v (%v)", who, l.ID(), l.Fence(), rec, rerr)
			}
			ex.give(l.ID())
		}
		if len(leases) == 0 {
			continue
		}
		for i, r := range m.Release(context.Background(), leases, outs) {
			switch {
			case r.Err != nil:
				tally.failed(ctx, r.Err)
			case r.Code != store.Released && lost[i] == nil:
				tally.fail("%s: release of %q it held = %v: a false lease-lost", who, leases[i].ID(), r.Code)
			default:
				tally.claims.Add(1)
			}
		}
	}
}
