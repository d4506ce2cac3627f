package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// Tests of Redis state planted by hand under a running fleet (issue #15):
// each damages one shard's keys or values; only that shard, or only that
// item, may pay for it.

// pickResult pick-claims up to n items of shard with one token and
// returns the whole result, setting the epoch marker first when needed.
func pickResult(t *testing.T, s *store.Store, shard, n int) (*store.ClaimPickResult, error) {
	t.Helper()
	tok := store.NewToken()
	recs := make([]*store.Record, n)
	for i := range recs {
		recs[i] = record("w")
		recs[i].Token = tok
	}
	p := store.ClaimPickParams{Shard: shard, Records: recs, TTL: time.Minute}
	res, err := s.ClaimPick(t.Context(), p)
	if errors.Is(err, store.ErrEpochMissing) {
		if _, err := s.MarkEpoch(t.Context(), shard, 0); err != nil {
			t.Fatal(err)
		}
		res, err = s.ClaimPick(t.Context(), p)
	}
	return res, err
}

// Due scores of 0 and -inf are due times like any other, the longest
// waiting of all: Oldest and Backlog report them (a head of 0 used to
// mean "nothing due", so the engine never picked such a shard), the pick
// claims them first, and a score of 1e300 is far in the future. Every
// score comes back clamped to ±store.MaxDue: Redis casts a script's
// -inf or 1e300 to an integer that overflows.
func TestPlantedDueScores(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb, due := s.Client(), s.Keys().Due(0)
		heads := func() int64 {
			t.Helper()
			h, err := s.Oldest(ctx)
			if err != nil || len(h) != 1 || h[0].Err != nil {
				t.Fatalf("Oldest = %+v, %v", h, err)
			}
			return h[0].Due
		}
		if got := heads(); got != store.NoDue {
			t.Errorf("head of an empty shard = %d, want NoDue", got)
		}
		rdb.ZAdd(ctx, due, redis.Z{Score: 0, Member: "zero"})
		if got := heads(); got != 0 {
			t.Errorf("head with a score of 0 = %d, want 0", got)
		}
		rdb.Do(ctx, "ZADD", due, "-inf", "minus-inf")
		rdb.Do(ctx, "ZADD", due, "1e300", "far")
		s.Add(ctx, "plain")
		if got := heads(); got != -store.MaxDue {
			t.Errorf("head with a score of -inf = %d, want -MaxDue", got)
		}
		n, oldest, err := s.Backlog(ctx)
		if err != nil || n != 3 || oldest != -store.MaxDue {
			t.Errorf("Backlog = %d, %d, %v; want 3 due, the oldest -MaxDue", n, oldest, err)
		}
		res, err := pickResult(t, s, 0, 8)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var prev []int64
		for _, r := range res.Items {
			got = append(got, r.ID)
			prev = append(prev, r.PrevDue)
		}
		if diff := cmp.Diff(got, []string{"minus-inf", "zero", "plain"}); diff != "" {
			t.Errorf("picked (-got +want):\n%s", diff)
		}
		if len(prev) == 3 && (prev[0] != -store.MaxDue || prev[1] != 0) {
			t.Errorf("previous due times %v, want -MaxDue and 0 first", prev)
		}
		now, _ := s.Now(ctx)
		if res.Head < now || res.Head > now+time.Minute.Milliseconds() {
			t.Errorf("head after the pick = %d, want the claims' lease expiry, about %d", res.Head, now+time.Minute.Milliseconds())
		}
		rdb.ZRem(ctx, due, "minus-inf", "zero", "plain")
		if res, err := pickResult(t, s, 0, 1); err != nil || len(res.Items) != 0 || res.Head != store.MaxDue {
			t.Errorf("pick of a shard holding only the 1e300 item = %+v, %v; want nothing and MaxDue as head", res, err)
		}
		// The embedded store writes this score as "2e+12".
		rdb.ZAdd(ctx, due, redis.Z{Score: 2e12, Member: "round"})
		if res, err := pickResult(t, s, 0, 1); err != nil || res.Head != 2e12 {
			t.Errorf("pick of a shard whose head is due at 2e12 = %+v, %v; want that head", res, err)
		}
		rdb.ZRem(ctx, due, "round")
		rdb.Do(ctx, "ZADD", due, "inf", "far")
		if res, err := pickResult(t, s, 0, 1); err != nil || len(res.Items) != 0 || res.Head != store.NoDue {
			t.Errorf("pick of a shard holding only quarantined items = %+v, %v; want nothing and NoDue as head", res, err)
		}
	})
}

// A shard whose keys are of another type is that shard's problem only:
// Oldest and Backlog read every other shard and give the damaged one an
// error of its own, and a claim of it fails with a *DamageError that
// names the key. Before, one wrong-type key failed the whole call, every
// shard's, and the fleet synced nothing.
func TestDamagedShardKeys(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 4})
		rdb, k := s.Client(), s.Keys()
		ids := map[int]string{}
		for i := 0; len(ids) < 4; i++ {
			id := fmt.Sprintf("item-%d", i)
			if _, ok := ids[k.Shard(id)]; !ok {
				ids[k.Shard(id)] = id
				s.Add(ctx, id)
			}
		}
		rdb.Del(ctx, k.Due(1))
		rdb.Set(ctx, k.Due(1), "x", 0)
		rdb.Set(ctx, k.Meta(3), "garbage", 0)
		heads, err := s.Oldest(ctx)
		if err != nil || len(heads) != 4 {
			t.Fatalf("Oldest = %+v, %v; want a head per shard", heads, err)
		}
		for sh, h := range heads {
			var de *store.DamageError
			switch {
			case sh == 1 && (!errors.As(h.Err, &de) || de.Shard != 1 || h.Due != store.NoDue):
				t.Errorf("shard 1 (due is a string): %+v, want a DamageError and no head", h)
			case sh != 1 && (h.Err != nil || h.Due == store.NoDue):
				t.Errorf("shard %d: %+v, want its head", sh, h)
			}
		}
		n, _, err := s.Backlog(ctx)
		if !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), "shard 1") || n != 3 {
			t.Errorf("Backlog = %d, %v; want the 3 items of the other shards and shard 1's damage", n, err)
		}
		for sh := range 4 {
			res, err := pickResult(t, s, sh, 2)
			var de *store.DamageError
			switch sh {
			case 1, 3:
				if !errors.As(err, &de) || de.Shard != sh || store.IsUnavailable(err) {
					t.Errorf("claim of shard %d = %+v, %v; want a *DamageError", sh, res, err)
				}
				if key := []string{1: k.Due(1), 3: k.Meta(3)}[sh]; !strings.Contains(err.Error(), key) {
					t.Errorf("claim of shard %d: %v; want the damaged key %s named", sh, err, key)
				}
			default:
				if err != nil || len(res.Items) != 1 || res.Items[0].ID != ids[sh] {
					t.Errorf("claim of shard %d = %+v, %v; want %s", sh, res, err, ids[sh])
				}
			}
		}
	})
}
