package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	calls := commandCalls(t, admin)
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

// commandCalls reads INFO commandstats: calls by command name
// ("evalsha", "set", "config|resetstat").
func commandCalls(t *testing.T, admin *redis.Client) map[string]int {
	t.Helper()
	text, err := admin.Info(t.Context(), "commandstats").Result()
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
	return calls
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

// One batch of locks and unlocks (what the coalescer sends for
// concurrent calls) gives each call the outcome it would have alone, in
// order: a name twice is granted to the first only, a refused fence
// counter fails its own lock only, an unlock re-sent in the same batch
// still reports released, and foreign keys read as held by another.
func TestLockBatchOutcomes(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1, AutoPipeline: true})
		s.MarkEpoch(ctx, 0, 0)
		mine, other, gone := record("mine"), record("other"), record("gone")
		for name, rec := range map[string]*store.Record{"held": other, "mine": mine} {
			if r, err := s.Lock(ctx, name, rec, time.Minute); err != nil || !r.Acquired {
				t.Fatalf("lock %s = %+v, %v", name, r, err)
			}
		}
		s.Client().Set(ctx, s.Keys().LockFence("bad"), "1e300", 0)
		s.Client().HSet(ctx, s.Keys().Lock("wrongtype"), "x", "y")
		a, b := record("a"), record("b")
		ops := []store.LockOpForTest{
			{Name: "free", Rec: a, TTL: time.Minute},
			{Name: "held", Rec: a, TTL: time.Minute},
			{Name: "bad", Rec: a, TTL: time.Minute},
			{Name: "free", Rec: b, TTL: time.Minute}, // the name again: a has it
			{Unlock: true, Name: "mine", Token: mine.Token},
			{Unlock: true, Name: "mine", Token: mine.Token}, // re-sent: released
			{Name: "mine", Rec: b, TTL: time.Minute},        // free again (unlocks go first)
			{Unlock: true, Name: "nobody", Token: gone.Token},
			{Unlock: true, Name: "held", Token: gone.Token},
			{Unlock: true, Name: "wrongtype", Token: gone.Token},
			{Name: "wrongtype", Rec: a, TTL: time.Minute},
		}
		res, err := s.LockOps(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		check := func(i int, acquired bool, code store.ReleaseCode, errText string) {
			t.Helper()
			r := res[i]
			switch {
			case errText != "":
				if r.Err == nil || !strings.Contains(r.Err.Error(), errText) {
					t.Errorf("op %d (%+v): err %v, want %q", i, ops[i].Name, r.Err, errText)
				}
			case r.Err != nil:
				t.Errorf("op %d (%s): %v", i, ops[i].Name, r.Err)
			case ops[i].Unlock && r.Code != code:
				t.Errorf("unlock %d (%s) = %v, want %v", i, ops[i].Name, r.Code, code)
			case !ops[i].Unlock && r.Lock.Acquired != acquired:
				t.Errorf("lock %d (%s) = %+v, want acquired %v", i, ops[i].Name, r.Lock, acquired)
			}
		}
		check(0, true, 0, "")
		check(1, false, 0, "")
		check(2, false, 0, "cannot be raised exactly")
		check(3, false, 0, "")
		check(4, false, store.Released, "")
		check(5, false, store.Released, "")
		check(6, true, 0, "")
		check(7, false, store.NotHeld, "")
		check(8, false, store.HeldByOther, "")
		check(9, false, store.HeldByOther, "")
		check(10, false, 0, "")
		if res[1].Lock.Wait <= 0 || res[1].Lock.Wait > time.Minute || res[3].Lock.Wait <= 0 {
			t.Errorf("busy locks' waits %v and %v, want the holder's ttl left", res[1].Lock.Wait, res[3].Lock.Wait)
		}
		for name, want := range map[string]store.Token{"free": a.Token, "held": other.Token, "mine": b.Token} {
			if rec, _, err := s.ReadLock(ctx, name); err != nil || rec == nil || rec.Token != want {
				t.Errorf("lock %s after the batch: %+v, %v", name, rec, err)
			}
		}
		// The refused counter was reset to the clock: the next lock of
		// the name is granted.
		if r, err := s.Lock(ctx, "bad", a, time.Minute); err != nil || !r.Acquired {
			t.Errorf("lock after the refusal = %+v, %v", r, err)
		}
	})
}

// A call that goes alone (what the coalescer sends at low load: lock.lua
// and unlock_batch.lua reply one integer then, without the tables a
// batch needs) has the outcome it has in a batch, and the receipt serves
// lone calls and batches alike: a batch re-sent alone, op by op, and a
// lone unlock re-sent in a batch, still report released.
func TestLoneLockOutcomes(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1, AutoPipeline: true})
		s.MarkEpoch(ctx, 0, 0)
		one := func(op store.LockOpForTest) store.LockOpResult {
			t.Helper()
			res, err := s.LockOps(ctx, []store.LockOpForTest{op})
			if err != nil || len(res) != 1 {
				t.Fatalf("%+v: %v, %v", op, res, err)
			}
			return res[0]
		}
		mine, other, gone, a := record("mine"), record("other"), record("gone"), record("a")
		s.Client().Set(ctx, s.Keys().LockFence("bad"), "1e300", 0)
		s.Client().HSet(ctx, s.Keys().Lock("wrongtype"), "x", "y")

		r := one(store.LockOpForTest{Name: "held", Rec: other, TTL: time.Minute})
		if r.Err != nil || !r.Lock.Acquired || r.Lock.Fence == 0 {
			t.Fatalf("lock of a free name = %+v", r)
		}
		first := r.Lock.Fence
		r = one(store.LockOpForTest{Name: "held", Rec: other, TTL: time.Minute})
		if r.Err != nil || !r.Lock.Acquired || r.Lock.Fence != first {
			t.Errorf("the same lock re-sent = %+v, want acquired with fence %d", r, first)
		}
		r = one(store.LockOpForTest{Name: "held", Rec: a, TTL: time.Minute})
		if r.Err != nil || r.Lock.Acquired || r.Lock.HeldOff || r.Lock.Wait <= 58*time.Second || r.Lock.Wait > time.Minute {
			t.Errorf("lock of a held name = %+v, want refused with the holder's ttl left", r)
		}
		if r = one(store.LockOpForTest{Name: "bad", Rec: a, TTL: time.Minute}); r.Err == nil || !strings.Contains(r.Err.Error(), "cannot be raised exactly") {
			t.Errorf("lock with a planted fence counter = %+v", r)
		}
		r = one(store.LockOpForTest{Name: "wrongtype", Rec: a, TTL: time.Minute})
		if r.Err != nil || r.Lock.Acquired || r.Lock.Wait <= 0 || r.Lock.Wait > time.Minute {
			t.Errorf("lock of a key of another type = %+v, want refused for one ttl", r)
		}

		unlock := func(what, name string, tok store.Token, want store.ReleaseCode) {
			t.Helper()
			if r := one(store.LockOpForTest{Unlock: true, Name: name, Token: tok}); r.Err != nil || r.Code != want {
				t.Errorf("%s: %v, %v; want %v", what, r.Code, r.Err, want)
			}
		}
		unlock("unlock of a name nobody holds", "nobody", gone.Token, store.NotHeld)
		unlock("unlock of a name another holds", "held", gone.Token, store.HeldByOther)
		unlock("unlock of a key of another type", "wrongtype", gone.Token, store.HeldByOther)
		if r := one(store.LockOpForTest{Name: "x", Rec: mine, TTL: time.Minute}); !r.Lock.Acquired {
			t.Fatalf("lock x = %+v", r)
		}
		unlock("unlock", "x", mine.Token, store.Released)
		unlock("the unlock re-sent", "x", mine.Token, store.Released)
		one(store.LockOpForTest{Name: "x", Rec: a, TTL: time.Minute}) // x changed hands
		unlock("the unlock re-sent after x changed hands", "x", mine.Token, store.Released)
		unlock("the released token on another name", "held", mine.Token, store.HeldByOther)

		// A lone unlock's receipt serves a batch, and a batch's a lone
		// call.
		res, err := s.LockOps(ctx, []store.LockOpForTest{{Unlock: true, Name: "x", Token: mine.Token}, {Unlock: true, Name: "held", Token: other.Token}})
		if err != nil || res[0].Code != store.Released || res[1].Code != store.Released {
			t.Fatalf("a batch re-sending the lone unlock, and releasing held: %+v, %v", res, err)
		}
		one(store.LockOpForTest{Name: "held", Rec: a, TTL: time.Minute}) // held changed hands
		unlock("the batch's unlock re-sent alone", "held", other.Token, store.Released)
	})
}

// A batch of unlocks re-sent after a dropped connection (or an unlock
// repeated soon after) still reports released, though the name changed
// hands since: the Store's receipt pairs each released token with its
// name. A token released on one name is no key to another: a stale owner
// is never told it released, within one batch or across batches. The
// receipt keeps the last 4 batches that released something.
func TestUnlockBatchReceipt(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1, AutoPipeline: true})
		s.MarkEpoch(ctx, 0, 0)
		lock := func(name string, rec *store.Record) {
			t.Helper()
			if r, err := s.Lock(ctx, name, rec, time.Minute); err != nil || !r.Acquired {
				t.Fatalf("lock %s = %+v, %v", name, r, err)
			}
		}
		unlock := func(ops ...store.LockOpForTest) []store.ReleaseCode {
			t.Helper()
			res, err := s.LockOps(ctx, ops)
			if err != nil {
				t.Fatal(err)
			}
			codes := make([]store.ReleaseCode, len(res))
			for i, r := range res {
				codes[i] = r.Code
			}
			return codes
		}
		want := func(what string, got []store.ReleaseCode, want ...store.ReleaseCode) {
			t.Helper()
			if !slices.Equal(got, want) {
				t.Errorf("%s: %v, want %v", what, got, want)
			}
		}
		mine, other, later := record("mine"), record("other"), record("later")
		lock("x", mine)
		lock("y", other)
		ops := []store.LockOpForTest{{Unlock: true, Name: "x", Token: mine.Token}, {Unlock: true, Name: "y", Token: mine.Token}}
		want("first send", unlock(ops...), store.Released, store.HeldByOther)
		lock("x", later) // x changed hands
		want("re-sent", unlock(ops...), store.Released, store.HeldByOther)
		want("the released token on another name", unlock(ops[1]), store.HeldByOther)

		// Three more batches that release push nothing out; a fourth does.
		for i := range 4 {
			rec := record("r")
			lock("z", rec)
			unlock(store.LockOpForTest{Unlock: true, Name: "z", Token: rec.Token})
			if i < 3 {
				want(fmt.Sprintf("re-sent after %d more batches", i+1), unlock(ops...), store.Released, store.HeldByOther)
			} else {
				want("re-sent after 4 more batches", unlock(ops...), store.HeldByOther, store.HeldByOther)
			}
		}
	})
}

// With auto-pipelining, concurrent Lock and Unlock calls go to Redis in
// batches, and the locks still exclude each other: 64 goroutines on 8
// names never hold one name at once, see their fences rise, and always
// release what they took.
func TestConcurrentLocksBatched(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1, AutoPipeline: true})
		s.MarkEpoch(ctx, 0, 0)
		var admin *redis.Client
		if !s.Embedded() {
			admin = redis.NewClient(&redis.Options{Addr: s.Client().(*redis.Client).Options().Addr})
			defer admin.Close()
			admin.ConfigResetStat(ctx)
		}
		const names, workers, rounds = 8, 64, 150
		var (
			mu      sync.Mutex
			holder  [names]int
			fence   [names]uint64
			calls   atomic.Int64
			granted atomic.Int64
		)
		for i := range holder {
			holder[i] = -1
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					n := (w + r) % names
					name := "job-" + strconv.Itoa(n)
					rec := record("w" + strconv.Itoa(w))
					res, err := s.Lock(ctx, name, rec, time.Minute)
					calls.Add(1)
					if err != nil {
						errs <- err
						return
					}
					if !res.Acquired {
						continue
					}
					granted.Add(1)
					mu.Lock()
					if holder[n] != -1 || res.Fence <= fence[n] {
						mu.Unlock()
						errs <- fmt.Errorf("%s granted to %d (fence %d) while held by %d (fence %d)", name, w, res.Fence, holder[n], fence[n])
						return
					}
					holder[n], fence[n] = w, res.Fence
					mu.Unlock()
					time.Sleep(50 * time.Microsecond) // hold it a moment
					mu.Lock()
					holder[n] = -1
					mu.Unlock()
					code, err := s.Unlock(ctx, name, rec.Token)
					calls.Add(1)
					if err != nil || code != store.Released {
						errs <- fmt.Errorf("unlock %s = %v, %v", name, code, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if granted.Load() < names {
			t.Errorf("%d locks granted, want many", granted.Load())
		}
		if admin == nil {
			return
		}
		n, ok := commandCalls(t, admin)["evalsha"]
		if !ok {
			t.Fatal("no EVALSHA in commandstats")
		}
		if int64(n) > calls.Load()*4/5 {
			t.Errorf("%d script calls for %d Lock and Unlock calls: not batched", n, calls.Load())
		} else {
			t.Logf("%d script calls for %d Lock and Unlock calls", n, calls.Load())
		}
	})
}

// Close does not wait out a batch stuck on a paused Redis: the calls in
// flight and queued fail at once, and Close returns.
func TestCloseWithLocksInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	s, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, Shards: 1, AutoPipeline: true,
		ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.MarkEpoch(t.Context(), 0, 0)
	srv.Pause(t)
	defer srv.Resume(t)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := s.Lock(t.Context(), "job-"+strconv.Itoa(i), record("a"), time.Minute)
			errs <- err
		}()
	}
	time.Sleep(200 * time.Millisecond) // one batch out, the others queued
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with Redis paused", d)
	}
	for range 8 {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a lock on a paused, closed store succeeded")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a Lock call did not return after Close")
		}
	}
}

// A batch of locks and unlocks (two EVALSHAs in one pipeline) reloads
// its scripts when Redis lost them (SCRIPT FLUSH, a restart, a failover).
func TestLockBatchAfterScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	s := open(t, store.Config{Addrs: []string{srv.Addr()}, Shards: 1, AutoPipeline: true})
	ctx := t.Context()
	s.MarkEpoch(ctx, 0, 0)
	a := record("a")
	if r, err := s.Lock(ctx, "held", a, time.Minute); err != nil || !r.Acquired {
		t.Fatalf("lock = %+v, %v", r, err)
	}
	if err := srv.Client(t).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := s.LockOps(ctx, []store.LockOpForTest{
		{Unlock: true, Name: "held", Token: a.Token},
		{Name: "free", Rec: record("b"), TTL: time.Minute},
	})
	if err != nil || res[0].Code != store.Released || !res[1].Lock.Acquired {
		t.Fatalf("batch after SCRIPT FLUSH = %+v, %v; want released and acquired", res, err)
	}
}
