package ownership

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncd/syncd/store"
)

// The cases of bsm/redislock's and go-redsync's own suites that the
// Locker failed (issue #15), over the fake store in synctest bubbles.

// redisClock is a view whose Lock answers as Redis does at millisecond
// resolution: a key that expires at E is still there while the clock
// reads E (until E+1ms), and PTTL is rounded down, so in a lease's last
// millisecond Redis says "held, 0 ms left".
type redisClock struct {
	*view
}

func (r redisClock) Lock(ctx context.Context, name string, rec *store.Record, ttl time.Duration) (store.LockResult, error) {
	r.fakeStore.mu.Lock()
	cur, ok := r.recs[r.keys.Lock(name)]
	r.fakeStore.mu.Unlock()
	if left := time.Until(cur.expires); ok && cur.tok != rec.Token && left > -time.Millisecond {
		return store.LockResult{Wait: max(left, 0).Truncate(time.Millisecond)}, nil
	}
	return r.view.Lock(ctx, name, rec, ttl)
}

// A waiter comes back just after the holder's lease ends, also when
// Redis reports 0 ms left for a key that is still there. It used to
// sleep a whole backoff then (up to RetryMax): 5 of 30 handovers came
// 289-764 ms late.
func TestLockRetriesInLeasesLastMillisecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		cfg := LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}
		a, err := NewLocker(cfg, redisClock{f.view()})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewLocker(cfg, redisClock{f.view()})
		defer b.Close()
		ctx := t.Context()
		for i := range 30 {
			start := time.Now()
			if _, err := a.TryLock(ctx, "job"); err != nil {
				t.Fatal(err)
			}
			// a stops renewing without unlocking: the record expires at
			// start + ttl, and Redis drops it a millisecond later.
			a.Close()
			gone := start.Add(ttl + time.Millisecond)
			lb, err := b.Lock(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			if late := time.Since(gone); late > 2*time.Millisecond {
				t.Fatalf("handover %d came %v after the key was gone, want within 2ms", i, late)
			}
			lb.Unlock(ctx)
			a, _ = NewLocker(cfg, redisClock{f.view()})
		}
		a.Close()
	})
}

// A failed TryLock returns a nil *Lock; calling Unlock (or Refresh, TTL)
// on it, as `defer l.Unlock(ctx)` before the error check does, reports
// ErrNotHeld instead of panicking. redislock allows Release on it too.
func TestNilLockCallsReportNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		cfg := LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}
		a, _ := NewLocker(cfg, f.view())
		defer a.Close()
		b, _ := NewLocker(cfg, f.view())
		defer b.Close()
		ctx := t.Context()
		if _, err := a.TryLock(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		l, err := b.TryLock(ctx, "job")
		if !errors.Is(err, ErrNotObtained) || l != nil {
			t.Fatalf("TryLock of a held lock = %v, %v", l, err)
		}
		if code, err := l.Unlock(ctx); code != store.NotHeld || !errors.Is(err, ErrNotHeld) {
			t.Errorf("Unlock of nil = %v, %v; want not held, ErrNotHeld", code, err)
		}
		if err := l.Refresh(ctx, ttl); !errors.Is(err, ErrNotHeld) {
			t.Errorf("Refresh of nil = %v, want ErrNotHeld", err)
		}
		if d, err := l.TTL(ctx); d != 0 || !errors.Is(err, ErrNotHeld) {
			t.Errorf("TTL of nil = %v, %v; want 0, ErrNotHeld", d, err)
		}
		if l.Holds() != 0 || l.Name() != "" || l.Metadata() != "" {
			t.Errorf("accessors of nil = %d, %q, %q", l.Holds(), l.Name(), l.Metadata())
		}
	})
}

// Lock gives up with an error that wraps ErrNotObtained as well as why:
// the context's error (redislock v0.10), or the tries running out.
func TestLockGivesUpWithErrNotObtained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		cfg := LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}
		a, _ := NewLocker(cfg, f.view())
		defer a.Close()
		v := &countingView{view: f.view()}
		b, _ := NewLocker(cfg, v)
		defer b.Close()
		if _, err := a.TryLock(t.Context(), "job"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), ttl/2)
		defer cancel()
		_, err := b.Lock(ctx, "job")
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock past its deadline = %v; want ErrNotObtained and DeadlineExceeded", err)
		}
		ctx, cancel = context.WithCancel(t.Context())
		cancel()
		if _, err := b.Lock(ctx, "job"); !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Errorf("Lock with a cancelled context = %v; want ErrNotObtained and Canceled", err)
		}
		v.n = 0
		start := time.Now()
		_, err = b.Lock(t.Context(), "job", LimitTries(3))
		if !errors.Is(err, ErrNotObtained) || v.n != 3 {
			t.Errorf("Lock with LimitTries(3) = %v after %d tries; want ErrNotObtained after 3", err, v.n)
		}
		if time.Since(start) >= ttl {
			t.Errorf("3 tries took %v", time.Since(start))
		}
	})
}

type countingView struct {
	*view
	n int
}

func (c *countingView) Lock(ctx context.Context, name string, rec *store.Record, ttl time.Duration) (store.LockResult, error) {
	c.n++
	return c.view.Lock(ctx, name, rec, ttl)
}

// A quorum with a majority of servers down is not obtained, and the
// servers' errors stay visible in the error. It used to return the bare
// Redis error.
func TestQuorumDownIsNotObtained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stores []Store
		for i := range 3 {
			v := newFakeStore().view()
			if i < 2 {
				v.extendErr = errUnreachable
			}
			stores = append(stores, v)
		}
		lk, err := NewLocker(LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}, stores...)
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Close()
		_, err = lk.TryLock(t.Context(), "q")
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, errUnreachable) {
			t.Errorf("TryLock with 2 of 3 down = %v; want ErrNotObtained wrapping the servers' error", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), ttl)
		defer cancel()
		if _, err = lk.Lock(ctx, "q"); !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock with 2 of 3 down = %v; want ErrNotObtained and DeadlineExceeded", err)
		}
	})
}

// Refresh with a longer TTL is what the watchdog renews with from then
// on; with a shorter one the trust window shrinks at once.
func TestRefreshChangesTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		v := f.view()
		lk, _ := NewLocker(LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}, v)
		defer lk.Close()
		ctx := t.Context()
		l, err := lk.TryLock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Refresh(ctx, 4*ttl); err != nil {
			t.Fatal(err)
		}
		if got, want := time.Until(l.Expiry()), 4*ttl-4*margin; got != want {
			t.Errorf("trust window after Refresh(4 ttl) = %v, want %v (margin scaled)", got, want)
		}
		time.Sleep(beat + time.Millisecond) // one watchdog renewal
		f.mu.Lock()
		left := time.Until(f.recs[f.keys.Lock("job")].expires)
		f.mu.Unlock()
		if left != 4*ttl-time.Millisecond {
			t.Errorf("after a renewal the record has %v left, want the refreshed ttl", left)
		}
		if err := l.Refresh(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if got, want := time.Until(l.Expiry()), 2*time.Second-200*time.Millisecond; got != want {
			t.Errorf("trust window after Refresh(2s) = %v, want %v", got, want)
		}
		if err := l.Refresh(ctx, beat); err == nil {
			t.Error("Refresh to a ttl the watchdog cannot keep up with succeeded")
		}
		f.stealLock("job")
		if err := l.Refresh(ctx, 0); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLeaseLost) || l.Err() == nil {
			t.Errorf("Refresh of a stolen lock = %v (lease %v); want ErrNotHeld and a lost lease", err, l.Err())
		}
	})
}

// stealLock replaces a lock's record with another owner's.
func (f *fakeStore) stealLock(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := f.keys.Lock(name)
	r := f.recs[key]
	r.tok = store.NewToken()
	f.recs[key] = r
}
