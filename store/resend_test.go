package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/syncd/syncd/store"
)

// A call re-sent after a dropped connection (go-redis re-sends a whole
// pipeline) is the same call again. These tests send it again by hand.

func TestResentUnlock(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		if _, err := s.MarkEpoch(ctx, 0, 0); err != nil { // no hold-off on a fresh Redis
			t.Fatal(err)
		}
		a, b := record("a"), record("b")
		if r, err := s.Lock(ctx, "job", a, time.Minute); err != nil || !r.Acquired {
			t.Fatalf("lock = %+v, %v", r, err)
		}
		if c, err := s.Unlock(ctx, "job", a.Token); err != nil || c != store.Released {
			t.Fatalf("unlock = %v, %v", c, err)
		}
		if r, err := s.Lock(ctx, "job", b, time.Minute); err != nil || !r.Acquired {
			t.Fatalf("next owner's lock = %+v, %v", r, err)
		}
		// The re-sent unlock meets the next owner: released all the same,
		// and the next owner's lock is untouched.
		if c, err := s.Unlock(ctx, "job", a.Token); err != nil || c != store.Released {
			t.Errorf("re-sent unlock = %v, %v, want released", c, err)
		}
		if rec, _, err := s.ReadLock(ctx, "job"); err != nil || rec == nil || rec.Token != b.Token {
			t.Errorf("lock after the re-sent unlock = %+v, %v, want b's", rec, err)
		}
		// A stale owner is never told it released: its lock expired, and
		// the next owner's is not its.
		c := record("c")
		if r, err := s.Lock(ctx, "stale", c, 50*time.Millisecond); err != nil || !r.Acquired {
			t.Fatalf("lock = %+v, %v", r, err)
		}
		waitGone(t, s, s.Keys().Lock("stale"))
		if code, err := s.Unlock(ctx, "stale", c.Token); err != nil || code != store.NotHeld {
			t.Errorf("unlock after expiry = %v, %v, want not held", code, err)
		}
		if r, err := s.Lock(ctx, "stale", a, time.Minute); err != nil || !r.Acquired {
			t.Fatalf("lock = %+v, %v", r, err)
		}
		if code, err := s.Unlock(ctx, "stale", c.Token); err != nil || code != store.HeldByOther {
			t.Errorf("stale unlock = %v, %v, want held by another", code, err)
		}
	})
}

func TestResentRelease(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		if _, err := s.Add(ctx, "x", "y"); err != nil {
			t.Fatal(err)
		}
		a, b := record("a"), record("b")
		claim(t, s, a, time.Minute, "x")
		rel := []store.ReleaseRequest{{ID: "x", Token: a.Token, Kind: store.ReleaseFailed, Error: "boom"}}
		if r, err := s.Release(ctx, 0, rel); err != nil || r[0].Code != store.Released {
			t.Fatalf("release = %+v, %v", r, err)
		}
		if got := claim(t, s, b, time.Minute, "x"); got[0].Code != store.ClaimOK || got[0].Attempt != 2 {
			t.Fatalf("next claim = %+v", got[0])
		}
		// Re-sent: released, and the failure is not counted twice (the
		// next claim's record and the attempts are untouched).
		if r, err := s.Release(ctx, 0, rel); err != nil || r[0].Code != store.Released {
			t.Errorf("re-sent release = %+v, %v, want released", r, err)
		}
		if rec, err := s.ReadRecord(ctx, s.Keys().Record(0, "x")); err != nil || rec == nil || rec.Token != b.Token {
			t.Errorf("record after the re-sent release = %+v, %v, want b's", rec, err)
		}
		// The same token on another item, never released: not released.
		stale := []store.ReleaseRequest{{ID: "x", Token: store.NewToken(), Kind: store.ReleaseSynced}}
		if r, _ := s.Release(ctx, 0, stale); r[0].Code != store.HeldByOther {
			t.Errorf("foreign release = %+v, want held by another", r)
		}
		c := record("c")
		claim(t, s, c, 50*time.Millisecond, "y")
		waitGone(t, s, s.Keys().Record(0, "y"))
		if r, _ := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "y", Token: c.Token, Kind: store.ReleaseSynced}}); r[0].Code != store.NotHeld {
			t.Errorf("release after expiry = %+v, want not held", r)
		}
		if r, _ := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "y", Token: a.Token, Kind: store.ReleaseSynced}}); r[0].Code != store.NotHeld {
			t.Errorf("release of y with x's token = %+v, want not held", r)
		}
		// A call of two, one released and one not: the re-send replies
		// both codes and the first send's time, and records nothing more.
		d := record("d")
		claim(t, s, d, time.Minute, "y")
		two := []store.ReleaseRequest{{ID: "y", Token: d.Token, Kind: store.ReleaseFailed, Error: "again"}, {ID: "x", Token: a.Token, Kind: store.ReleaseSynced}}
		first, err := s.Release(ctx, 0, two)
		if err != nil || first[0].Code != store.Released || first[1].Code != store.HeldByOther {
			t.Fatalf("release of two = %+v, %v", first, err)
		}
		time.Sleep(2 * time.Millisecond)
		again, err := s.Release(ctx, 0, two)
		if err != nil || !cmp.Equal(again, first) {
			t.Errorf("re-sent release of two = %+v, %v, want %+v", again, err, first)
		}
		if st, err := s.Item(ctx, "y"); err != nil || st.Attempts != 1 || len(st.Errors) != 1 {
			t.Errorf("y after the re-send = %+v, %v, want 1 attempt", st, err)
		}
	})
}

func TestResentPickClaim(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		if _, err := s.Add(ctx, "a", "b", "c", "d"); err != nil {
			t.Fatal(err)
		}
		now, _ := s.Now(ctx)
		for i, id := range []string{"a", "b", "c", "d"} {
			s.Client().ZAdd(ctx, s.Keys().Due(0), redis.Z{Score: float64(now - 1000 + int64(i)), Member: id})
		}
		tok := store.NewToken()
		recs := []*store.Record{record("w0"), record("w1")}
		recs[0].Token, recs[1].Token = tok, tok
		p := store.ClaimPickParams{Shard: 0, Records: recs, TTL: time.Minute}
		first, err := s.ClaimPick(ctx, p)
		if errors.Is(err, store.ErrEpochMissing) {
			if _, err := s.MarkEpoch(ctx, 0, 0); err != nil {
				t.Fatal(err)
			}
			first, err = s.ClaimPick(ctx, p)
		}
		if err != nil || len(first.Items) != 2 {
			t.Fatalf("pick = %+v, %v", first, err)
		}
		again, err := s.ClaimPick(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		// The same items, fences and attempts; the score before the claim
		// is gone (0, as after a lost reply).
		for i := range first.Items {
			first.Items[i].PrevDue = 0
		}
		if diff := cmp.Diff(again.Items, first.Items); diff != "" {
			t.Errorf("re-sent pick (-got +want):\n%s", diff)
		}
		if again.Head != first.Head {
			t.Errorf("head %d, want %d", again.Head, first.Head)
		}
	})
}

// waitGone waits until key has expired.
func waitGone(t *testing.T, s *store.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Client().Exists(t.Context(), key).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not expire", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
