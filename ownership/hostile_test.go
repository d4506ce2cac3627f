package ownership_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// An epoch marker of inf, 1e300 or a time far ahead holds the shard off
// one TTL at most, logged once, and the item is claimed after it. Before,
// inf and 1e300 overflowed the hold in the reply, so every claim asked
// Redis again and logged the hold again (about 40 warn lines a second)
// and none succeeded, and a far-future marker held the shard until then.
func TestDamagedEpochMarkerHoldsOneTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	const ttl = 500 * time.Millisecond
	for _, mark := range []string{"inf", "1e300", fmt.Sprint(time.Now().Add(365 * 24 * time.Hour).UnixMilli())} {
		st := openStore(t, srv.Addr(), "")
		var logs testutil.Buffer
		m, err := ownership.New(st, ownership.Config{TTL: ttl, Logger: zerolog.New(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ctx := t.Context()
		st.Add(ctx, "a")
		st.Client().Set(ctx, st.Keys().Epoch(0), mark, 0)
		start := time.Now()
		var claimed bool
		for time.Since(start) < 5*ttl && !claimed {
			leases, err := m.ClaimIDs(ctx, ownership.ClaimIDsParams{IDs: []string{"a"}})
			if err != nil && !errors.Is(err, ownership.ErrHeldOff) {
				t.Fatalf("marker %s: %v", mark, err)
			}
			claimed = len(leases) == 1
			if d := m.Held(0); d > ttl {
				t.Fatalf("marker %s: Held = %v, more than one ttl", mark, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !claimed {
			t.Errorf("marker %s: not claimed within %v", mark, 5*ttl)
		}
		if n := strings.Count(logs.String(), "shard held off"); n != 1 {
			t.Errorf("marker %s: hold logged %d times, want once:\n%s", mark, n, logs.String())
		}
	}
}

// Items planted under ids that store.ValidateID refuses (empty, escape
// sequences, NUL, 200 KB) never become leases: the claim that finds one
// quarantines it with the reason as its error, logs it once with the id
// quoted and cut, and counts it; store.Remove can still remove it.
// Before, an empty id reached the sink and a 200 KB id made 400 KB log
// lines.
func TestPlantedIDsQuarantined(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	var logs testutil.Buffer
	m, err := ownership.New(st, ownership.Config{TTL: time.Second, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := t.Context()
	st.Add(ctx, "fine")
	bad := []string{"", "\x1b[31mred", "nul\x00", strings.Repeat("x", 200<<10)}
	named := "\x1b]0;title\x07" // claimed by name, as a batch run does with ids it read back
	for _, id := range append(bad, named) {
		st.Client().ZAdd(ctx, st.Keys().Due(0), redis.Z{Score: 0, Member: id})
	}
	var got []string
	for range 3 {
		res, err := m.ClaimPick(ctx, ownership.ClaimPickParams{Workers: []int{0, 1, 2, 3, 4, 5, 6, 7}})
		var hold *ownership.HoldError
		if errors.As(err, &hold) {
			time.Sleep(hold.For)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range res.Leases {
			got = append(got, l.ID())
		}
	}
	if leases, err := m.ClaimIDs(ctx, ownership.ClaimIDsParams{IDs: []string{named}}); err != nil || len(leases) != 0 {
		t.Errorf("claim by name of an invalid id = %v, %v; want no lease", leases, err)
	}
	if len(got) != 1 || got[0] != "fine" {
		t.Errorf("leases for %q, want only fine", got)
	}
	for _, id := range append(bad, named) {
		if score := st.Client().ZScore(ctx, st.Keys().Due(0), id).Val(); !math.IsInf(score, 1) {
			t.Errorf("%.20q: due score %v, want +inf (quarantined)", id, score)
		}
		if msg := st.Client().HGet(ctx, st.Keys().Errors(0), id).Val(); !strings.Contains(msg, "not valid") {
			t.Errorf("%.20q: error %q, want the reason", id, msg)
		}
	}
	if n := m.Stats().DamagedIDs.Load(); n != int64(len(bad)+1) {
		t.Errorf("DamagedIDs = %d, want %d", n, len(bad)+1)
	}
	text := logs.String()
	if n := strings.Count(text, "its id, read back from redis"); n != len(bad)+1 {
		t.Errorf("%d log lines for %d invalid ids, want one each:\n%.2000s", n, len(bad)+1, text)
	}
	for _, line := range strings.Split(text, "\n") {
		if len(line) > 2048 || strings.ContainsAny(line, "\x1b\x07\x00") {
			t.Errorf("log line of %d bytes with raw control bytes or the whole id: %.300q", len(line), line)
		}
	}
	if n, err := st.Remove(ctx, append(bad, named)...); err != nil || n != len(bad)+1 {
		t.Errorf("Remove = %d, %v; want every planted item removed", n, err)
	}
}

// An item planted in another shard than its id's is a second copy of
// it, whose claims would not exclude the first's: the pick that finds
// it quarantines it, saying where it belongs and how to remove it, and
// only the copy in its own shard is synced. RemoveInShard removes it.
// Before, both copies were claimed at once, by two workers.
func TestPlantedInWrongShardQuarantined(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	ctx := t.Context()
	st, err := store.Open(ctx, store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "ws", Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs testutil.Buffer
	m, err := ownership.New(st, ownership.Config{TTL: time.Second, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const id = "customer-7"
	home := st.Keys().Shard(id)
	other := (home + 1) % 4
	st.Add(ctx, id)
	st.Client().ZAdd(ctx, st.Keys().Due(other), redis.Z{Score: 0, Member: id})

	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if len(got) > 0 && math.IsInf(st.Client().ZScore(ctx, st.Keys().Due(other), id).Val(), 1) {
			break
		}
		for _, sh := range []int{home, other} {
			res, err := m.ClaimPick(ctx, ownership.ClaimPickParams{Shard: sh, Workers: []int{0, 1}})
			var hold *ownership.HoldError
			if errors.As(err, &hold) {
				time.Sleep(hold.For)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range res.Leases {
				if l.Shard() != home {
					t.Errorf("lease of %s in shard %d; its shard is %d", l.ID(), l.Shard(), home)
				}
				got = append(got, l.ID())
			}
		}
	}
	if len(got) != 1 {
		t.Errorf("leases for %q; want one, in shard %d", got, home)
	}
	if score := st.Client().ZScore(ctx, st.Keys().Due(other), id).Val(); !math.IsInf(score, 1) {
		t.Errorf("the copy in shard %d: due score %v, want +inf (quarantined)", other, score)
	}
	// Short enough for status's LAST ERROR column (60 runes at 16
	// shards), which cut the fix off the old text.
	want := fmt.Sprintf("in shard %d, not its own (%d): syncd items remove --shard %d", other, home, other)
	if msg := st.Client().HGet(ctx, st.Keys().Errors(other), id).Val(); msg != want {
		t.Errorf("error %q, want %q", msg, want)
	}
	// Logged as what it is: its id is valid.
	if n := strings.Count(logs.String(), "item quarantined: planted in another shard than its id's"); n != 1 ||
		strings.Contains(logs.String(), "is not one syncd accepts") {
		t.Errorf("%d log lines for the planted copy, want 1, and none that calls its id bad:\n%s", n, logs.String())
	}
	if m.Stats().WrongShard.Load() != 1 || m.Stats().DamagedIDs.Load() != 0 {
		t.Errorf("counted %d wrong-shard and %d invalid ids, want 1 and 0", m.Stats().WrongShard.Load(), m.Stats().DamagedIDs.Load())
	}
	if n, err := st.RemoveInShard(ctx, other, id); err != nil || n != 1 {
		t.Errorf("RemoveInShard = %d, %v; want 1", n, err)
	}
	if st.Client().Exists(ctx, st.Keys().Due(other)).Val() != 0 || st.Client().ZScore(ctx, st.Keys().Due(home), id).Err() != nil {
		t.Errorf("after RemoveInShard: shard %d's due index is not empty, or the item left shard %d", other, home)
	}
	if _, err := st.RemoveInShard(ctx, 4, id); err == nil || !strings.Contains(err.Error(), "no shard 4 (the shards are 0 to 3)") {
		t.Errorf("RemoveInShard(4) = %v; want no shard 4", err)
	}
}
