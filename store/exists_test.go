package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// Unknown names the ids not in the item set, in the order given, each
// once, over every shard; ids planted under a score of 0 or an invalid
// id count as known, as Remove finds them.
func TestUnknown(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 4})
		ctx := context.Background()
		if _, err := s.Add(ctx, "a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		planted := "\x1b[31mred"
		s.Client().ZAdd(ctx, s.Keys().Due(s.Keys().Shard(planted)), redis.Z{Score: 0, Member: planted})
		got, err := s.Unknown(ctx, "x", "a", "y", planted, "x", "c", "", "z")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(got, []string{"x", "y", "", "z"}); diff != "" {
			t.Errorf("Unknown (-got +want):\n%s", diff)
		}
		if got, err := s.Unknown(ctx, "a", "b"); err != nil || got != nil {
			t.Errorf("Unknown of known ids = %q, %v; want none", got, err)
		}
		many := make([]string, 2500)
		for i := range many {
			many[i] = fmt.Sprintf("new-%d", i)
		}
		if got, err := s.Unknown(ctx, append(many, "a")...); err != nil || !cmp.Equal(got, many) {
			t.Errorf("Unknown of %d new ids and a: %d ids, %v; want the %d new ones", len(many), len(got), err, len(many))
		}
		if _, err := s.Unknown(ctx, strings.Repeat("z", store.MaxRemoveIDLen+1)); err == nil {
			t.Error("Unknown of an id over MaxRemoveIDLen: no error")
		}
		// A damaged due index is an error, not an unknown id.
		sh := s.Keys().Shard("a")
		s.Client().Set(ctx, s.Keys().Due(sh), "garbage", 0)
		if got, err := s.Unknown(ctx, "x", "a"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("Unknown over a damaged shard = %q, %v; want WRONGTYPE", got, err)
		}
	})
}

// ShardsOf finds an item's copy planted in another shard than its id's,
// which Item does not look in, and ItemInShard reads it there.
func TestShardsOfAndItemInShard(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 4})
		ctx := context.Background()
		home := s.Keys().Shard("a")
		other, damaged := (home+1)%4, (home+2)%4
		s.Client().ZAdd(ctx, s.Keys().Due(other), redis.Z{Score: 0, Member: "a"})
		s.Client().Set(ctx, s.Keys().Due(damaged), "garbage", 0)
		if got, err := s.ShardsOf(ctx, "a"); err != nil || !cmp.Equal(got, []int{other}) {
			t.Errorf("ShardsOf(a) = %v, %v; want [%d], the damaged shard %d left out", got, err, other, damaged)
		}
		if _, err := s.Item(ctx, "a"); !errors.Is(err, store.ErrUnknownItem) {
			t.Errorf("Item(a) = %v; want ErrUnknownItem, its own shard %d lacks it", err, home)
		}
		d, err := s.ItemInShard(ctx, other, "a")
		if err != nil || d.ID != "a" || d.Shard != other || d.State != store.ItemDue {
			t.Errorf("ItemInShard(%d, a) = %+v, %v; want a, due, in shard %d", other, d, err, other)
		}
		s.Add(ctx, "a")
		if got, err := s.ShardsOf(ctx, "a"); err != nil || len(got) != 2 {
			t.Errorf("ShardsOf(a) with its own = %v, %v; want both shards", got, err)
		}
		if _, err := s.ItemInShard(ctx, 4, "a"); err == nil || !strings.Contains(err.Error(), "no shard 4") {
			t.Errorf("ItemInShard(4) = %v; want no shard 4", err)
		}
	})
}

// Quarantined tells a copy planted in another shard than its id's from
// a quarantined item of its own shard, and Count with max 0 reads no
// ids. Before, a batch report listed the copy's id among the
// quarantined items while the real item synced, and Count(ctx, 0)
// brought back every quarantined id (go-redis sends no LIMIT 0 0).
func TestQuarantinedWrongShard(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 4})
		ctx := context.Background()
		s.Add(ctx, "a", "q")
		home := s.Keys().Shard("a")
		other := (home + 1) % 4
		inf := math.Inf(1)
		s.Client().ZAdd(ctx, s.Keys().Due(other), redis.Z{Score: inf, Member: "a"})
		s.Client().ZAdd(ctx, s.Keys().Due(s.Keys().Shard("q")), redis.Z{Score: inf, Member: "q"})
		bad := "\x1b[2J" // invalid: quarantined as such, not as a copy
		s.Client().ZAdd(ctx, s.Keys().Due((s.Keys().Shard(bad)+1)%4), redis.Z{Score: inf, Member: bad})
		q, err := s.Quarantined(ctx, 10)
		slices.Sort(q.Own)
		if err != nil || !cmp.Equal(q.Own, []string{bad, "q"}) || !cmp.Equal(q.Wrong, []store.ShardItem{{ID: "a", Shard: other}}) || q.WrongN != 1 {
			t.Errorf("Quarantined = %+v, %v; want [%q q] and a in shard %d", q, err, bad, other)
		}
		if n, ids, err := s.Count(ctx, 0); err != nil || n != 4 || ids != nil {
			t.Errorf("Count(0) = %d, %q, %v; want 4 and no ids", n, ids, err)
		}
	})
}

// Quarantined counts every planted copy, past the first page of a shard
// and past max: a batch report subtracts them from its counts, and it
// read only the first 100 quarantined members of each shard, so a copy
// behind 100 quarantined items of its shard counted as a quarantined
// item of the set.
func TestQuarantinedCountsEveryCopy(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 2})
		ctx := context.Background()
		inf := math.Inf(1)
		// 1200 quarantined items of shard 0, then copies planted there
		// of ids of shard 1 that sort after them (equal scores sort by
		// member).
		var own []redis.Z
		for i := 0; len(own) < 1200; i++ {
			if id := fmt.Sprintf("item-%05d", i); s.Keys().Shard(id) == 0 {
				own = append(own, redis.Z{Score: inf, Member: id})
			}
		}
		var copies []redis.Z
		for i := 0; len(copies) < 3; i++ {
			if id := fmt.Sprintf("zz-copy-%d", i); s.Keys().Shard(id) == 1 {
				copies = append(copies, redis.Z{Score: inf, Member: id})
			}
		}
		s.Client().ZAdd(ctx, s.Keys().Due(0), append(own, copies...)...)
		q, err := s.Quarantined(ctx, 2)
		if err != nil || len(q.Own) != 2 || len(q.Wrong) != 2 || q.WrongN != 3 {
			t.Fatalf("Quarantined(2) = %d own, %+v, %d copies, %v; want 2 own, 2 listed and 3 copies counted", len(q.Own), q.Wrong, q.WrongN, err)
		}
		if q.Wrong[0].Shard != 0 {
			t.Errorf("copy %+v: want shard 0, where it was planted", q.Wrong[0])
		}
	})
}

// CountWrongShard counts the quarantined copies planted in another
// shard than their ids' in one round trip, leaves out the shards asked,
// and says Partial when a shard holds more quarantined members than its
// part of the budget. Status and the API's summary read it; before,
// they counted such a copy as an item, and a quarantined one.
func TestCountWrongShard(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 4})
		ctx := context.Background()
		inf := math.Inf(1)
		if w, err := s.CountWrongShard(ctx); err != nil || w != (store.WrongShardCount{}) {
			t.Errorf("CountWrongShard of an empty set = %+v, %v; want none", w, err)
		}
		s.Add(ctx, "a", "b", "q")
		other := (s.Keys().Shard("a") + 1) % 4
		s.Client().ZAdd(ctx, s.Keys().Due(other), redis.Z{Score: inf, Member: "a"})
		s.Client().ZAdd(ctx, s.Keys().Due((s.Keys().Shard("b")+2)%4), redis.Z{Score: inf, Member: "b"})
		s.Client().ZAdd(ctx, s.Keys().Due(s.Keys().Shard("q")), redis.Z{Score: inf, Member: "q"}) // its own
		bad := "\x1b[2J"                                                                          // invalid: no copy
		s.Client().ZAdd(ctx, s.Keys().Due((s.Keys().Shard(bad)+1)%4), redis.Z{Score: inf, Member: bad})
		// A copy not quarantined yet (no claim met it) is not counted.
		s.Client().ZAdd(ctx, s.Keys().Due((s.Keys().Shard("q")+1)%4), redis.Z{Score: 1, Member: "q"})
		if w, err := s.CountWrongShard(ctx); err != nil || w != (store.WrongShardCount{N: 2}) {
			t.Errorf("CountWrongShard = %+v, %v; want 2 copies, not partial", w, err)
		}
		if w, err := s.CountWrongShard(ctx, other); err != nil || w.N != 1 {
			t.Errorf("CountWrongShard skipping shard %d = %+v, %v; want 1 copy", other, w, err)
		}
		// More quarantined members in one shard than its part of the
		// budget: those read are counted, and the count says so.
		var own []redis.Z
		for i := 0; len(own) < store.WrongShardScanBudget/4+1; i++ {
			if id := fmt.Sprintf("item-%05d", i); s.Keys().Shard(id) == other {
				own = append(own, redis.Z{Score: inf, Member: id})
			}
		}
		s.Client().ZAdd(ctx, s.Keys().Due(other), own...)
		if w, err := s.CountWrongShard(ctx); err != nil || w != (store.WrongShardCount{N: 2, Partial: true}) {
			t.Errorf("CountWrongShard past the budget = %+v, %v; want 2 copies (a sorts first), partial", w, err)
		}
		s.Client().Set(ctx, s.Keys().Due(other), "garbage", 0)
		if w, err := s.CountWrongShard(ctx); !errors.Is(err, store.ErrDamaged) || w.N != 1 {
			t.Errorf("CountWrongShard with shard %d damaged = %+v, %v; want 1 copy and ErrDamaged", other, w, err)
		}
	})
}
