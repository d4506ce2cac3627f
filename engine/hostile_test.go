package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// Tests of Redis state planted by hand under a running engine (issue
// #15), on the embedded store and on a real redis-server.

// bothBackends runs f on the embedded store (addr "") and on a fresh
// redis-server.
func bothBackends(t *testing.T, f func(t *testing.T, addr string)) {
	t.Run("embedded", func(t *testing.T) { t.Parallel(); f(t, "") })
	t.Run("redis", func(t *testing.T) { t.Parallel(); f(t, redistest.Start(t, nil).Addr()) })
}

// loggedEngine is newEngine with its log (info and up) kept in logs.
func loggedEngine(t *testing.T, st *store.Store, sink sinks.Sink, cfg engine.Config, logs *testutil.Buffer) *engine.Engine {
	t.Helper()
	cfg.Logger = zerolog.New(logs).Level(zerolog.InfoLevel)
	e, err := engine.New(st, sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	return e
}

// idsByShard returns n item ids of each shard.
func idsByShard(st *store.Store, n int) [][]string {
	out := make([][]string, st.Keys().Shards())
	for i, left := 0, n*len(out); left > 0; i++ {
		id := fmt.Sprintf("item-%d", i)
		if sh := st.Keys().Shard(id); len(out[sh]) < n {
			out[sh] = append(out[sh], id)
			left--
		}
	}
	return out
}

// synced reports whether every id has synced at least once.
func synced(rec *recorder, ids []string) bool {
	seen := map[string]bool{}
	for _, ev := range rec.snapshot() {
		if ev.err == nil {
			seen[ev.id] = true
		}
	}
	for _, id := range ids {
		if !seen[id] {
			return false
		}
	}
	return true
}

// A wrong-type meta or due key on one shard costs that shard only: every
// other shard keeps syncing, the damage is logged once, named by
// Engine.Damaged and counted in syncd_shards_damaged; once the key is
// fixed the shard's items sync within a probe and that is logged once.
// Before, the claim round failed as a whole, in a loop: 0 syncs in 20 s
// on every shard.
func TestDamagedShardCostsOnlyItself(t *testing.T) {
	for _, key := range []string{"meta", "due"} {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			bothBackends(t, func(t *testing.T, addr string) { damagedShard(t, addr, key) })
		})
	}
}

func damagedShard(t *testing.T, addr, key string) {
	ctx := t.Context()
	st := openStore(t, addr, 4)
	ids := idsByShard(st, 3)
	var healthy []string
	for sh, group := range ids {
		if _, err := st.Add(ctx, group...); err != nil {
			t.Fatal(err)
		}
		if sh != 3 {
			healthy = append(healthy, group...)
		}
	}
	// Shard 3's items have waited longest: its claims come first.
	for _, id := range ids[3] {
		st.Client().ZAdd(ctx, st.Keys().Due(3), redis.Z{Score: float64(time.Now().Add(-time.Minute).UnixMilli()), Member: id})
	}
	bad := map[string]string{"meta": st.Keys().Meta(3), "due": st.Keys().Due(3)}[key]
	st.Client().Del(ctx, bad)
	st.Client().Set(ctx, bad, "garbage", 0)
	rec := &recorder{}
	var logs testutil.Buffer
	// The count finds the damage too, and holds it until a count finds
	// it fixed (see damage): counted often, the shard is reported fixed
	// soon after its probe.
	e := loggedEngine(t, st, rec, engine.Config{Workers: 4, Interval: time.Hour, Poll: 10 * time.Millisecond,
		CountInterval: engine.CountIntervalMin}, &logs)
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "every healthy shard's items synced", func() bool { return synced(rec, healthy) })
	waitFor(t, time.Second, "shard 3 reported", func() bool { return len(e.Damaged()) > 0 })
	damaged := e.Damaged()
	var de *store.DamageError
	if len(damaged) != 1 || !errors.As(damaged[0], &de) || de.Shard != 3 || !strings.Contains(damaged[0].Error(), bad) {
		t.Fatalf("Damaged() = %v, want shard 3 with %s named", damaged, bad)
	}
	// The round that probed the damaged shard marked it before it
	// returned: Ready follows at the round's end, not at once.
	waitFor(t, time.Second, "ready: a damaged shard is no round error", e.Ready)
	if m := scrape(t, engine.Handler(e)); !strings.Contains(m, "\nsyncd_shards_damaged 1\n") {
		t.Errorf("metrics lack syncd_shards_damaged 1:\n%s", m)
	}
	// Fixed: the shard's items sync within a probe.
	st.Client().Del(ctx, bad)
	if key == "due" {
		st.Add(ctx, ids[3]...)
	}
	waitFor(t, 8*time.Second, "shard 3's items synced after the fix", func() bool { return synced(rec, ids[3]) })
	waitFor(t, time.Second, "shard 3 no longer reported", func() bool { return len(e.Damaged()) == 0 })
	e.Stop(context.Background())
	if n := strings.Count(logs.String(), "shard damaged"); n != 1 {
		t.Errorf("damage logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "shard works again"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "claim round failed") {
		t.Errorf("a damaged shard failed whole claim rounds:\n%s", logs.String())
	}
}

// Items whose due score was set to 0 or -inf by hand are due, the longest
// waiting of all, and are synced. Before, the scheduler read a head of 0
// or less as "nothing due": the shard stopped, silently.
func TestPlantedDueScoresSync(t *testing.T) {
	bothBackends(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		st := openStore(t, addr, 2)
		ids := idsByShard(st, 1)
		st.Client().ZAdd(ctx, st.Keys().Due(0), redis.Z{Score: 0, Member: ids[0][0]})
		st.Client().Do(ctx, "ZADD", st.Keys().Due(1), "-inf", ids[1][0])
		rec := &recorder{}
		e := newEngine(t, st, rec, engine.Config{Workers: 2, Interval: time.Hour, Poll: 10 * time.Millisecond})
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 3*time.Second, "the items due at 0 and -inf synced", func() bool { return synced(rec, []string{ids[0][0], ids[1][0]}) })
	})
}

// Items planted under ids syncd refuses, or with a fence it cannot raise
// exactly, never reach the sink: each is quarantined, logged once and
// counted, and every other item syncs. Before, an empty id reached the
// sink and a fence of 2^53+2 was issued again and again.
func TestPlantedItemsNeverReachSink(t *testing.T) {
	bothBackends(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		st := openStore(t, addr, 2)
		st.Add(ctx, "fine-1", "fine-2", "fenced")
		sh := st.Keys().Shard("fenced")
		fence := make([]byte, 14)
		fence[0], fence[6] = 0x20, 2 // 2^53 + 2
		st.Client().HSet(ctx, st.Keys().Meta(sh), "fenced", string(fence))
		bad := []string{"", "\x1b[2J", strings.Repeat("y", 200<<10)}
		for _, id := range bad {
			st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard(id)), redis.Z{Score: 0, Member: id})
		}
		// A copy of fine-1 in the other shard: counted apart, its id is
		// valid.
		st.Client().ZAdd(ctx, st.Keys().Due(1-st.Keys().Shard("fine-1")), redis.Z{Score: 0, Member: "fine-1"})
		rec := &recorder{}
		var logs testutil.Buffer
		e := loggedEngine(t, st, rec, engine.Config{Workers: 4, Interval: time.Hour, Poll: 10 * time.Millisecond}, &logs)
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 3*time.Second, "the valid items synced", func() bool { return synced(rec, []string{"fine-1", "fine-2"}) })
		waitFor(t, 3*time.Second, "every planted item quarantined", func() bool {
			n, q, err := st.Count(ctx, 10)
			return err == nil && n == 7 && len(q) == 5
		})
		e.Stop(context.Background())
		for _, ev := range rec.snapshot() {
			if ev.id != "fine-1" && ev.id != "fine-2" {
				t.Errorf("the sink was given %.20q", ev.id)
			}
		}
		m := scrape(t, engine.Handler(e))
		for _, want := range []string{`syncd_items_damaged_total{reason="fence"} 1`, `syncd_items_damaged_total{reason="id"} 3`,
			`syncd_items_damaged_total{reason="wrong_shard"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if n := strings.Count(logs.String(), "item quarantined"); n != 5 {
			t.Errorf("%d quarantine log lines, want 5 (one per planted item):\n%.3000s", n, logs.String())
		}
	})
}

// A batch run over a batch marker of 1e300 (or inf) syncs every item:
// the store starts a fresh run (store.TestJoinBatchReplacesDamagedMarker)
// and the engine's batch path agrees. Before, syncd batch exited 0
// having synced none.
func TestBatchOverDamagedMarker(t *testing.T) {
	bothBackends(t, func(t *testing.T, addr string) {
		for _, mark := range []string{"1e300", "inf"} {
			ctx := t.Context()
			st := openStore(t, addr, 2)
			ids := []string{"a", "b", "c", "d"}
			st.Add(ctx, ids...)
			st.Client().Set(ctx, st.Keys().Batch(), mark, 0)
			rec := &recorder{}
			e := newEngine(t, st, rec, engine.Config{Workers: 2, Poll: 5 * time.Millisecond})
			rep, err := e.RunBatch(ctx, engine.BatchOptions{})
			if err != nil || rep.Synced != len(ids) || !rep.OK() || !synced(rec, ids) {
				t.Errorf("batch over marker %s = %+v, %v; want all %d synced here", mark, rep, err, len(ids))
			}
		}
	})
}

// A damaged meta key on a shard with no items, which no claim meets, is
// found by the count: logged once, named by Engine.Damaged (/readyz) and
// counted in syncd_shards_damaged until a count finds it fixed, logged
// once again then. With one shard, whose every claim succeeds (it is
// empty), the damage does not flap. Before, status alone named it.
func TestCountedDamageOnEmptyShard(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			bothBackends(t, func(t *testing.T, addr string) {
				ctx := t.Context()
				st := openStore(t, addr, shards)
				empty := shards - 1
				for _, group := range idsByShard(st, 2)[:empty] {
					st.Add(ctx, group...)
				}
				bad := st.Keys().Meta(empty)
				st.Client().Set(ctx, bad, "garbage", 0)
				var logs testutil.Buffer
				e := loggedEngine(t, st, &recorder{}, engine.Config{Workers: 2, Poll: 5 * time.Millisecond,
					CountInterval: engine.CountIntervalMin}, &logs)
				if err := e.Start(ctx); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 3*time.Second, "the empty shard reported", func() bool { return len(e.Damaged()) > 0 })
				// Several counts and a hundred claim rounds: one finding,
				// logged once.
				time.Sleep(6 * engine.CountIntervalMin)
				var de *store.DamageError
				if d := e.Damaged(); len(d) != 1 || !errors.As(d[0], &de) || de.Shard != empty || !strings.Contains(d[0].Error(), bad) {
					t.Fatalf("Damaged() = %v, want shard %d with %s named", d, empty, bad)
				}
				if m := scrape(t, engine.Handler(e)); !strings.Contains(m, "\nsyncd_shards_damaged 1\n") {
					t.Errorf("metrics lack syncd_shards_damaged 1:\n%s", m)
				}
				st.Client().Del(ctx, bad)
				waitFor(t, 3*time.Second, "the shard no longer reported", func() bool { return len(e.Damaged()) == 0 })
				e.Stop(context.Background())
				if n := strings.Count(logs.String(), "shard damaged"); n != 1 {
					t.Errorf("damage logged %d times, want once:\n%s", n, logs.String())
				}
				if n := strings.Count(logs.String(), "shard works again"); n != 1 {
					t.Errorf("recovery logged %d times, want once:\n%s", n, logs.String())
				}
			})
		})
	}
}

// quarantinedIn returns n quarantined members (score +inf) of a due
// index whose ids, made by format from 0 on, hash to shard: its own
// items there, or copies planted in another shard's.
func quarantinedIn(st *store.Store, shard, n int, format string) []redis.Z {
	var out []redis.Z
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf(format, i); st.Keys().Shard(id) == shard {
			out = append(out, redis.Z{Score: math.Inf(1), Member: id})
		}
	}
	return out
}

// batchOnce runs one batch over st syncing into rec and returns
// its report; the run must end by itself within 10 s.
func batchOnce(t *testing.T, st *store.Store, rec *recorder) *engine.Report {
	t.Helper()
	e := newEngine(t, st, rec, engine.Config{Workers: 2, Poll: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rep, err := e.RunBatch(ctx, engine.BatchOptions{})
	if err != nil || ctx.Err() != nil {
		t.Fatalf("RunBatch = %+v, %v (ctx %v); want it to end by itself", rep, err, ctx.Err())
	}
	return rep
}

// A batch run's report lists a copy planted in another shard than its
// id's apart (WrongShard, with its shard), not among the quarantined
// items, and counts the real item of that id as synced. Before, the
// report said "quarantined 1: fine-1" while fine-1 had synced.
func TestBatchReportsWrongShardApart(t *testing.T) {
	bothBackends(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		st := openStore(t, addr, 2)
		ids := []string{"fine-1", "fine-2", "fine-3"}
		st.Add(ctx, ids...)
		other := 1 - st.Keys().Shard("fine-1")
		st.Client().ZAdd(ctx, st.Keys().Due(other), redis.Z{Score: 0, Member: "fine-1"})
		rep := batchOnce(t, st, &recorder{})
		want := []store.ShardItem{{ID: "fine-1", Shard: other}}
		if rep.Quarantined != 0 || len(rep.QuarantinedIDs) != 0 || !cmp.Equal(rep.WrongShard, want) ||
			rep.Items != len(ids) || rep.Synced != len(ids) || rep.Unsynced != 0 || rep.OK() {
			t.Errorf("report = %+v; want %d items synced, none quarantined, the copy in WrongShard %+v, not OK", rep, len(ids), want)
		}
	})
}

// The copy is apart however many items of its shard are quarantined
// before it. Before, the report read only the first 100 quarantined
// members of each shard, and a copy behind them counted as a
// quarantined item of the set (151 quarantined of 154 items here).
func TestBatchWrongShardBehindQuarantined(t *testing.T) {
	bothBackends(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		st := openStore(t, addr, 2)
		ids := []string{"fine-1", "fine-2", "fine-3"}
		st.Add(ctx, ids...)
		other := 1 - st.Keys().Shard("fine-1")
		// 150 quarantined items of that shard, sorting before the copy.
		quar := quarantinedIn(st, other, 150, "a-%04d")
		st.Client().ZAdd(ctx, st.Keys().Due(other), append(quar, redis.Z{Score: 0, Member: "fine-1"})...)
		rep := batchOnce(t, st, &recorder{})
		want := []store.ShardItem{{ID: "fine-1", Shard: other}}
		if rep.Quarantined != len(quar) || rep.Items != len(ids)+len(quar) || rep.Synced != len(ids) || !cmp.Equal(rep.WrongShard, want) || rep.WrongShardCount != 1 {
			t.Errorf("report: %d items, %d synced, %d quarantined, copies %+v (%d); want %d, %d, %d and %+v (1)",
				rep.Items, rep.Synced, rep.Quarantined, rep.WrongShard, rep.WrongShardCount, len(ids)+len(quar), len(ids), len(quar), want)
		}
		// More copies than the report lists: all counted, 100 listed
		// (the report said 100 of 319, an outside trial).
		copies := quarantinedIn(st, 1-other, 150, "copy-%04d")
		st.Client().ZAdd(ctx, st.Keys().Due(other), copies...)
		rep = batchOnce(t, st, &recorder{})
		if rep.WrongShardCount != 1+len(copies) || len(rep.WrongShard) != 100 || rep.OK() {
			t.Errorf("report with %d more copies: %d counted, %d listed; want %d and 100", len(copies), rep.WrongShardCount, len(rep.WrongShard), 1+len(copies))
		}
	})
}

// A batch run over a set with a damaged shard syncs every other shard's
// items, ends, and names the shard in its report, which is then not OK.
// Before, every pass failed on the shard and the run never ended.
func TestBatchWithDamagedShard(t *testing.T) {
	bothBackends(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		st := openStore(t, addr, 4)
		ids := idsByShard(st, 2)
		var healthy []string
		for sh, group := range ids {
			st.Add(ctx, group...)
			if sh != 3 {
				healthy = append(healthy, group...)
			}
		}
		st.Client().Set(ctx, st.Keys().Meta(3), "garbage", 0)
		rec := &recorder{}
		rep := batchOnce(t, st, rec)
		if rep.OK() || rep.Synced != len(healthy) || rep.Items != len(healthy) || rep.SyncedElsewhere != 0 ||
			len(rep.Damaged) != 1 || !strings.Contains(rep.Damaged[0], "shard 3") || !synced(rec, healthy) {
			t.Errorf("report %+v; want the %d healthy items synced and shard 3 named", rep, len(healthy))
		}
	})
}

// A shard whose err hash alone is damaged syncs on, and the daemon says
// so: once when the count finds it, once when it is fixed. Before, only
// syncd status said it, while every failure there lost its message (an
// outside trial).
func TestDamagedErrorsKeyLogged(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	ctx := t.Context()
	st := openStore(t, srv.Addr(), 4)
	ids := idsByShard(st, 2)
	for _, group := range ids {
		st.Add(ctx, group...)
	}
	st.Client().Set(ctx, st.Keys().Errors(2), "garbage", 0)
	rec := &recorder{}
	var logs testutil.Buffer
	e := loggedEngine(t, st, rec, engine.Config{Workers: 2, Interval: time.Hour, Poll: 10 * time.Millisecond,
		CountInterval: engine.CountIntervalMin}, &logs)
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "shard 2's items synced", func() bool { return synced(rec, ids[2]) })
	waitFor(t, 3*time.Second, "the damage logged", func() bool { return strings.Contains(logs.String(), "err hash damaged") })
	st.Client().Del(ctx, st.Keys().Errors(2))
	waitFor(t, 3*time.Second, "the fix logged", func() bool { return strings.Contains(logs.String(), "err hash works again") })
	e.Stop(context.Background())
	if n := strings.Count(logs.String(), "err hash damaged"); n != 1 || !strings.Contains(logs.String(), st.Keys().Errors(2)) {
		t.Errorf("damage logged %d times, want once, naming the key:\n%s", n, logs.String())
	}
}
