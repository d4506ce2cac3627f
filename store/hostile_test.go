package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/store"
)

// pickAll pick-claims up to n items of shard 0 with one token.
func pickAll(t *testing.T, s *store.Store, n int, ttl time.Duration) ([]store.ItemClaim, store.Token) {
	t.Helper()
	return pickShard(t, s, 0, n, ttl)
}

// pickShard pick-claims up to n items of a shard with one token, setting
// the epoch marker first when needed.
func pickShard(t *testing.T, s *store.Store, shard, n int, ttl time.Duration) ([]store.ItemClaim, store.Token) {
	t.Helper()
	tok := store.NewToken()
	recs := make([]*store.Record, n)
	for i := range recs {
		recs[i] = record("w")
		recs[i].Token = tok
	}
	p := store.ClaimPickParams{Shard: shard, Records: recs, TTL: ttl}
	res, err := s.ClaimPick(t.Context(), p)
	if errors.Is(err, store.ErrEpochMissing) {
		if _, err := s.MarkEpoch(t.Context(), shard, 0); err != nil {
			t.Fatal(err)
		}
		res, err = s.ClaimPick(t.Context(), p)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res.Items, tok
}

// foreignRecords holds one item per kind of record syncd did not write:
// garbage, oversized (with its own expiry, exp), truncated, another type,
// and garbage that expires in a year; all but the oversized one and that
// one never expire.
func foreignRecords(t *testing.T, s *store.Store, exp time.Duration) []string {
	t.Helper()
	ctx, rdb := t.Context(), s.Client()
	key := func(id string) string { return s.Keys().Record(0, id) }
	writes := []error{
		rdb.Set(ctx, key("garbage"), "not a record", 0).Err(),
		rdb.Set(ctx, key("oversized"), strings.Repeat("x", 1<<20), exp).Err(),
		rdb.Set(ctx, key("truncated"), store.MarshalRecord(record("x"))[:30], 0).Err(),
		rdb.HSet(ctx, key("hash"), "f", "v").Err(),
		// An attacker's trial: a record with a year to live held its
		// item for the year.
		rdb.Set(ctx, key("a-year"), "not a record either", 365*24*time.Hour).Err(),
	}
	if err := errors.Join(writes...); err != nil {
		t.Fatal(err)
	}
	return []string{"garbage", "oversized", "truncated", "hash", "a-year"}
}

// TestForeignRecords: records syncd did not write (garbage, oversized,
// truncated, another type, no expiry) are treated as another owner's
// claim, reported once, never extended or released by syncd, never crash
// a script, and free the item within one ttl at most.
//
// Why two stores: the checks of the first must not race expiry, so its
// ttls are long and "within one ttl" is read from Redis's own clock (the
// records' PTTL and the items' due scores); the second, with short ttls,
// shows the items do come back once the records expire.
func TestForeignRecords(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		t.Run("held", func(t *testing.T) { foreignHeld(t, open(store.Config{Shards: 1})) })
		t.Run("expire", func(t *testing.T) { foreignExpire(t, open(store.Config{Shards: 1})) })
	})
}

// foreignHeld: foreign records are reported once, left alone by extend
// and release, and set to expire within one ttl, the item due again then.
func foreignHeld(t *testing.T, s *store.Store) {
	ctx, rdb := t.Context(), s.Client()
	// Long enough that nothing expires while the test runs, however
	// loaded the machine; the oversized record's own expiry is shorter
	// than one ttl and must be kept.
	const ttl, own = time.Minute, 30 * time.Second
	key := func(id string) string { return s.Keys().Record(0, id) }
	foreign := foreignRecords(t, s, own)
	if _, err := s.Add(ctx, append(foreign, "plain")...); err != nil {
		t.Fatal(err)
	}
	res, _ := pickAll(t, s, 8, ttl)
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]store.ClaimCode{}
	for _, r := range res {
		seen[r.ID] = r.Code
	}
	if seen["plain"] != store.ClaimOK {
		t.Errorf("plain item: %v, want claimed", seen["plain"])
	}
	// Reported once: the items are out of the due range now.
	if res, _ := pickAll(t, s, 8, ttl); len(res) != 0 {
		t.Errorf("second pick = %+v, want nothing", res)
	}
	for _, id := range foreign {
		if seen[id] != store.ClaimForeign {
			t.Errorf("%s: %v, want reported as foreign", id, seen[id])
		}
		// syncd neither extends nor releases them, and says so.
		before := rdb.Dump(ctx, key(id)).Val()
		ex, err := s.Extend(ctx, ttl, store.StateSyncing, []store.ExtendRequest{{Key: key(id), Token: store.NewToken()}})
		if err != nil || ex[0].Code != store.ExtendOther {
			t.Errorf("extend of %s = %+v, %v; want another owner's", id, ex, err)
		}
		rel, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: id, Token: store.NewToken(), Kind: store.ReleaseSynced}})
		if err != nil || rel[0].Code != store.HeldByOther {
			t.Errorf("release of %s = %+v, %v; want another owner's", id, rel, err)
		}
		if after := rdb.Dump(ctx, key(id)).Val(); after != before {
			t.Errorf("%s changed under extend/release", id)
		}
		limit := ttl
		if id == "oversized" {
			limit = own
		}
		if d := rdb.PTTL(ctx, key(id)).Val(); d <= 0 || d > limit {
			t.Errorf("%s expires in %v, want within %v", id, d, limit)
		}
		// Out of the due range until the record expires, and no longer.
		if at := rdb.ZScore(ctx, s.Keys().Due(0), id).Val(); at <= float64(now) || at > float64(now+limit.Milliseconds()) {
			t.Errorf("%s due again at %.0f ms, want after Redis's now %d and within %v", id, at, now, limit)
		}
	}
}

// foreignExpire: once their records expire, items held by foreign
// records are claimable again.
func foreignExpire(t *testing.T, s *store.Store) {
	const ttl = 300 * time.Millisecond
	foreign := foreignRecords(t, s, ttl)
	if _, err := s.Add(t.Context(), foreign...); err != nil {
		t.Fatal(err)
	}
	// The first pick gives the records without an expiry one ttl to live;
	// foreignHeld checks that against Redis's clock. Here the deadline
	// only bounds the wait on a loaded machine.
	got := map[string]bool{}
	for deadline := time.Now().Add(10 * time.Second); len(got) < len(foreign) && time.Now().Before(deadline); {
		res, _ := pickAll(t, s, 8, ttl)
		for _, r := range res {
			if r.Code == store.ClaimOK {
				got[r.ID] = true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range foreign {
		if !got[id] {
			t.Errorf("%s was not claimable after its foreign record expired", id)
		}
	}
}

// TestHostileIDs takes ids through the whole path: Add refuses the ones
// that cannot be keys, and the rest are claimed, recorded and released
// under keys that never collide, whatever bytes they hold.
func TestHostileIDs(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		for _, bad := range []string{"", "a\nb", "a\x00b", "tab\there", strings.Repeat("x", 1<<20), "\xff\xfe"} {
			if _, err := s.Add(ctx, bad); !errors.Is(err, store.ErrInvalidID) {
				t.Errorf("Add(%.20q) = %v, want ErrInvalidID", bad, err)
			}
		}
		good := []string{"{", "}", "{s0}", ":", "a:b", "a%3Ab", "a%253Ab", "*", "?", "[x]", "\\", "% ", " ", "rec:x", "x:rec",
			"ünï{cödé}", strings.Repeat("y", store.MaxIDLen)}
		if n, err := s.Add(ctx, good...); err != nil || n != len(good) {
			t.Fatalf("Add = %d, %v", n, err)
		}
		keys := map[string]string{}
		for _, id := range good {
			k := s.Keys().Record(0, id)
			if other, dup := keys[k]; dup {
				t.Fatalf("ids %q and %q share the key %q", id, other, k)
			}
			keys[k] = id
		}
		res, tok := pickAll(t, s, len(good)+4, time.Minute)
		if len(res) != len(good) {
			t.Fatalf("claimed %d of %d", len(res), len(good))
		}
		var reqs []store.ReleaseRequest
		for _, r := range res {
			if r.Code != store.ClaimOK {
				t.Errorf("%q: %v", r.ID, r.Code)
				continue
			}
			rec, err := s.ReadRecord(ctx, s.Keys().Record(0, r.ID))
			if err != nil || rec == nil || rec.Token != tok || rec.Fence != r.Fence {
				t.Errorf("record of %q = %+v, %v", r.ID, rec, err)
			}
			reqs = append(reqs, store.ReleaseRequest{ID: r.ID, Token: tok, Kind: store.ReleaseSynced, Delay: time.Hour})
		}
		if dbKeys := s.Client().Keys(ctx, s.Keys().Prefix()+":{s0}:rec:*").Val(); len(dbKeys) != len(good) {
			t.Errorf("%d record keys in Redis for %d claims", len(dbKeys), len(good))
		}
		rel, err := s.Release(ctx, 0, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rel {
			if r.Code != store.Released {
				t.Errorf("release of %q: %v", reqs[i].ID, r.Code)
			}
		}
		items, _, err := s.List(ctx, 0, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		synced := 0
		for _, it := range items {
			if !it.LastSync.IsZero() {
				synced++
			}
		}
		if synced != len(good) {
			t.Errorf("%d of %d items show a lastSync: %s", synced, len(good), fmt.Sprint(items))
		}
	})
}
