package store_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// setDue puts ids into shard 0's due index at Redis's now + offset.
func setDue(t *testing.T, s *store.Store, offset time.Duration, ids ...string) {
	t.Helper()
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := s.Client().ZAdd(t.Context(), s.Keys().Due(0), redis.Z{Score: float64(now + offset.Milliseconds()), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// score is id's due score in shard 0, relative to Redis's now (ms).
func score(t *testing.T, s *store.Store, id string) float64 {
	t.Helper()
	now, _ := s.Now(t.Context())
	v, err := s.Client().ZScore(t.Context(), s.Keys().Due(0), id).Result()
	if err != nil {
		t.Fatalf("ZSCORE %s: %v", id, err)
	}
	return v - float64(now)
}

func trigger(t *testing.T, s *store.Store, p store.TriggerParams) store.TriggerResult {
	t.Helper()
	res, err := s.Trigger(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// pickOrder claims every due item of shard 0 and returns their IDs in the
// order the claim took them.
func pickOrder(t *testing.T, s *store.Store) []string {
	t.Helper()
	res, _ := pickShard(t, s, 0, 100, time.Minute)
	var ids []string
	for _, c := range res {
		ids = append(ids, c.ID)
	}
	return ids
}

// A triggered item goes ahead of due items that waited less than the
// boost and behind those that waited longer; one due later than now is
// due now; an item that waited longer than the boost keeps its place.
func TestTriggerOrder(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 1})
		setDue(t, s, -10*time.Second, "old")
		setDue(t, s, -200*time.Millisecond, "recent")
		setDue(t, s, time.Hour, "later")
		setDue(t, s, -20*time.Second, "oldest")
		res := trigger(t, s, store.TriggerParams{IDs: []string{"later", "oldest", "later"}, Reason: "customer asked", Boost: time.Second})
		if diff := cmp.Diff(res, store.TriggerResult{Due: []string{"later", "oldest"}}); diff != "" {
			t.Errorf("result (-got +want):\n%s", diff)
		}
		if d := score(t, s, "oldest"); d > -19000 {
			t.Errorf("oldest moved to now%+.0fms; it had waited longer than the boost", d)
		}
		if d := score(t, s, "later"); d > -900 || d < -1500 {
			t.Errorf("later is due at now%+.0fms, want about now-1s", d)
		}
		if diff := cmp.Diff(pickOrder(t, s), []string{"oldest", "old", "later", "recent"}); diff != "" {
			t.Errorf("claim order (-got +want):\n%s", diff)
		}
		note, ok, err := s.LastTrigger(t.Context(), "later")
		if err != nil || !ok || note.Reason != "customer asked" || time.Since(note.At).Abs() > 5*time.Second {
			t.Errorf("LastTrigger = %+v, %v, %v", note, ok, err)
		}
		if _, ok, _ := s.LastTrigger(t.Context(), "recent"); ok {
			t.Error("an item never triggered has a trigger note")
		}
	})
}

// A flood of triggers cannot hold back an item that waited longer than
// the boost: however often the others are triggered, it is claimed first.
func TestTriggerFloodDoesNotStarve(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 1})
		setDue(t, s, -1500*time.Millisecond, "patient")
		var flood []string
		for i := range 50 {
			flood = append(flood, "f"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+string(rune('a'+i/26)))
		}
		setDue(t, s, time.Hour, flood...)
		for range 20 {
			trigger(t, s, store.TriggerParams{IDs: flood, Boost: time.Second})
		}
		order := pickOrder(t, s)
		if len(order) != 51 || order[0] != "patient" {
			t.Errorf("claim order starts %v (%d items), want patient first", order[:min(3, len(order))], len(order))
		}
	})
}

// An item in flight keeps its lease's score; its release makes it due
// again at once, one time however many triggers came, whatever the
// release's delay. A failed release keeps its backoff and clears the flag.
func TestTriggerInFlightAgainOnce(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "a", "b")
		rec := record("w")
		claim(t, s, rec, time.Minute, "a")
		lease := score(t, s, "a")
		for range 3 {
			res := trigger(t, s, store.TriggerParams{IDs: []string{"a"}, Reason: "in flight"})
			if diff := cmp.Diff(res, store.TriggerResult{InFlight: []string{"a"}}); diff != "" {
				t.Fatalf("result (-got +want):\n%s", diff)
			}
		}
		if d := score(t, s, "a"); math.Abs(d-lease) > 2000 {
			t.Errorf("in flight: score moved from now%+.0f to now%+.0f; it must stay the lease's expiry", lease, d)
		}
		release := func(rec *store.Record, kind store.ReleaseKind) {
			t.Helper()
			r, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "a", Token: rec.Token, Kind: kind, Delay: time.Hour}})
			if err != nil || r[0].Code != store.Released {
				t.Fatalf("release = %+v, %v", r, err)
			}
		}
		release(rec, store.ReleaseSynced)
		if d := score(t, s, "a"); d > -500 {
			t.Errorf("after the release: due at now%+.0fms, want about now-1s", d)
		}
		rec = record("w")
		claim(t, s, rec, time.Minute, "a")
		release(rec, store.ReleaseSynced)
		if d := score(t, s, "a"); d < 3500e3 {
			t.Errorf("second release: due at now%+.0fms, want in an hour (again only once)", d)
		}

		// A failure keeps its backoff; the flag does not outlive it.
		rec = record("w")
		claim(t, s, rec, time.Minute, "b")
		trigger(t, s, store.TriggerParams{IDs: []string{"b"}})
		r, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "b", Token: rec.Token, Kind: store.ReleaseFailed, Delay: time.Hour, Error: "boom"}})
		if err != nil || r[0].Code != store.Released {
			t.Fatalf("release = %+v, %v", r, err)
		}
		if d := score(t, s, "b"); d < 3500e3 {
			t.Errorf("failed release: due at now%+.0fms, want its backoff of an hour", d)
		}
		if n := s.Client().HLen(ctx, s.Keys().Again(0)).Val(); n != 0 {
			t.Errorf("again hash keeps %d flags after the releases", n)
		}
	})
}

// Unknown IDs are reported, or added with Add; quarantined ones are left
// quarantined; bad parameters are refused before anything is written.
func TestTriggerUnknownQuarantinedInvalid(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 4})
		s.Add(ctx, "known", "q")
		rec := record("w")
		claim(t, s, rec, time.Minute, "q")
		s.Release(ctx, s.Keys().Shard("q"), []store.ReleaseRequest{{ID: "q", Token: rec.Token, Kind: store.ReleaseQuarantine, Error: "bad"}})

		res := trigger(t, s, store.TriggerParams{IDs: []string{"nope", "known", "q", "nope2"}})
		want := store.TriggerResult{Due: []string{"known"}, Unknown: []string{"nope", "nope2"}, Quarantined: []string{"q"}}
		if diff := cmp.Diff(res, want); diff != "" {
			t.Errorf("result (-got +want):\n%s", diff)
		}
		if unknown, _ := s.Unknown(ctx, "nope"); len(unknown) != 1 {
			t.Error("a trigger without Add added an unknown id")
		}
		if v := s.Client().ZScore(ctx, s.Keys().Due(s.Keys().Shard("q")), "q").Val(); !math.IsInf(v, 1) {
			t.Errorf("quarantined item's score = %v, want +inf", v)
		}
		res = trigger(t, s, store.TriggerParams{IDs: []string{"nope", "known"}, Add: true, Reason: "new customer"})
		if diff := cmp.Diff(res, store.TriggerResult{Due: []string{"known"}, Added: []string{"nope"}}); diff != "" {
			t.Errorf("Add: result (-got +want):\n%s", diff)
		}
		if unknown, _ := s.Unknown(ctx, "nope"); len(unknown) != 0 {
			t.Error("Add did not add")
		}
		// Added by hand (the CLI's trigger --add, the API's auto_add): a
		// reconcile keeps it. An item that was there stays as it was.
		for id, want := range map[string]bool{"nope": true, "known": false} {
			manual, err := s.Manual(ctx, s.Keys().Shard(id))
			if err != nil || manual[id] != want {
				t.Errorf("after a trigger with Add, %s marked manual = %v (%v), want %v", id, manual[id], err, want)
			}
		}
		if n, err := s.Reconcile(ctx, s.Keys().Shard("nope"), 1, false, []string{"nope"}); err != nil || n != 0 {
			t.Errorf("reconcile removing the added item: %d removed, %v; want it kept", n, err)
		}

		for _, p := range []store.TriggerParams{
			{IDs: []string{"ok", "bad\x01"}},
			{IDs: []string{"ok"}, Reason: "line\nbreak"},
			{IDs: []string{"ok"}, Reason: strings.Repeat("r", store.MaxTriggerReason+1)},
			{IDs: []string{"ok"}, Boost: -time.Second},
			{IDs: []string{"ok"}, Boost: time.Hour},
			{IDs: make([]string, store.MaxTriggerIDs+1)},
		} {
			if _, err := s.Trigger(ctx, store.TriggerParams(p)); err == nil {
				t.Errorf("Trigger(%.60q) took it", p.Reason)
			}
		}
		if unknown, _ := s.Unknown(ctx, "ok"); len(unknown) != 1 {
			t.Error("a refused trigger added an item")
		}
	})
}

// Data that comes back from Redis is input too: a damaged again hash
// (garbage values, another type) never fails a release, and a note
// that is not one Trigger wrote reads as none.
func TestTriggerHostileState(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb, k := s.Client(), s.Keys()
		s.Add(ctx, "a", "b", "c")
		for _, v := range []string{"nan", "1e300", "-5"} {
			rec := record("w")
			claim(t, s, rec, time.Minute, "a")
			rdb.HSet(ctx, k.Again(0), "a", v)
			r, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "a", Token: rec.Token, Kind: store.ReleaseSynced, Delay: time.Hour}})
			if err != nil || r[0].Code != store.Released {
				t.Fatalf("again %q: release = %+v, %v", v, r, err)
			}
			if d := score(t, s, "a"); d > 1000 || d < -1000 {
				t.Errorf("again %q: due at now%+.0fms, want now", v, d)
			}
		}
		rdb.Del(ctx, k.Again(0))
		rdb.Set(ctx, k.Again(0), "not a hash", 0)
		rdb.Set(ctx, k.Triggers(0), "not a hash", 0)
		rec := record("w")
		claim(t, s, rec, time.Minute, "b")
		if _, err := s.Trigger(ctx, store.TriggerParams{IDs: []string{"b", "c"}}); err != nil {
			t.Errorf("trigger with damaged trig and again keys: %v", err)
		}
		if d := score(t, s, "c"); d > 0 {
			t.Errorf("c not triggered: due at now%+.0fms", d)
		}
		r, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "b", Token: rec.Token, Kind: store.ReleaseSynced, Delay: time.Hour}})
		if err != nil || r[0].Code != store.Released {
			t.Fatalf("release with a damaged again key = %+v, %v", r, err)
		}
		if _, _, err := s.LastTrigger(ctx, "b"); !errors.Is(err, store.ErrDamaged) {
			t.Errorf("LastTrigger on a damaged trig key: %v, want ErrDamaged", err)
		}
		rdb.Del(ctx, k.Triggers(0))
		for _, v := range []string{"", "x y", "0 r", "123", "99999999999999999999 r", "123 a\x00b"} {
			rdb.HSet(ctx, k.Triggers(0), "b", v)
			if note, ok, err := s.LastTrigger(ctx, "b"); ok || err != nil {
				t.Errorf("note %q read as %+v, %v, %v", v, note, ok, err)
			}
		}
	})
}

// Removing an item forgets its trigger note and its sync-again flag.
func TestRemoveForgetsTrigger(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "a")
		claim(t, s, record("w"), time.Minute, "a")
		trigger(t, s, store.TriggerParams{IDs: []string{"a"}, Reason: "ticket 42"})
		if _, err := s.Remove(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{s.Keys().Triggers(0), s.Keys().Again(0)} {
			if n, err := s.Client().HLen(ctx, k).Result(); err != nil || n != 0 {
				t.Errorf("%s after remove: %d entries, %v", k, n, err)
			}
		}
	})
}
