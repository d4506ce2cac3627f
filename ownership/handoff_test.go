package ownership

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncd/syncd/store"
)

// A waiter whose backoff ran out just as the name was given back is a
// woken waiter all the same: its next try goes ahead of later callers.
// Before, it came back as not woken, and queued behind the hand-off it
// was itself given, as did the caller that had unlocked: nobody tried
// until the hand-off expired (an outside trial: relocks of 510-936 ms).
func TestHandOffToWaiterWhoseBackoffEnded(t *testing.T) {
	lk, err := NewLocker(LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}, newFakeStore().view())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	w, queued := lk.waitFor("n", false) // a waiting attempt...
	if queued {
		t.Fatal("first attempt queued")
	}
	lk.wake("n") // ...whose backoff ran out as the name was given back
	if !lk.leave("n", w, false, false) {
		t.Fatal("leave after a give-back: not woken")
	}
	if _, queued := lk.waitFor("n", true); queued {
		t.Error("the woken waiter's next attempt is queued behind its own hand-off")
	}
	if _, queued := lk.waitFor("n", false); !queued {
		t.Error("a later caller is not queued behind the woken waiter")
	}
}

// A woken waiter whose Lock ends without trying (its ctx ended as it
// was woken) hands the name on: the callers queued behind it are woken
// to try at once, not when the hand-off expires. Before, they stalled
// for RetryMax (an outside trial: 525-934 ms with the default 500 ms,
// 3.7 s with 3 s).
func TestHandOffEndsWithWaiter(t *testing.T) {
	lk, err := NewLocker(LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}, newFakeStore().view())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	w, _ := lk.waitFor("n", false)
	lk.wake("n")
	later, queued := lk.waitFor("n", false)
	if !queued {
		t.Fatal("a later caller is not queued behind the woken waiter")
	}
	lk.leave("n", w, true, false) // the woken waiter's Lock ends, without the lock
	select {
	case <-later.ch:
	default:
		t.Fatal("the caller queued behind it is not woken")
	}
	if !lk.leave("n", later, false, false) {
		t.Error("the queued caller's wait does not count as woken")
	}
	if _, queued := lk.waitFor("n", true); queued {
		t.Error("the queued caller, now woken, is queued again")
	}
}

// LimitTries counts tries: a call that waits its turn behind woken
// waiters without trying does not use one up. Before, LimitTries(1)
// right after an Unlock, with a waiter, made one try and reported 2.
func TestLimitTriesCountsOnlyTries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		cfg := LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat},
			RetryMin: time.Millisecond, RetryMax: time.Millisecond}
		lk, _ := NewLocker(cfg, f.view())
		defer lk.Close()
		other, _ := NewLocker(cfg, f.view())
		defer other.Close()
		ctx := t.Context()
		held, _ := lk.TryLock(ctx, "n")
		w, _ := lk.waitFor("n", false) // a waiter, which never tries
		held.Unlock(ctx)               // hands the name to it
		if _, err := other.TryLock(ctx, "n"); err != nil {
			t.Fatal(err)
		}
		_, err := lk.Lock(ctx, "n", LimitTries(1))
		lk.leave("n", w, true, false)
		if err == nil || !strings.Contains(err.Error(), "1 try, the last:") {
			t.Fatalf("Lock with 1 try behind a hand-off, the name held elsewhere: %v; want 1 try", err)
		}
	})
}

// answerLost is a view whose Lock is done but whose answer is lost (the
// caller's ctx ended during the round trip, a timeout).
type answerLost struct{ *view }

func (v answerLost) Lock(ctx context.Context, name string, rec *store.Record, ttl time.Duration) (store.LockResult, error) {
	v.view.Lock(ctx, name, rec, ttl)
	return store.LockResult{}, context.DeadlineExceeded
}

// A single-server TryLock whose answer is lost unlocks with its token,
// as a quorum does where no answer came: the name is free at once, not
// held for a TTL by a lock nobody has. Before, an outside trial's TryLock
// with a 25µs ctx left the name held 5 s.
func TestLostLockReplyIsUnlocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		cfg := LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}
		lk, _ := NewLocker(cfg, answerLost{f.view()})
		defer lk.Close()
		if _, err := lk.TryLock(t.Context(), "n"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TryLock with its answer lost = %v; want DeadlineExceeded", err)
		}
		other, _ := NewLocker(cfg, f.view())
		defer other.Close()
		if _, err := other.TryLock(t.Context(), "n"); err != nil {
			t.Errorf("TryLock after a lost answer's unlock = %v; want the name free", err)
		}
	})
}

// lateSend is a view whose Lock goes out 10ms after the call, whatever
// the call's ctx does meanwhile, as an auto-pipelined command queued
// before its caller's ctx ended does.
type lateSend struct{ *view }

func (v lateSend) Lock(ctx context.Context, name string, rec *store.Record, ttl time.Duration) (store.LockResult, error) {
	res := make(chan store.LockResult, 1)
	go func() {
		time.Sleep(10 * time.Millisecond)
		r, _ := v.view.Lock(context.Background(), name, rec, ttl)
		res <- r
	}()
	select {
	case r := <-res:
		return r, nil
	case <-ctx.Done():
		return store.LockResult{}, ctx.Err()
	}
}

// A TryLock whose ctx ends while its command is on its way waits for the
// answer and gives back what it got: the name is free after it. Before,
// it returned at once and its unlock went out before the lock, which
// then held the name for a TTL (an outside trial, with auto-pipelining:
// 1 to 14 in 250).
func TestLockCtxEndedMidCallLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		cfg := LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}
		lk, _ := NewLocker(cfg, lateSend{f.view()})
		defer lk.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel()
		if _, err := lk.TryLock(ctx, "n"); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock whose ctx ended mid-call = %v; want ErrNotObtained and DeadlineExceeded", err)
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		other, _ := NewLocker(cfg, f.view())
		defer other.Close()
		if _, err := other.TryLock(t.Context(), "n"); err != nil {
			t.Errorf("TryLock after it = %v; want the name free", err)
		}
	})
}
