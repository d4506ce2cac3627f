package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

func idRange(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("c%05d", i))
	}
	return out
}

// The set follows its sources: growth is added, shrinkage removed, but
// items added by hand stay; a source that fails, gives nothing or would
// remove more than max_removal removes nothing, unless forced.
func TestReconcile(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 4)
	ctx := context.Background()
	log := zerolog.New(zerolog.NewTestWriter(t))
	rec := func(ids []string, srcErr error, force bool) engine.ReconcileResult {
		t.Helper()
		source := func(context.Context) ([]string, error) { return ids, srcErr }
		res, err := engine.Reconcile(ctx, st, source, engine.ReconcileOptions{MaxRemoval: 25, Force: force, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	count := func() int {
		n, _, err := st.Count(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if r := rec(idRange(0, 1000), nil, false); r.Added != 1000 || r.Removed != 0 || count() != 1000 {
		t.Fatalf("first reconcile %+v, %d items", r, count())
	}
	st.AddByHand(ctx, "by-hand")
	if r := rec(idRange(0, 1100), nil, false); r.Added != 100 || count() != 1101 {
		t.Fatalf("grow to 1100: %+v, %d items", r, count())
	}
	if r := rec(idRange(0, 900), nil, false); r.Removed != 200 || r.KeptManual != 1 || r.Refused != nil || count() != 901 {
		t.Fatalf("shrink to 900: %+v, %d items", r, count())
	}
	for name, tc := range map[string]struct {
		ids []string
		err error
	}{
		"shrink to 50": {idRange(0, 50), nil},
		"fails":        {idRange(0, 10), errors.New("items.command: exit status 1")},
		"empty":        {nil, nil},
		// Nothing would go, yet the failure is refused, so it is logged
		// and counted (it was not, and the source's items were all
		// there).
		"fails, nothing to remove": {idRange(0, 900), errors.New("items.command: exit status 1")},
	} {
		r := rec(tc.ids, tc.err, false)
		if r.Removed != 0 || !errors.Is(r.Refused, engine.ErrReconcileGuard) || count() != 901 {
			t.Errorf("%s: %+v, %d items; want nothing removed, refused", name, r, count())
		}
	}
	if r := rec(idRange(0, 50), nil, true); r.Removed != 850 || count() != 51 {
		t.Errorf("forced: %+v, %d items", r, count())
	}
}

// A reconciler whose lock was lost (paused, say) is fenced out: once a
// newer reconcile wrote to a shard, an older fence's writes are refused.
func TestReconcileFence(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	if _, err := st.Reconcile(ctx, 0, 20, true, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Reconcile(ctx, 0, 10, false, []string{"a"}); !errors.Is(err, store.ErrReconcileFenced) || n != 0 {
		t.Errorf("an older fence's remove = %d, %v; want ErrReconcileFenced", n, err)
	}
	if n, _, _ := st.Count(ctx, 0); n != 1 {
		t.Errorf("%d items after a fenced-out remove, want 1", n)
	}
}

// A process that is not elected does not read the sources: a fleet runs
// an items command once per round, not once per daemon.
func TestReconcileReadsSourcesOnlyWhenElected(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	ctx := context.Background()
	lk, err := ownership.NewLocker(ownership.LockerConfig{}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.TryLock(ctx, "reconcile")
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	source := func(context.Context) ([]string, error) { read++; return []string{"a"}, nil }
	if _, err := engine.Reconcile(ctx, st, source, engine.ReconcileOptions{MaxRemoval: 10}); !errors.Is(err, engine.ErrNotLeader) || read != 0 {
		t.Errorf("while another holds the lock: %v, sources read %d times; want ErrNotLeader and none", err, read)
	}
	l.Unlock(ctx)
	if res, err := engine.Reconcile(ctx, st, source, engine.ReconcileOptions{MaxRemoval: 10}); err != nil || read != 1 || res.Added != 1 {
		t.Errorf("once the lock is free: %+v, %v, sources read %d times", res, err, read)
	}
}

// A daemon whose first reconcile finds the lock held off (a fresh Redis,
// or one that lost its data: up to a TTL) tries again within seconds, not
// a whole refresh later: with a refresh of an hour a new deployment had
// no items for an hour (tests/items caught it, one run in three).
func TestReconcileHeldOffIsRetriedSoon(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st, err := store.Open(context.Background(), store.Config{Addrs: []string{srv.Addr()},
		KeyPrefix: fmt.Sprintf("e%d", prefixes.Add(1)), Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const hold = 6 * time.Second // past the first round, 2 or 4 s after the start
	for sh := range 2 {
		st.MarkEpoch(context.Background(), sh, hold) // as after data loss: held off for a while
	}
	// The lock itself is held off for as long, and says so.
	lk, err := ownership.NewLocker(ownership.LockerConfig{}, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryLock(context.Background(), "reconcile"); !errors.Is(err, ownership.ErrHeldOff) ||
		!errors.Is(err, ownership.ErrNotObtained) {
		t.Fatalf("TryLock while held off = %v; want ErrHeldOff and ErrNotObtained", err)
	}
	lk.Close()
	// Nobody holds it: a reconcile must not say another process does.
	if _, err := engine.Reconcile(context.Background(), st, func(context.Context) ([]string, error) { return nil, nil },
		engine.ReconcileOptions{MaxRemoval: 10}); !errors.Is(err, ownership.ErrHeldOff) || errors.Is(err, engine.ErrNotLeader) {
		t.Errorf("Reconcile while held off = %v; want ErrHeldOff, not ErrNotLeader", err)
	}
	start := time.Now()
	e, err := engine.New(st, sinks.Func(func(context.Context, sinks.Item) error { return nil }), engine.Config{
		Workers: 1, Interval: time.Hour, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Items: engine.ItemsConfig{Source: func(context.Context) ([]string, error) { return idRange(0, 10), nil },
			Refresh: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer e.Stop(context.Background())
	for {
		n, _, err := st.Count(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if n == 10 {
			break
		}
		if time.Since(start) > hold+15*time.Second {
			t.Fatalf("%d items %v after the start; want the held-off reconcile retried once the hold ended", n, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("items reconciled %v after the start (hold %v)", time.Since(start).Round(100*time.Millisecond), hold)
}
