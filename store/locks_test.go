package store_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// ReadLock returns the record with its metadata and Redis's PTTL, nil
// when the lock is free, ErrBadRecord for bytes syncd did not write.
func TestReadLock(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		s.MarkEpoch(ctx, s.Keys().Shard("job"), 0)
		if rec, _, err := s.ReadLock(ctx, "job"); rec != nil || err != nil {
			t.Fatalf("ReadLock of a free lock = %+v, %v", rec, err)
		}
		a := record("a")
		a.Metadata = "order 17"
		if r, err := s.Lock(ctx, "job", a, time.Minute); err != nil || !r.Acquired {
			t.Fatalf("lock = %+v, %v", r, err)
		}
		rec, ttl, err := s.ReadLock(ctx, "job")
		if err != nil || rec == nil || rec.Token != a.Token || rec.Metadata != "order 17" || rec.Fence == 0 {
			t.Fatalf("ReadLock = %+v, %v, %v", rec, ttl, err)
		}
		if ttl <= 0 || ttl > time.Minute {
			t.Errorf("ReadLock ttl = %v, want up to a minute", ttl)
		}
		s.Client().Set(ctx, s.Keys().Lock("junk"), "not a record", time.Minute)
		if _, _, err := s.ReadLock(ctx, "junk"); !errors.Is(err, store.ErrBadRecord) {
			t.Errorf("ReadLock of junk = %v, want ErrBadRecord", err)
		}
	})
}

// A name whose fence counter is missing is held off while Redis is
// younger than the ttl, unless the shard's epoch marker shows that no
// data was lost; the embedded store never holds off (nothing outlives
// its process).
func TestLockHeldOffAfterDataLoss(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		r, err := s.Lock(ctx, "job", record("a"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if s.Embedded() {
			if !r.Acquired {
				t.Errorf("embedded lock = %+v, want acquired", r)
			}
			return
		}
		if r.Acquired || !r.HeldOff || r.Wait < 58*time.Second || r.Wait > time.Minute {
			t.Fatalf("lock on a fresh Redis without epoch marker = %+v, want held off for about a minute", r)
		}
		// Held off again: the attempt left no counter behind.
		if r, _ := s.Lock(ctx, "job", record("a"), time.Minute); !r.HeldOff {
			t.Errorf("second attempt = %+v, want held off", r)
		}
		// The shard's marker rules: set with no hold (a new deployment),
		// names are not held off; a hostile marker holds one ttl at most.
		s.MarkEpoch(ctx, s.Keys().Shard("fresh"), 0)
		if r, _ := s.Lock(ctx, "fresh", record("a"), time.Minute); !r.Acquired {
			t.Errorf("lock with the epoch marker set = %+v", r)
		}
		s.Client().Set(ctx, s.Keys().Epoch(s.Keys().Shard("inf")), "inf", 0)
		if r, _ := s.Lock(ctx, "inf", record("a"), time.Minute); !r.HeldOff || r.Wait > time.Minute {
			t.Errorf("lock with an 'inf' marker = %+v, want held off for at most the ttl", r)
		}
	})
}

// In steady state (the fence counter exists, the lock is free) lock.lua
// costs three Redis commands, as it did before the hold-off was added:
// TIME, the counter's SET ... GET, and SET NX ... GET.
func TestLockCommandsInSteadyState(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	s := open(t, store.Config{Addrs: []string{srv.Addr()}})
	ctx := t.Context()
	s.MarkEpoch(ctx, s.Keys().Shard("job"), 0)
	a := record("a")
	for range 2 {
		if r, err := s.Lock(ctx, "job", a, time.Minute); err != nil || !r.Acquired {
			t.Fatalf("lock = %+v, %v", r, err)
		}
		s.Unlock(ctx, "job", a.Token)
	}
	admin := srv.Client(t)
	admin.ConfigResetStat(ctx)
	if r, err := s.Lock(ctx, "job", a, time.Minute); err != nil || !r.Acquired {
		t.Fatalf("lock = %+v, %v", r, err)
	}
	text, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	inside := 0
	for cmd, n := range calls {
		if cmd != "evalsha" && cmd != "eval" && !strings.HasPrefix(cmd, "config") {
			inside += n
		}
	}
	if inside != 3 || calls["time"] != 1 || calls["set"] != 2 {
		t.Errorf("a free lock ran %d commands, want 3 (TIME, SET, SET): %v", inside, calls)
	}
}

// A lock fence counter Lua cannot raise exactly (planted 1e300, or past
// 2^53) is refused loudly once, reset to the clock, and never issued.
func TestLockFenceCounterBeyondExactLimit(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		for sh := range s.Keys().Shards() {
			s.MarkEpoch(ctx, sh, 0)
		}
		for _, planted := range []string{"1e300", "9007199254740994", "inf"} {
			key := s.Keys().LockFence("job")
			s.Client().Set(ctx, key, planted, 0)
			if _, err := s.Lock(ctx, "job", record("a"), time.Minute); err == nil || !strings.Contains(err.Error(), "cannot be raised exactly") {
				t.Fatalf("lock over counter %s: %v; want a refusal", planted, err)
			}
			res, err := s.Lock(ctx, "job", record("a"), time.Minute)
			if err != nil || !res.Acquired || res.Fence >= 1<<53 {
				t.Fatalf("lock after the refusal over %s: %+v, %v; want acquired with a fence below 2^53", planted, res, err)
			}
			s.Client().Del(ctx, s.Keys().Lock("job"))
		}
	})
}
