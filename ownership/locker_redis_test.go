package ownership_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

func newLocker(t *testing.T, cfg ownership.LockerConfig, stores ...ownership.Store) *ownership.Locker {
	t.Helper()
	lk, err := ownership.NewLocker(cfg, stores...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	return lk
}

// markNew declares a new deployment on st: no data was lost, so no
// name is held off (see store.MarkEpoch).
func markNew(t *testing.T, st *store.Store) {
	t.Helper()
	for sh := range st.Keys().Shards() {
		if _, err := st.MarkEpoch(t.Context(), sh, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TTL reads Redis's remaining time, Refresh changes it, metadata is
// stored with the lock and others read it with Inspect.
func TestLockerTTLRefreshMetadata(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	markNew(t, st)
	const lockTTL = 2 * time.Second
	cfg := ownership.LockerConfig{Config: ownership.Config{TTL: lockTTL, Owner: store.Owner{Host: "a", PID: 7, Run: "r"}}}
	lk := newLocker(t, cfg, st)
	other := newLocker(t, ownership.LockerConfig{Config: ownership.Config{TTL: lockTTL}}, st)
	ctx := t.Context()

	if _, err := lk.TryLock(ctx, "stock:42", ownership.WithMetadata(strings.Repeat("x", store.MaxMetadataLen+1))); err == nil {
		t.Error("metadata over the limit was accepted")
	}
	l, err := lk.TryLock(ctx, "stock:42", ownership.WithMetadata("order 17"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Metadata() != "order 17" {
		t.Errorf("Metadata = %q", l.Metadata())
	}
	if d, err := l.TTL(ctx); err != nil || d <= lockTTL-time.Second || d > lockTTL {
		t.Errorf("TTL = %v, %v; want just under %v", d, err, lockTTL)
	}
	info, err := other.Inspect(ctx, "stock:42")
	if err != nil || info == nil {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if info.Metadata != "order 17" || info.Fence != l.Fence() || info.Owner != l.Owner() || info.TTL <= 0 || info.Since.IsZero() {
		t.Errorf("Inspect = %+v; want the holder's metadata, fence %d and owner %v", info, l.Fence(), l.Owner())
	}

	// A longer TTL, kept by the watchdog.
	if err := l.Refresh(ctx, 5*lockTTL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lockTTL) // past a renewal (every lockTTL/3)
	if d, _ := l.TTL(ctx); d <= 4*lockTTL {
		t.Errorf("TTL after Refresh(%v) and a renewal = %v", 5*lockTTL, d)
	}
	// A shorter one.
	if err := l.Refresh(ctx, lockTTL); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.TTL(ctx); d > lockTTL {
		t.Errorf("TTL after Refresh(%v) = %v", lockTTL, d)
	}
	if until := time.Until(l.Expiry()); until > lockTTL {
		t.Errorf("trust window %v after Refresh(%v)", until, lockTTL)
	}
	// A negative TTL is refused, and leaves the lock as it was (the
	// refusal once returned with the lease's mutex still held, and the
	// next call on the lock hung).
	if err := l.Refresh(ctx, -time.Millisecond); err == nil || !strings.Contains(err.Error(), "is negative") {
		t.Errorf("Refresh(-1ms) = %v, want a refusal", err)
	}
	expiry := make(chan time.Time, 1)
	go func() { expiry <- l.Expiry() }()
	select {
	case <-expiry:
	case <-time.After(5 * time.Second):
		t.Fatal("the lock hangs after a refused Refresh")
	}

	if code, err := l.Unlock(ctx); code != store.Released || err != nil {
		t.Fatalf("Unlock = %v, %v", code, err)
	}
	if d, err := l.TTL(ctx); d != 0 || err != nil {
		t.Errorf("TTL after Unlock = %v, %v; want 0", d, err)
	}
	if info, err := other.Inspect(ctx, "stock:42"); info != nil || err != nil {
		t.Errorf("Inspect after Unlock = %+v, %v; want nil", info, err)
	}
	if err := l.Refresh(ctx, 0); !errors.Is(err, ownership.ErrNotHeld) {
		t.Errorf("Refresh after Unlock = %v, want ErrNotHeld", err)
	}
	// Someone else's lock under the name is not ours: TTL 0.
	l2, err := other.TryLock(ctx, "stock:42")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock(ctx)
	if d, err := l.TTL(ctx); d != 0 || err != nil {
		t.Errorf("TTL of a lock now someone else's = %v, %v; want 0", d, err)
	}
	if info, _ := lk.Inspect(ctx, "stock:42"); info == nil || info.Metadata != "" || info.Fence != l2.Fence() {
		t.Errorf("Inspect of a lock without metadata = %+v", info)
	}
}

// A Redis that restarted without persistence forgot every lock. A Locker
// holds a name off, as the engine holds claims off, until no lease
// granted before the restart can still be trusted: another owner never
// gets the lock while the first one's Context is still open. It used to
// hand the lock over at once, 2.7 s before the first lease ended.
func TestLockerHoldsOffAfterRedisLostData(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	stA, stB := openStore(t, srv.Addr(), "lost"), openStore(t, srv.Addr(), "lost")
	markNew(t, stA)
	const lockTTL = 2 * time.Second
	// Renewals every second: the holder learns of the loss late, as a
	// holder whose renewals fail would.
	cfg := ownership.LockerConfig{Config: ownership.Config{TTL: lockTTL, Heartbeat: lockTTL / 2}}
	a, b := newLocker(t, cfg, stA), newLocker(t, cfg, stB)
	ctx := t.Context()
	la, err := a.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	srv.Restart(t) // no persistence: the lock, its fence counter and the epoch markers are gone
	restarted := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 4*lockTTL)
	defer cancel()
	lb, err := b.Lock(lctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(ctx)
	if la.Err() == nil {
		t.Fatalf("b got the lock %v after the restart while a's lease was still open (until %v from then)",
			time.Since(restarted), la.Expiry().Sub(restarted))
	}
	if lb.Fence() <= la.Fence() {
		t.Errorf("fence %d after %d", lb.Fence(), la.Fence())
	}
}

// A server listed twice would vote twice: with [a, a, b] and [c, c, b],
// two Lockers each reached a majority on their own server and both held
// one name (an API user's trial). NewLocker refuses the list instead.
func TestLockerRefusesServerTwice(t *testing.T) {
	t.Parallel()
	srvA, srvB := redistest.Start(t, nil), redistest.Start(t, nil)
	a, a2, b := openStore(t, srvA.Addr(), ""), openStore(t, srvA.Addr(), ""), openStore(t, srvB.Addr(), "")
	cfg := ownership.LockerConfig{Config: ownership.Config{TTL: time.Second}}
	var nilStore *store.Store
	for name, stores := range map[string][]ownership.Store{
		"same store":   {a, a, b},
		"same address": {a, b, a2},
		"nil":          {a, nil, b},
		"typed nil":    {a, nilStore, b},
	} {
		lk, err := ownership.NewLocker(cfg, stores...)
		var ce *ownership.ConfigError
		if !errors.As(err, &ce) || ce.Field != "stores" {
			t.Errorf("%s: NewLocker = %v, %v; want a ConfigError of stores", name, lk, err)
		}
		if lk != nil {
			lk.Close()
		}
	}
	lk := newLocker(t, cfg, a, b)
	if lk == nil {
		t.Fatal("two servers refused")
	}
}

// A name held off after data loss says for how long, as a claim does: a
// *HoldError in the error (it had only ErrHeldOff, no duration).
func TestLockerHeldOffSaysHowLong(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil) // just started, no epoch marker: held off
	st := openStore(t, srv.Addr(), "")
	lk := newLocker(t, ownership.LockerConfig{Config: ownership.Config{TTL: 3 * time.Second}}, st)
	_, err := lk.TryLock(t.Context(), "job")
	var hold *ownership.HoldError
	if !errors.Is(err, ownership.ErrHeldOff) || !errors.Is(err, ownership.ErrNotObtained) || !errors.As(err, &hold) {
		t.Fatalf("TryLock on a fresh Redis = %v; want ErrHeldOff, ErrNotObtained and a *HoldError", err)
	}
	if hold.For <= 0 || hold.For > 3*time.Second || hold.Shard != st.Keys().Shard("job") {
		t.Errorf("HoldError = %+v; want up to 3s, shard %d", hold, st.Keys().Shard("job"))
	}
}

// A Lock waiting for a name this Locker holds gets it as soon as the
// holder unlocks, not after its backoff (an API user's trial: up to
// RetryMax, 500ms by default, of idle wait per hand-over); Close wakes
// waiters too, which then end with ErrClosed.
func TestLockWokenByLocalUnlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	markNew(t, st)
	// A backoff far longer than the test's contexts: only a wake-up can
	// let a waiter in in time.
	lk := newLocker(t, ownership.LockerConfig{Config: ownership.Config{TTL: 30 * time.Second},
		RetryMin: time.Minute, RetryMax: time.Minute}, st)
	ctx := t.Context()

	held, err := lk.TryLock(ctx, "stock:1")
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	got := make(chan error, waiters)
	for range waiters {
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := lk.Lock(wctx, "stock:1")
			if err == nil {
				_, err = l.Unlock(ctx) // and hands it on
			}
			got <- err
		}()
	}
	time.Sleep(200 * time.Millisecond) // each has tried once, and sleeps
	if _, err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-got; err != nil {
			t.Errorf("waiter: %v", err)
		}
	}

	// Close wakes a waiter, which ends with ErrClosed, not ctx's end.
	if _, err := lk.TryLock(ctx, "stock:2"); err != nil {
		t.Fatal(err)
	}
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := lk.Lock(wctx, "stock:2")
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	lk.Close()
	if err := <-got; !errors.Is(err, ownership.ErrClosed) {
		t.Errorf("waiter at Close: %v, want ErrClosed", err)
	}
}

// A goroutine that unlocks and locks again at once does not take the
// name back ahead of a waiter: the waiter gets it next, and the other
// after it. Before, the waiter's turn came after 1 to 20 of the other's
// (an API user's trial); here, after every one of 20.
func TestLockHandsOffToWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	markNew(t, st)
	lk := newLocker(t, ownership.LockerConfig{Config: ownership.Config{TTL: 30 * time.Second},
		RetryMin: time.Minute, RetryMax: time.Minute}, st)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	held, err := lk.TryLock(ctx, "stock:1")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
	)
	turn := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	waiterDone := make(chan error, 1)
	go func() {
		l, err := lk.Lock(ctx, "stock:1")
		if err == nil {
			turn("waiter")
			_, err = l.Unlock(ctx)
		}
		waiterDone <- err
	}()
	time.Sleep(200 * time.Millisecond) // it has tried once, and waits
	for range 20 {
		if _, err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if held, err = lk.Lock(ctx, "stock:1"); err != nil {
			t.Fatalf("relock: %v", err)
		}
		turn("relocker")
	}
	held.Unlock(ctx)
	if err := <-waiterDone; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if len(order) != 21 || order[0] != "waiter" {
		t.Errorf("turns = %v; want the waiter's first", order)
	}
}

// A Locker's error names the lock once, as its outermost layer: it said
// it two to four times (`ownership: lock "x": store: lock "x": dial tcp
// ...`, a `store: lock "x"` line per server of a quorum, and a Lock that
// gave up quoted its last try's error, name and all). What errors.Is
// and errors.As find stays.
func TestLockerErrorsNameTheLockOnce(t *testing.T) {
	t.Parallel()
	srvs := make([]*redistest.Server, 3)
	stores := make([]ownership.Store, 3)
	for i := range srvs {
		srvs[i] = redistest.Start(t, nil)
		st := openStore(t, srvs[i].Addr(), "")
		if i > 0 {
			markNew(t, st) // the first is held off: a fresh Redis
		}
		stores[i] = st
	}
	cfg := ownership.LockerConfig{Config: ownership.Config{TTL: 2 * time.Second}, RetryMin: time.Millisecond, RetryMax: time.Millisecond}
	fresh := newLocker(t, cfg, stores[0])
	one := newLocker(t, cfg, stores[1])
	quorum := newLocker(t, cfg, stores[1:]...)
	ctx := t.Context()
	check := func(what, name string, err error, targets ...error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if n := strings.Count(err.Error(), strconv.Quote(name)); n != 1 {
			t.Errorf("%s: the name %d times in %q", what, n, err)
		}
		for _, target := range targets {
			if !errors.Is(err, target) {
				t.Errorf("%s: %q does not match %v", what, err, target)
			}
		}
	}

	held, err := one.TryLock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	_, err = one.Lock(ctx, "held", ownership.LimitTries(2))
	check("Lock of a name this Locker holds", "held", err, ownership.ErrNotObtained)
	_, err = quorum.TryLock(ctx, "held")
	check("quorum TryLock of a held name", "held", err, ownership.ErrNotObtained)
	_, err = quorum.Lock(ctx, "held", ownership.LimitTries(2))
	check("quorum Lock of a held name", "held", err, ownership.ErrNotObtained)
	_, err = fresh.Lock(ctx, "job", ownership.LimitTries(2))
	check("Lock held off", "job", err, ownership.ErrNotObtained, ownership.ErrHeldOff)
	if hold := new(ownership.HoldError); !errors.As(err, &hold) {
		t.Errorf("Lock held off: %q has no *HoldError", err)
	}

	for _, srv := range srvs {
		srv.Kill(t)
	}
	_, err = one.TryLock(ctx, "gone")
	check("TryLock, Redis gone", "gone", err, syscall.ECONNREFUSED)
	if errors.Is(err, ownership.ErrNotObtained) {
		t.Errorf("TryLock, Redis gone: %q matches ErrNotObtained; want the Redis error as it is", err)
	}
	_, err = one.Lock(ctx, "gone", ownership.LimitTries(1))
	check("Lock, Redis gone", "gone", err, ownership.ErrNotObtained, syscall.ECONNREFUSED)
	_, err = quorum.TryLock(ctx, "gone")
	check("quorum TryLock, Redis gone", "gone", err, ownership.ErrNotObtained)
	_, err = quorum.Lock(ctx, "gone", ownership.LimitTries(2))
	check("quorum Lock, Redis gone", "gone", err, ownership.ErrNotObtained)
	if code, err := held.Unlock(ctx); code != store.NotHeld {
		t.Errorf("Unlock, Redis gone = %v, %v; want NotHeld", code, err)
	} else {
		check("Unlock, Redis gone", "held", err)
	}
	for _, srv := range srvs {
		srv.Restart(t) // let go-redis's dial retries end before goleak looks
	}
}
