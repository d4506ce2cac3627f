package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// TestBatchedClaimsAndReleases covers how claim_pick.lua and release.lua
// write a call's items: one HMGET, HSET, ZADD and DEL per call (the
// prelude's send), in parts past 512 values. A pick of 600 and a release
// of 600 take several parts; the release names one item twice (released
// once) and has items removed since their claim (ZADD XX CH then counts
// fewer than it sent, and each is looked up).
func TestBatchedClaimsAndReleases(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb, keys := s.Client(), s.Keys()
		const n = 600
		ids := make([]string, n+10)
		for i := range ids {
			ids[i] = fmt.Sprintf("item-%04d", i)
		}
		if _, err := s.Add(ctx, ids...); err != nil {
			t.Fatal(err)
		}
		now, _ := s.Now(ctx)
		for i, id := range ids { // due in ids order
			rdb.ZAdd(ctx, keys.Due(0), redis.Z{Score: float64(now - 100_000 + int64(i)), Member: id})
		}
		tok := store.NewToken()
		recs := make([]*store.Record, n)
		for i := range recs {
			recs[i] = record("w")
			recs[i].Token, recs[i].Owner.Worker = tok, i
		}
		res := claimPick(t, s, store.ClaimPickParams{Shard: 0, Records: recs, TTL: time.Minute})
		if len(res.Items) != n {
			t.Fatalf("picked %d items, want %d", len(res.Items), n)
		}
		fences := map[string]uint64{}
		for i, it := range res.Items {
			if it.Code != store.ClaimOK || it.ID != ids[i] || it.PrevDue != now-100_000+int64(i) {
				t.Fatalf("item %d = %+v, want %s claimed", i, it, ids[i])
			}
			fences[it.ID] = it.Fence
			f, last, attempts := store.ParseMeta(rdb.HGet(ctx, keys.Meta(0), it.ID).Val())
			if f != it.Fence || last != 0 || attempts != 0 {
				t.Errorf("meta of %s = (%d, %d, %d), want fence %d", it.ID, f, last, attempts, it.Fence)
			}
			if sc := rdb.ZScore(ctx, keys.Due(0), it.ID).Val(); sc < float64(now) {
				t.Errorf("%s still due (%v) after its claim", it.ID, sc)
			}
		}

		removed := map[string]bool{ids[1]: true, ids[2]: true, ids[3]: true}
		if k, err := s.Remove(ctx, ids[1], ids[2], ids[3]); err != nil || k != 3 {
			t.Fatalf("Remove = %d, %v", k, err)
		}
		reqs := make([]store.ReleaseRequest, 0, n+1)
		for _, it := range res.Items {
			reqs = append(reqs, store.ReleaseRequest{ID: it.ID, Token: tok, Kind: store.ReleaseSynced, Delay: time.Hour})
		}
		reqs = append(reqs, reqs[0]) // named twice: released once
		rel, err := s.Release(ctx, 0, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rel[:n] {
			if r.Code != store.Released {
				t.Fatalf("release %d (%s) = %v", i, reqs[i].ID, r.Code)
			}
		}
		if rel[n].Code != store.NotHeld {
			t.Errorf("the second release of %s = %v, want %v", reqs[n].ID, rel[n].Code, store.NotHeld)
		}
		for i, it := range res.Items {
			id := it.ID
			if rdb.Exists(ctx, keys.Record(0, id)).Val() != 0 {
				t.Errorf("record of %s kept after its release", id)
			}
			score, zerr := rdb.ZScore(ctx, keys.Due(0), id).Result()
			meta, herr := rdb.HGet(ctx, keys.Meta(0), id).Result()
			if removed[id] {
				if zerr == nil || herr == nil {
					t.Errorf("removed %s put back: due %v (%v), meta %q (%v)", id, score, zerr, meta, herr)
				}
				continue
			}
			at := rel[i].At.UnixMilli()
			if score != float64(at+time.Hour.Milliseconds()) {
				t.Errorf("%s due at %v, want %d", id, score, at+time.Hour.Milliseconds())
			}
			f, last, attempts := store.ParseMeta(meta)
			if f != fences[id] || last != at || attempts != 0 {
				t.Errorf("meta of %s = (%d, %d, %d), want (%d, %d, 0)", id, f, last, attempts, fences[id], at)
			}
		}
	})
}
