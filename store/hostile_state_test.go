package store_test

import (
	"errors"
	"fmt"
	"math"
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
		if n, _, err := s.Count(ctx, 10); !errors.Is(err, store.ErrDamaged) || n != 3 {
			t.Errorf("Count = %d, %v; want the 3 items of the other shards and shard 1's damage", n, err)
		}
		for _, sh := range []int{1, 3} {
			var de *store.DamageError
			if _, err := s.Pending(ctx, sh, 0, 0, 10); !errors.As(err, &de) || de.Shard != sh {
				t.Errorf("Pending of shard %d: %v; want a *DamageError", sh, err)
			}
			if _, _, err := s.List(ctx, sh, 0, 10); !errors.As(err, &de) || de.Shard != sh {
				t.Errorf("List of shard %d: %v; want a *DamageError", sh, err)
			}
		}
		if n, err := s.ShardSize(ctx, 3); err != nil || n != 1 {
			t.Errorf("ShardSize(3) = %d, %v; want 1", n, err)
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

// An epoch marker that is not one syncd writes (a plain decimal time at
// most one ttl ahead) is rewritten to hold the shard off one ttl, and the
// claim says so: Redis may have lost data, and one ttl is all a lease
// from before can last. Before, "inf" or 1e300 overflowed the hold in
// the reply (held for ever, about 40 warn lines a second) and a finite
// far-future marker held the shard until then.
func TestDamagedEpochMarker(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb, key := s.Client(), s.Keys().Epoch(0)
		s.Add(ctx, "a")
		const ttl = 300 * time.Millisecond
		p := store.ClaimIDsParams{IDs: []string{"a"}, Records: []*store.Record{record("w")}, TTL: ttl}
		now, _ := s.Now(ctx)
		for name, plant := range map[string]func(){
			"1e300":       func() { rdb.Set(ctx, key, "1e300", 0) },
			"inf":         func() { rdb.Set(ctx, key, "inf", 0) },
			"negative":    func() { rdb.Set(ctx, key, "-5", 0) },
			"garbage":     func() { rdb.Set(ctx, key, "garbage", 0) },
			"a year away": func() { rdb.Set(ctx, key, fmt.Sprint(now+365*24*3600*1000), 0) },
			"20 digits":   func() { rdb.Set(ctx, key, strings.Repeat("9", 20), 0) },
			"a hash":      func() { rdb.Del(ctx, key); rdb.HSet(ctx, key, "f", "v") },
		} {
			plant()
			_, err := s.ClaimIDs(ctx, p)
			var hold *store.HoldError
			if !errors.As(err, &hold) || !hold.Rewritten || hold.For != ttl {
				t.Errorf("%s: claim = %v; want held off one ttl, the marker rewritten", name, err)
				continue
			}
			mark, err := rdb.Get(ctx, key).Int64()
			if now, _ := s.Now(ctx); err != nil || mark < now || mark > now+ttl.Milliseconds() {
				t.Errorf("%s: marker now %d, %v; want a time within one ttl of %d", name, mark, err, now)
			}
			if d, err := s.MarkEpoch(ctx, 0, ttl); err != nil || d > ttl {
				t.Errorf("%s: MarkEpoch = %v, %v; want at most one ttl", name, d, err)
			}
			plant()
			if d, err := s.MarkEpoch(ctx, 0, ttl); err != nil || d > ttl || d < ttl-50*time.Millisecond {
				t.Errorf("%s: MarkEpoch over the planted marker = %v, %v; want one ttl", name, d, err)
			}
		}
		// A marker syncd writes is kept, and so is its hold.
		now, _ = s.Now(ctx)
		rdb.Set(ctx, key, fmt.Sprint(now+ttl.Milliseconds()/2), 0)
		_, err := s.ClaimIDs(ctx, p)
		if hold := (*store.HoldError)(nil); !errors.As(err, &hold) || hold.Rewritten || hold.For > ttl/2 {
			t.Errorf("claim under a marker half a ttl ahead = %v; want held off for what is left, not rewritten", err)
		}
		time.Sleep(ttl)
		if res, err := s.ClaimIDs(ctx, p); err != nil || res.Items[0].Code != store.ClaimOK {
			t.Errorf("claim after the hold = %+v, %v", res, err)
		}
	})
}

// metaValue is a meta hash value as the scripts write it (meta.go):
// 7 bytes of fence, 6 of lastSync, 1 of attempts.
func metaValue(fence uint64, last int64, attempts byte) string {
	b := make([]byte, 14)
	for i := 6; i >= 0; i-- {
		b[i], fence = byte(fence), fence>>8
	}
	for i, l := 12, uint64(last); i >= 7; i-- {
		b[i], l = byte(l), l>>8
	}
	b[13] = attempts
	return string(b)
}

// A stored fence at or past 2^53-1 cannot be raised exactly in Lua (a
// double): the claim quarantines the item with an error that says what
// is wrong and how to fix it, and reports it once; a forced release
// refuses it and changes nothing. Before, a fence of 2^53+2 stopped
// rising and two claims got the same fence.
func TestFenceBeyondExactLimit(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb, k := s.Client(), s.Keys()
		s.Add(ctx, "a", "b", "c", "d", "e")
		// 2^53+3: a double would round it to ...996. d and e show the
		// fence exactly too: the largest 7 bytes hold, and one whose
		// digits in the middle are zeros.
		rdb.HSet(ctx, k.Meta(0), "a", metaValue(1<<53+3, 1000, 0))
		rdb.HSet(ctx, k.Meta(0), "b", metaValue(store.MaxFence-1, 1000, 0))
		rdb.HSet(ctx, k.Meta(0), "d", metaValue(1<<56-1, 1000, 0))
		rdb.HSet(ctx, k.Meta(0), "e", metaValue(9007200000000001, 1000, 0))
		res, err := pickResult(t, s, 0, 6)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]store.ItemClaim{}
		for _, r := range res.Items {
			got[r.ID] = r
		}
		if got["a"].Code != store.ClaimDamaged || got["d"].Code != store.ClaimDamaged || got["e"].Code != store.ClaimDamaged ||
			got["c"].Code != store.ClaimOK {
			t.Errorf("pick = %+v; want a, d and e quarantined (ClaimDamaged), c claimed", res.Items)
		}
		for id, f := range map[string]string{"d": "72057594037927935", "e": "9007200000000001"} {
			if msg := rdb.HGet(ctx, k.Errors(0), id).Val(); !strings.Contains(msg, "fence "+f+" in") {
				t.Errorf("%s's error %q does not give its fence, %s", id, msg, f)
			}
		}
		if r := got["b"]; r.Code != store.ClaimOK || r.Fence != store.MaxFence {
			t.Errorf("b, fence 2^53-2: %+v; want claimed with fence 2^53-1 exactly", r)
		}
		if score := rdb.ZScore(ctx, k.Due(0), "a").Val(); !math.IsInf(score, 1) {
			t.Errorf("a's due score = %v, want +inf (quarantined)", score)
		}
		if msg := rdb.HGet(ctx, k.Errors(0), "a").Val(); !strings.Contains(msg, "2^53-1") ||
			!strings.Contains(msg, "fence 9007199254740995 in") ||
			!strings.Contains(msg, "HDEL "+k.Meta(0)+" a ") || !strings.HasSuffix(msg, "syncd requeue a") {
			t.Errorf("a's error %q does not say what is wrong (the fence as stored) and how to fix it (for a)", msg)
		}
		// b now holds 2^53-1: a claim by name refuses it too.
		rdb.ZAdd(ctx, k.Due(0), redis.Z{Score: 0, Member: "b"})
		rdb.Del(ctx, k.Record(0, "b"))
		if r := claim(t, s, record("w"), time.Minute, "b")[0]; r.Code != store.ClaimDamaged {
			t.Errorf("claim of b at 2^53-1 = %+v, want ClaimDamaged", r)
		}
		// A forced release reports no raise it did not make.
		before := rdb.HGet(ctx, k.Meta(0), "a").Val()
		if held, fence, err := s.ForceRelease(ctx, "a"); !errors.Is(err, store.ErrFenceLimit) || held || fence != 0 ||
			!strings.Contains(err.Error(), fmt.Sprint(uint64(1<<53+3))) || !strings.HasSuffix(err.Error(), "syncd requeue a") {
			t.Errorf("ForceRelease = %v, %d, %v; want ErrFenceLimit naming the fence", held, fence, err)
		}
		if after := rdb.HGet(ctx, k.Meta(0), "a").Val(); after != before {
			t.Error("ForceRelease changed the meta value it refused")
		}
		// The fix the error gives works.
		rdb.HDel(ctx, k.Meta(0), "a")
		s.Requeue(ctx, "a")
		if r := claim(t, s, record("w"), time.Minute, "a")[0]; r.Code != store.ClaimOK || r.Fence >= store.MaxFence {
			t.Errorf("claim after the fix = %+v", r)
		}
	})
}

// A meta value of any length but 14 or 17 bytes was not written by syncd
// and reads as zeros without being walked; the claim replaces it. Before,
// the script read every byte of a 20 MB value (0.93 s of Redis on one
// call), and its first 7 bytes as a fence.
func TestOverlongMetaValue(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		// Copying 20 MB into Lua is slow on the embedded store under
		// -race: a read timeout would retry the claim, which then finds
		// its own claims.
		s := open(store.Config{Shards: 1, ReadTimeout: 30 * time.Second})
		rdb, k := s.Client(), s.Keys()
		s.Add(ctx, "big", "short", "odd")
		rdb.HSet(ctx, k.Meta(0), "big", strings.Repeat("x", 20<<20))
		rdb.HSet(ctx, k.Meta(0), "short", "xxxxxxxxxxxxx")
		rdb.HSet(ctx, k.Meta(0), "odd", metaValue(1, 1000, 0)+"x")
		res, err := pickResult(t, s, 0, 4)
		if err != nil || len(res.Items) != 3 {
			t.Fatalf("pick = %+v, %v; want all three claimed", res, err)
		}
		now, _ := s.Now(ctx)
		for _, r := range res.Items {
			if r.Code != store.ClaimOK || r.Attempt != 1 || !r.LastSync.IsZero() || r.Fence < uint64(now-60000)*1000 {
				t.Errorf("%s: %+v; want claimed as never synced, fence from the clock", r.ID, r)
			}
			if n := rdb.HStrLen(ctx, k.Meta(0), r.ID).Val(); n != 14 {
				t.Errorf("%s: meta value now %d bytes, want 14", r.ID, n)
			}
		}
		for _, v := range []string{strings.Repeat("x", 20<<20), "xxxxxxxxxxxxx", metaValue(1, 1000, 0) + "x"} {
			if f, l, a := store.ParseMeta(v); f != 0 || l != 0 || a != 0 {
				t.Errorf("ParseMeta of %d bytes = %d, %d, %d; want zeros, as the scripts", len(v), f, l, a)
			}
		}
	})
}

// A receipt key of another type does not stop a pick (SET replaces it),
// and a record key of another type shows in List as a bad record of its
// item, not as an error of the whole shard.
func TestPlantedReceiptAndRecordKeys(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb, k := s.Client(), s.Keys()
		s.Add(ctx, "a", "b")
		s.MarkEpoch(ctx, 0, 0)
		rec := record("w")
		rdb.HSet(ctx, k.Receipt(0, rec.Token), "f", "v")
		rdb.HSet(ctx, k.Record(0, "b"), "f", "v")
		res, err := s.ClaimPick(ctx, store.ClaimPickParams{Records: []*store.Record{rec}, TTL: time.Minute})
		if err != nil || len(res.Items) != 1 || res.Items[0].ID != "a" {
			t.Fatalf("pick over a planted receipt key = %+v, %v", res, err)
		}
		if ids, err := s.ClaimReceipt(ctx, 0, rec.Token); err != nil || len(ids) != 1 || ids[0] != "a" {
			t.Errorf("receipt = %q, %v", ids, err)
		}
		items, _, err := s.List(ctx, 0, 0, 10)
		if err != nil || len(items) != 2 {
			t.Fatalf("List = %+v, %v", items, err)
		}
		for _, it := range items {
			if it.ID == "b" && !errors.Is(it.RecordErr, store.ErrBadRecord) {
				t.Errorf("b, held by a hash: RecordErr %v, want ErrBadRecord", it.RecordErr)
			}
		}
	})
}
