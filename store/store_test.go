package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var prefixes atomic.Int64

// open returns a store on a fresh key prefix, closed at cleanup.
func open(t *testing.T, cfg store.Config) *store.Store {
	t.Helper()
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = fmt.Sprintf("t%d", prefixes.Add(1))
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s, err := store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// backends runs f against the embedded store and a real redis-server:
// both run the same scripts and must agree.
func backends(t *testing.T, f func(t *testing.T, open func(cfg store.Config) *store.Store)) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		f(t, func(cfg store.Config) *store.Store { return open(t, cfg) })
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, nil)
		f(t, func(cfg store.Config) *store.Store {
			cfg.Addrs = []string{srv.Addr()}
			return open(t, cfg)
		})
	})
}

func record(owner string) *store.Record {
	return &store.Record{Version: store.RecordVersion, Token: store.NewToken(), State: store.StateSyncing,
		Owner: store.Owner{Host: owner, PID: 1, Run: "run", Worker: 0}}
}

// claim claims ids by name, setting the epoch marker first when needed.
func claim(t *testing.T, s *store.Store, rec *store.Record, ttl time.Duration, ids ...string) []store.ItemClaim {
	t.Helper()
	sh := s.Keys().Shard(ids[0])
	p := store.ClaimIDsParams{Shard: sh, IDs: ids, Records: []*store.Record{rec}, TTL: ttl}
	res, err := s.ClaimIDs(t.Context(), p)
	if errors.Is(err, store.ErrEpochMissing) {
		if _, err := s.MarkEpoch(t.Context(), sh, 0); err != nil {
			t.Fatal(err)
		}
		res, err = s.ClaimIDs(t.Context(), p)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res.Items
}

// claimPick runs a pick claim, setting the shard's epoch marker first
// when needed.
func claimPick(t *testing.T, s *store.Store, p store.ClaimPickParams) *store.ClaimPickResult {
	t.Helper()
	res, err := s.ClaimPick(t.Context(), p)
	if errors.Is(err, store.ErrEpochMissing) {
		if _, err := s.MarkEpoch(t.Context(), p.Shard, 0); err != nil {
			t.Fatal(err)
		}
		res, err = s.ClaimPick(t.Context(), p)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// due returns the due items of a shard (score <= Redis's now), longest
// waiting first.
func due(t *testing.T, s *store.Store, shard int) []string {
	t.Helper()
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.Client().ZRangeByScore(t.Context(), s.Keys().Due(shard), &redis.ZRangeBy{Min: "-inf", Max: fmt.Sprint(now)}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestClaimReleaseCycle(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		if n, err := s.Add(ctx, "a", "b", "c"); err != nil || n != 3 {
			t.Fatalf("Add = %d, %v", n, err)
		}
		if n, _ := s.Add(ctx, "a"); n != 0 {
			t.Errorf("adding an existing item counted %d", n)
		}
		if d := due(t, s, 0); len(d) != 3 {
			t.Fatalf("due = %v", d)
		}

		a := record("a")
		res := claim(t, s, a, time.Minute, "a", "zzz")
		if res[0].Code != store.ClaimOK || res[0].Fence == 0 || res[0].Attempt != 1 || !res[0].LastSync.IsZero() {
			t.Fatalf("claim a = %+v", res[0])
		}
		if res[1].Code != store.ClaimSkipped {
			t.Errorf("claim of an unknown item = %+v, want skipped", res[1])
		}
		// A retried call with the same token is ours again (same fence).
		if again := claim(t, s, a, time.Minute, "a"); again[0].Code != store.ClaimOK || again[0].Fence != res[0].Fence ||
			again[0].Attempt != 1 || !again[0].LastSync.IsZero() {
			t.Errorf("retried claim = %+v, want ours again with fence %d", again[0], res[0].Fence)
		}
		// Someone else cannot claim it.
		if other := claim(t, s, record("b"), time.Minute, "a"); other[0].Code != store.ClaimTaken {
			t.Errorf("second owner's claim = %+v, want taken", other[0])
		}
		// Claimed items leave the due range.
		if diff := cmp.Diff(due(t, s, 0), []string{"b", "c"}); diff != "" {
			t.Errorf("due after claim (-got +want):\n%s", diff)
		}
		rec, err := s.ReadRecord(ctx, s.Keys().Record(0, "a"))
		if err != nil || rec.Fence != res[0].Fence || rec.Owner.Host != "a" || rec.Token != a.Token {
			t.Fatalf("record = %+v, %v", rec, err)
		}
		if rec.Attempt != 1 || rec.State != store.StateSyncing || time.Since(rec.ClaimedAt).Abs() > 5*time.Second ||
			!rec.HeartbeatAt.Equal(rec.ClaimedAt) {
			t.Errorf("stamped fields: attempt %d, state %v, claimed %v, heartbeat %v", rec.Attempt, rec.State, rec.ClaimedAt, rec.HeartbeatAt)
		}

		// A foreign token cannot release; the owner can.
		rel, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "a", Token: store.NewToken(), Kind: store.ReleaseSynced}})
		if err != nil || rel[0].Code != store.HeldByOther {
			t.Fatalf("foreign release = %+v, %v", rel, err)
		}
		rel, err = s.Release(ctx, 0, []store.ReleaseRequest{{ID: "a", Token: a.Token, Kind: store.ReleaseSynced, Delay: time.Hour}})
		if err != nil || rel[0].Code != store.Released {
			t.Fatalf("release = %+v, %v", rel, err)
		}
		// Idempotent: the same release again (as go-redis re-sends one
		// after a dropped connection) reports it released, recording
		// nothing more.
		if rel, _ = s.Release(ctx, 0, []store.ReleaseRequest{{ID: "a", Token: a.Token, Kind: store.ReleaseSynced}}); rel[0].Code != store.Released {
			t.Errorf("second release = %v, want released", rel[0].Code)
		}
		// Synced: not due for an hour; lastSync is Redis's time of release.
		if diff := cmp.Diff(due(t, s, 0), []string{"b", "c"}); diff != "" {
			t.Errorf("due after release (-got +want):\n%s", diff)
		}
		next := claim(t, s, record("c"), time.Minute, "a")[0]
		if next.Code != store.ClaimOK || next.Fence <= res[0].Fence {
			t.Fatalf("next claim = %+v, want a fence above %d", next, res[0].Fence)
		}
		if !next.LastSync.Equal(rel[0].At) && next.LastSync.Sub(rel[0].At).Abs() > time.Second {
			t.Errorf("lastSync = %v, release at %v", next.LastSync, rel[0].At)
		}
	})
}

func TestFailQuarantineRequeue(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 2})
		s.Add(ctx, "p")
		sh := s.Keys().Shard("p")
		for attempt := 1; attempt <= 3; attempt++ {
			r := record("w")
			res := claim(t, s, r, time.Minute, "p")[0]
			if res.Code != store.ClaimOK || res.Attempt != attempt {
				t.Fatalf("attempt %d: claim = %+v", attempt, res)
			}
			kind := store.ReleaseFailed
			if attempt == 3 {
				kind = store.ReleaseQuarantine
			}
			s.Release(ctx, sh, []store.ReleaseRequest{{ID: "p", Token: r.Token, Kind: kind, Error: fmt.Sprintf("boom %d", attempt)}})
		}
		if msg := s.Client().HGet(ctx, s.Keys().Errors(sh), "p").Val(); msg != "boom 3" {
			t.Errorf("last error = %q", msg)
		}
		if res := claim(t, s, record("w"), time.Minute, "p")[0]; res.Code != store.ClaimSkipped {
			t.Fatalf("claim of a quarantined item = %+v, want skipped", res)
		}
		if n, err := s.Requeue(ctx, "p", "nope"); err != nil || n != 1 {
			t.Fatalf("Requeue = %d, %v", n, err)
		}
		// Due at once: a pick finds it.
		if res, _ := pickShard(t, s, sh, 1, time.Minute); len(res) != 1 || res[0].ID != "p" || res[0].Code != store.ClaimOK || res[0].Attempt != 1 {
			t.Fatalf("pick after requeue = %+v, want p at attempt 1", res)
		}
		if n, err := s.Remove(ctx, "p"); err != nil || n != 1 {
			t.Fatalf("Remove = %d, %v", n, err)
		}
	})
}

func TestForceReleaseRaisesFence(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		s.Add(ctx, "x")
		old := record("old")
		res := claim(t, s, old, time.Minute, "x")[0]
		held, fence, err := s.ForceRelease(ctx, "x")
		if err != nil || !held || fence <= res.Fence {
			t.Fatalf("ForceRelease = %v, %d, %v; claim fence %d", held, fence, err, res.Fence)
		}
		sh := s.Keys().Shard("x")
		if ex, _ := s.Extend(ctx, time.Minute, 0, []store.ExtendRequest{{Key: s.Keys().Record(sh, "x"), Token: old.Token}}); ex[0].Code != store.ExtendMissing {
			t.Errorf("old owner extend = %+v, want missing", ex[0])
		}
		// Due at once: a pick finds it.
		if next, _ := pickShard(t, s, sh, 1, time.Minute); len(next) != 1 || next[0].ID != "x" || next[0].Code != store.ClaimOK || next[0].Fence <= fence {
			t.Errorf("pick after force = %+v, want x with a fence above %d", next, fence)
		}
		if _, _, err := s.ForceRelease(ctx, "ghost"); !errors.Is(err, store.ErrUnknownItem) {
			t.Errorf("force release of an unknown item: %v", err)
		}
	})
}

func TestExtendAndExpiry(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 4})
		ids := []string{"e1", "e2", "e3", "e4", "e5", "e6"}
		s.Add(ctx, ids...)
		var reqs []store.ExtendRequest
		for _, id := range ids {
			r := record("w")
			if res := claim(t, s, r, time.Second, id)[0]; res.Code != store.ClaimOK {
				t.Fatalf("claim %s = %+v", id, res)
			}
			reqs = append(reqs, store.ExtendRequest{Key: s.Keys().Record(s.Keys().Shard(id), id), Token: r.Token})
		}
		reqs = append(reqs, store.ExtendRequest{Key: s.Keys().Record(0, "missing"), Token: store.NewToken()})
		for range 4 { // 1.2 s in all, past the 1 s ttl: the records live only through extends
			time.Sleep(300 * time.Millisecond)
			res, err := s.Extend(ctx, time.Second, store.StateSyncing, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res[:len(ids)] {
				if r.Code != store.ExtendOK || r.Fence == 0 {
					t.Fatalf("extend %s = %+v", ids[i], r)
				}
			}
			if res[len(ids)].Code != store.ExtendMissing {
				t.Errorf("extend of a missing record = %+v", res[len(ids)])
			}
		}
		time.Sleep(1500 * time.Millisecond)
		res, _ := s.Extend(ctx, time.Second, 0, reqs[:1])
		if res[0].Code != store.ExtendMissing {
			t.Errorf("extend after expiry = %+v, want missing", res[0])
		}
		// The expired claim is due again and claimable by another owner.
		picked := map[string]store.ClaimCode{}
		again, _ := pickShard(t, s, s.Keys().Shard("e1"), len(ids), time.Minute)
		for _, r := range again {
			picked[r.ID] = r.Code
		}
		if picked["e1"] != store.ClaimOK {
			t.Errorf("pick after expiry = %v, want e1 claimed", picked)
		}
	})
}

// An extend of an item lease holds the item in its due index until the
// new lease end, as the claim did: past the first ttl an item in flight
// must not read as due. It never moves a score back, nor adds an item
// that is gone, nor moves one whose record is missing or another's.
func TestExtendMovesDueScore(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb, k := s.Client(), s.Keys()
		s.Add(ctx, "x", "y", "q", "gone")
		recs := map[string]*store.Record{}
		for _, id := range []string{"x", "q", "gone"} {
			recs[id] = record("w")
			if res := claim(t, s, recs[id], time.Second, id)[0]; res.Code != store.ClaimOK {
				t.Fatalf("claim %s = %+v", id, res)
			}
		}
		req := func(id string, tok store.Token) store.ExtendRequest {
			return store.ExtendRequest{Key: k.Record(0, id), Token: tok, Due: k.Due(0), ID: id}
		}
		extend := func(ttl time.Duration, want store.ExtendCode, r store.ExtendRequest) {
			t.Helper()
			res, err := s.Extend(ctx, ttl, 0, []store.ExtendRequest{r})
			if err != nil || res[0].Code != want {
				t.Fatalf("extend %s = %+v, %v; want code %d", r.ID, res, err, want)
			}
		}
		score := func(id string) float64 {
			t.Helper()
			v, err := rdb.ZScore(ctx, k.Due(0), id).Result()
			if err != nil {
				t.Fatalf("score of %s: %v", id, err)
			}
			return v
		}
		redisMs := func() float64 { return float64(rdb.Time(ctx).Val().UnixMilli()) }

		yDue := score("y")
		before := redisMs()
		extend(time.Minute, store.ExtendOK, req("x", recs["x"].Token))
		after := redisMs()
		held := score("x")
		if held < before+60000 || held > after+60000 {
			t.Fatalf("x due at %.0f after a 1 min extend in [%.0f, %.0f], want now + 1 min", held, before, after)
		}
		extend(2*time.Minute, store.ExtendMissing, req("y", store.NewToken()))
		extend(2*time.Minute, store.ExtendOther, req("x", store.NewToken()))
		if got := score("y"); got != yDue {
			t.Errorf("y, not claimed, due at %.0f after an extend, want %.0f", got, yDue)
		}
		if got := score("x"); got != held {
			t.Errorf("x due at %.0f after another owner's extend, want %.0f", got, held)
		}
		extend(time.Second, store.ExtendOK, req("x", recs["x"].Token)) // a shorter ttl: never back
		if got := score("x"); got != held {
			t.Errorf("x due at %.0f after a 1 s extend, want %.0f (never moved back)", got, held)
		}
		rdb.ZAdd(ctx, k.Due(0), redis.Z{Score: math.Inf(1), Member: "q"})
		extend(time.Minute, store.ExtendOK, req("q", recs["q"].Token))
		if got := score("q"); !math.IsInf(got, 1) {
			t.Errorf("quarantined q due at %v after an extend, want +inf", got)
		}
		rdb.ZRem(ctx, k.Due(0), "gone") // removed while in flight
		extend(time.Minute, store.ExtendOK, req("gone", recs["gone"].Token))
		if err := rdb.ZScore(ctx, k.Due(0), "gone").Err(); err != redis.Nil {
			t.Errorf("gone, removed in flight, in the due index after an extend: %v", err)
		}
		// A due key made by hand of another type fails no heartbeat.
		rdb.Del(ctx, k.Due(0))
		rdb.Set(ctx, k.Due(0), "planted", 0)
		extend(time.Minute, store.ExtendOK, req("x", recs["x"].Token))
	})
}

func TestLockUnlock(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		s.MarkEpoch(ctx, s.Keys().Shard("job:{1}"), 0) // a new deployment: nothing to hold off
		a, b := record("a"), record("b")
		ra, err := s.Lock(ctx, "job:{1}", a, time.Minute)
		if err != nil || !ra.Acquired || ra.Fence == 0 {
			t.Fatalf("lock = %+v, %v", ra, err)
		}
		rb, _ := s.Lock(ctx, "job:{1}", b, time.Minute)
		if rb.Acquired || rb.Wait <= 0 || rb.Wait > time.Minute {
			t.Errorf("second lock = %+v, want refused with the holder's ttl", rb)
		}
		if c, _ := s.Unlock(ctx, "job:{1}", b.Token); c != store.HeldByOther {
			t.Errorf("foreign unlock = %v", c)
		}
		if c, _ := s.Unlock(ctx, "job:{1}", a.Token); c != store.Released {
			t.Errorf("unlock = %v", c)
		}
		// Idempotent, as for a re-sent unlock.
		if c, _ := s.Unlock(ctx, "job:{1}", a.Token); c != store.Released {
			t.Errorf("second unlock = %v", c)
		}
		rb, _ = s.Lock(ctx, "job:{1}", b, time.Minute)
		if !rb.Acquired || rb.Fence <= ra.Fence {
			t.Errorf("relock = %+v, want a fence above %d", rb, ra.Fence)
		}
	})
}

// A record written by hand, without an expiry, must not block its item
// forever: the claim script gives it one ttl to live.
func TestForeignRecordDoesNotBlockForever(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		s.Add(ctx, "f")
		key := s.Keys().Record(s.Keys().Shard("f"), "f")
		s.Client().Set(ctx, key, "garbage written by hand", 0)
		if res := claim(t, s, record("w"), 200*time.Millisecond, "f")[0]; res.Code != store.ClaimForeign {
			t.Fatalf("claim over a foreign record = %+v, want held by a foreign record", res)
		}
		if _, err := s.ReadRecord(ctx, key); !errors.Is(err, store.ErrBadRecord) {
			t.Errorf("ReadRecord of garbage = %v, want ErrBadRecord", err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			if res := claim(t, s, record("w"), time.Minute, "f")[0]; res.Code == store.ClaimOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a foreign record blocked the item for 3 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func TestInvalidIDsRefused(t *testing.T) {
	s := open(t, store.Config{})
	for _, id := range []string{"", "a\nb", strings.Repeat("x", 1<<20), "nul\x00"} {
		if _, err := s.Add(t.Context(), "ok", id); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Add(%.20q) = %v, want ErrInvalidID", id, err)
		}
	}
	if n, _ := s.Remove(t.Context(), "ok"); n != 0 {
		t.Error("a batch with a bad id was partly written")
	}
}

// After Redis loses its data, claims of a shard are held off until every
// lease granted before the loss has expired.
func TestDataLossHoldOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	s := open(t, store.Config{Addrs: []string{srv.Addr()}, Shards: 1})
	ctx := t.Context()
	s.Add(ctx, "i")
	claim(t, s, record("w"), time.Minute, "i")
	srv.Kill(t)
	srv.Restart(t) // no persistence: everything is gone
	s.Add(ctx, "i")
	req := store.ClaimIDsParams{Shard: 0, IDs: []string{"i"}, Records: []*store.Record{record("w")}, TTL: 2 * time.Second}
	var err error
	for range 20 { // the client reconnects
		if _, err = s.ClaimIDs(ctx, req); !store.IsUnavailable(err) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(err, store.ErrEpochMissing) {
		t.Fatalf("claim after data loss: %v, want ErrEpochMissing", err)
	}
	hold, err := s.MarkEpoch(ctx, 0, 2*time.Second)
	// ttl less the uptime, with a second of slack for how Redis rounds it.
	if err != nil || hold < 2*time.Second || hold > 3*time.Second {
		t.Fatalf("MarkEpoch = %v, %v; want 2s to 3s (redis just started)", hold, err)
	}
	var he *store.HoldError
	if _, err := s.ClaimIDs(ctx, req); !errors.As(err, &he) || !errors.Is(err, store.ErrHeldOff) {
		t.Fatalf("claim while held off: %v", err)
	}
	time.Sleep(he.For)
	if resp, err := s.ClaimIDs(ctx, req); err != nil || resp.Items[0].Code != store.ClaimOK {
		t.Fatalf("claim after hold-off = %+v, %v", resp, err)
	}
}

func TestStartupChecks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, &redistest.Options{Config: []string{"maxmemory 64mb", "maxmemory-policy volatile-lru"}})
	_, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, RefuseEviction: true, KeyPrefix: "ev"})
	if !errors.Is(err, store.ErrEviction) || !strings.Contains(err.Error(), "volatile-lru") {
		t.Errorf("Open with volatile-lru and RefuseEviction: %v", err)
	}
	var logs strings.Builder
	l := zerolog.New(&logs)
	s, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "ev", Logger: l})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "noeviction") {
		t.Errorf("no loud warning about the eviction policy in:\n%s", logs.String())
	}
	infos, err := s.Servers(t.Context())
	if err != nil || len(infos) != 1 || len(infos[0].RunID) != 40 {
		t.Errorf("Servers = %+v, %v", infos, err)
	}
	// The shard count is fixed per deployment.
	_, err = store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "ev", Shards: 3})
	if !errors.Is(err, store.ErrShardsMismatch) {
		t.Errorf("Open with another shard count: %v", err)
	}
	_, err = store.Open(t.Context(), store.Config{Addrs: []string{"127.0.0.1:1"}, DialTimeout: 100 * time.Millisecond})
	if err == nil || strings.Count(err.Error(), "127.0.0.1:1") != 1 {
		// It was named twice: connect to 127.0.0.1:1: dial tcp
		// 127.0.0.1:1: connect: connection refused.
		t.Errorf("Open of an unreachable address: %v, want the address named once", err)
	}
	if op := new(net.OpError); !errors.As(err, &op) || !store.IsUnavailable(err) {
		t.Errorf("Open of an unreachable address: %v, want a *net.OpError and IsUnavailable", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg   store.Config
		field string
	}{
		{store.Config{Addrs: []string{"nohost"}}, "addrs[0]"},
		{store.Config{Addrs: []string{"a:1"}, Cluster: true, MasterName: "m"}, "master_name"},
		{store.Config{Addrs: []string{"a:1"}, Cluster: true, DB: 2}, "db"},
		{store.Config{Cluster: true}, "addrs"},
		{store.Config{Shards: 5000}, "shards"},
		{store.Config{KeyPrefix: "a{b}"}, "key_prefix"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		var ce *store.ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field {
			t.Errorf("Validate(%+v) = %v, want field %s", tt.cfg, err, tt.field)
		}
	}
	red := store.Config{Password: "hunter2"}.Redacted()
	if strings.Contains(fmt.Sprintf("%+v", red), "hunter2") {
		t.Error("Redacted shows the password")
	}
}

func TestMinReplicasWait(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t, nil)
	redistest.Start(t, &redistest.Options{ReplicaOf: primary})
	s := open(t, store.Config{Addrs: []string{primary.Addr()}, Shards: 1})
	ctx := t.Context()
	// WAIT returns once the replica acknowledged: the bound only has to
	// outlast a loaded machine (1 s did not, under the whole suite).
	const replicaWait = 10 * time.Second
	s.Add(ctx, "r")
	s.MarkEpoch(ctx, 0, 0)
	s.Add(ctx, "p1", "p2") // due together: the pick takes p1 (equal scores go by member)
	resp, err := s.ClaimIDs(ctx, store.ClaimIDsParams{Shard: 0, IDs: []string{"r"}, Records: []*store.Record{record("w")},
		TTL: time.Minute, MinReplicas: 1, ReplicaTimeout: replicaWait})
	if err != nil || resp.Replicas != 1 || resp.Items[0].Code != store.ClaimOK {
		t.Fatalf("claim with WAIT = %+v, %v", resp, err)
	}
	// Every claim operation can wait for replicas.
	pick, err := s.ClaimPick(ctx, store.ClaimPickParams{Shard: 0, Records: []*store.Record{record("w")},
		TTL: time.Minute, MinReplicas: 1, ReplicaTimeout: replicaWait})
	if err != nil || pick.Replicas != 1 || len(pick.Items) != 1 || pick.Items[0].Code != store.ClaimOK || pick.Items[0].ID != "p1" {
		t.Fatalf("pick claim with WAIT = %+v, %v", pick, err)
	}
	since, _ := s.Now(ctx)
	batch, err := s.ClaimBatch(ctx, store.ClaimBatchParams{Shard: 0, IDs: []string{"p2"}, Records: []*store.Record{record("w")},
		Since: since + 1, TTL: time.Minute, MinReplicas: 1, ReplicaTimeout: replicaWait})
	if err != nil || batch.Replicas != 1 || batch.Items[0].Code != store.ClaimOK {
		t.Fatalf("batch claim with WAIT = %+v, %v", batch, err)
	}
	emb := open(t, store.Config{})
	recs := []*store.Record{record("w")}
	if _, err := emb.ClaimIDs(ctx, store.ClaimIDsParams{IDs: []string{"r"}, Records: recs, MinReplicas: 1}); !errors.Is(err, store.ErrNoReplicas) {
		t.Errorf("WAIT on the embedded store: %v", err)
	}
	if _, err := emb.ClaimPick(ctx, store.ClaimPickParams{Records: recs, MinReplicas: 1}); !errors.Is(err, store.ErrNoReplicas) {
		t.Errorf("pick claim WAIT on the embedded store: %v", err)
	}
	if _, err := emb.ClaimBatch(ctx, store.ClaimBatchParams{IDs: []string{"r"}, Records: recs, Since: 1, MinReplicas: 1}); !errors.Is(err, store.ErrNoReplicas) {
		t.Errorf("batch claim WAIT on the embedded store: %v", err)
	}
}

// Every script must touch one slot: run the whole cycle on a Cluster.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	s := open(t, store.Config{Addrs: c.Addrs(), Cluster: true, Shards: 8})
	ctx := t.Context()
	var ids []string
	for i := range 64 {
		ids = append(ids, fmt.Sprintf("item-{%d}:x", i))
	}
	if n, err := s.Add(ctx, ids...); err != nil || n != 64 {
		t.Fatalf("Add = %d, %v", n, err)
	}
	var reqs []store.ExtendRequest
	claimed := 0
	for sh := range 8 {
		picked, tok := pickShard(t, s, sh, 100, time.Minute)
		for _, res := range picked {
			if res.Code != store.ClaimOK {
				t.Fatalf("claim %s = %+v", res.ID, res)
			}
			claimed++
			reqs = append(reqs, store.ExtendRequest{Key: s.Keys().Record(sh, res.ID), Token: tok})
		}
	}
	if claimed != 64 {
		t.Fatalf("claimed %d of 64", claimed)
	}
	res, err := s.Extend(ctx, time.Minute, store.StateSyncing, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Code != store.ExtendOK {
			t.Fatalf("extend %s = %+v", reqs[i].Key, r)
		}
	}
	oldest, err := s.Oldest(ctx)
	if err != nil || len(oldest) != 8 {
		t.Fatalf("Oldest = %v, %v", oldest, err)
	}
}

// Oldest leaves out the shards it is told to skip (their Due is NoDue
// though they hold due items) and reads the others, and so does Backlog;
// with one server, a read that fails is the call's error, whatever it
// skips.
func TestOldestSkips(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 4})
		var ids []string
		for i := range 64 {
			ids = append(ids, fmt.Sprintf("item-%02d", i))
		}
		s.Add(ctx, ids...)
		all, err := s.Oldest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for sh, h := range all {
			if h.Err != nil || h.Due == store.NoDue {
				t.Fatalf("shard %d: %+v, want a due head", sh, h)
			}
		}
		some, err := s.Oldest(ctx, 1, 3, 9)
		if err != nil {
			t.Fatal(err)
		}
		for sh, h := range some {
			want := all[sh].Due
			if sh == 1 || sh == 3 {
				want = store.NoDue
			}
			if h.Err != nil || h.Due != want {
				t.Errorf("shard %d with 1 and 3 skipped: %+v, want due %d", sh, h, want)
			}
		}
		// Backlog leaves the same shards out.
		want := int64(0)
		for _, id := range ids {
			if sh := s.Keys().Shard(id); sh != 1 && sh != 3 {
				want++
			}
		}
		if due, oldest, err := s.Backlog(ctx, 1, 3, 9); err != nil || due != want || oldest == store.NoDue {
			t.Errorf("Backlog with 1 and 3 skipped: %d due, oldest %d, %v; want %d due", due, oldest, err, want)
		}
		if due, _, err := s.Backlog(ctx); err != nil || due != int64(len(ids)) {
			t.Errorf("Backlog: %d due, %v; want %d", due, err, len(ids))
		}
		s.Close()
		if _, err := s.Oldest(ctx, 0); err == nil {
			t.Error("Oldest on a closed store: no error")
		}
		// Closing again (the cleanup does too) is harmless.
		if err := s.Close(); !errors.Is(err, redis.ErrClosed) {
			t.Errorf("second Close = %v, want redis.ErrClosed", err)
		}
	})
}

func TestBatchModeAndPending(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "a", "b", "c", "d")
		s.MarkEpoch(ctx, 0, 0)
		// b synced before the run (not due for an hour); c is failing and
		// backing off; d is quarantined.
		for _, it := range []struct {
			id   string
			kind store.ReleaseKind
		}{{"b", store.ReleaseSynced}, {"c", store.ReleaseFailed}, {"d", store.ReleaseQuarantine}} {
			r := record("w")
			claim(t, s, r, time.Minute, it.id)
			s.Release(ctx, 0, []store.ReleaseRequest{{ID: it.id, Token: r.Token, Kind: it.kind, Delay: time.Hour}})
		}
		time.Sleep(5 * time.Millisecond)
		since, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		quarantined, backingOff, pages := 0, 0, 0
		for off := 0; off >= 0; pages++ {
			p, err := s.Pending(ctx, 0, since, off, 2)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, p.IDs...)
			quarantined, backingOff, off = quarantined+p.Quarantined, backingOff+p.BackingOff, p.Next
		}
		if pages != 3 || quarantined != 1 || backingOff != 1 {
			t.Errorf("%d pages, %d quarantined, %d backing off; want 3, 1, 1", pages, quarantined, backingOff)
		}
		if diff := cmp.Diff(sorted(all), []string{"a", "b", "c"}); diff != "" {
			t.Errorf("pending (-got +want):\n%s", diff)
		}
		req := store.ClaimBatchParams{Shard: 0, IDs: []string{"a", "b", "c", "d"}, Records: []*store.Record{record("w")}, TTL: time.Minute, Since: since}
		resp, err := s.ClaimBatch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var got []store.ClaimCode
		for _, r := range resp.Items {
			got = append(got, r.Code)
		}
		want := []store.ClaimCode{store.ClaimOK, store.ClaimOK, store.ClaimSkipped, store.ClaimSkipped}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("batch claim codes (-got +want):\n%s", diff)
		}
		// Synced after the run started: no longer pending, not claimable.
		r := record("w2")
		rel, _ := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "a", Token: req.Records[0].Token, Kind: store.ReleaseSynced, Delay: time.Hour}})
		if rel[0].Code != store.Released {
			t.Fatal(rel)
		}
		req.Records, req.IDs = []*store.Record{r}, []string{"a"}
		if resp, _ := s.ClaimBatch(ctx, req); resp.Items[0].Code != store.ClaimSkipped {
			t.Errorf("batch claim of an item synced in this run = %+v", resp.Items[0])
		}
	})
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	slices.Sort(out)
	return out
}

func TestList(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "a", "b", "c")
		s.MarkEpoch(ctx, 0, 0)
		ra, rb := record("owner-a"), record("w")
		claim(t, s, ra, time.Minute, "a")
		claim(t, s, rb, time.Minute, "b")
		s.Release(ctx, 0, []store.ReleaseRequest{{ID: "b", Token: rb.Token, Kind: store.ReleaseQuarantine, Error: "bad data"}})
		var all []store.ItemState
		for off := 0; off >= 0; {
			page, next, err := s.List(ctx, 0, off, 2)
			if err != nil {
				t.Fatal(err)
			}
			all, off = append(all, page...), next
		}
		if len(all) != 3 {
			t.Fatalf("listed %d items", len(all))
		}
		byID := map[string]store.ItemState{}
		for _, it := range all {
			byID[it.ID] = it
		}
		if a := byID["a"]; a.Record == nil || a.Record.Owner.Host != "owner-a" || a.Fence == 0 || a.Record.Fence != a.Fence {
			t.Errorf("a = %+v", a)
		}
		if b := byID["b"]; !b.Quarantined || b.Error != "bad data" || b.Attempts != 1 || b.Record != nil {
			t.Errorf("b = %+v", b)
		}
		if c := byID["c"]; c.Fence != 0 || c.Record != nil || c.Due == 0 || c.Quarantined {
			t.Errorf("c = %+v", c)
		}
		if all[len(all)-1].ID != "b" {
			t.Errorf("quarantined item not listed last: %v", all)
		}
	})
}

// TestPickClaim: a pick claim takes the longest-waiting due items itself,
// writes their records under the keys Go computes for them (the script's
// id encoding matches EncodeID, hostile ids included), leaves a receipt,
// and moves items held by someone else out of the due range.
func TestPickClaim(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		ids := []string{"a plain", "b{tag}:x", "c*?[]\\%", "d-ünï", "e", "f foreign"}
		if _, err := s.Add(ctx, ids...); err != nil {
			t.Fatal(err)
		}
		// Same due time for all: Redis orders equal scores by member, so
		// due order is ids order. "f foreign" is held by a record written
		// by hand without a TTL.
		foreign := s.Keys().Record(0, "f foreign")
		s.Client().Set(ctx, foreign, "written by hand", 0)
		now, _ := s.Now(ctx)
		for _, id := range ids {
			s.Client().ZAdd(ctx, s.Keys().Due(0), redis.Z{Score: float64(now - 1000), Member: id})
		}
		pick := func(n int) ([]store.ItemClaim, []*store.Record) {
			t.Helper()
			recs := make([]*store.Record, n)
			tok := store.NewToken()
			for i := range recs {
				recs[i] = record(fmt.Sprintf("w%d", i))
				recs[i].Token, recs[i].Owner.Worker = tok, i
			}
			resp := claimPick(t, s, store.ClaimPickParams{Shard: 0, Records: recs, TTL: time.Minute})
			return resp.Items, recs
		}
		res, recs := pick(3)
		var got []string
		for i, r := range res {
			got = append(got, r.ID)
			if r.Code != store.ClaimOK || r.Fence == 0 || r.Attempt != 1 || r.PrevDue != now-1000 {
				t.Errorf("pick result %d = %+v", i, r)
			}
			rec, err := s.ReadRecord(ctx, s.Keys().Record(0, r.ID))
			if err != nil || rec == nil || rec.Token != recs[i].Token || rec.Owner.Worker != i || rec.Fence != r.Fence {
				t.Errorf("record of %q = %+v, %v: want worker %d's record", r.ID, rec, err, i)
			}
		}
		if diff := cmp.Diff(got, ids[:3]); diff != "" {
			t.Errorf("picked (-got +want):\n%s", diff)
		}
		if rcpt, err := s.ClaimReceipt(ctx, 0, recs[0].Token); err != nil || !slices.Equal(rcpt, ids[:3]) {
			t.Errorf("receipt = %q, %v", rcpt, err)
		}
		// The rest: the foreign record is skipped and moved out of the
		// due range with one ttl to live.
		res, recs = pick(5)
		second, secondRecs := res, recs
		got = got[:0]
		for _, r := range res {
			if r.Code == store.ClaimOK {
				got = append(got, r.ID)
			} else if r.ID != "f foreign" || r.Code != store.ClaimForeign {
				t.Errorf("second pick: %+v", r)
			}
		}
		if last := res[len(res)-1]; last.ID != "f foreign" || last.Code != store.ClaimForeign {
			t.Errorf("the foreign record was not reported: %+v", last)
		}
		if diff := cmp.Diff(got, ids[3:5]); diff != "" {
			t.Errorf("second pick (-got +want):\n%s", diff)
		}
		if rcpt, _ := s.ClaimReceipt(ctx, 0, recs[0].Token); !slices.Equal(rcpt, ids[3:5]) {
			t.Errorf("second receipt = %q", rcpt)
		}
		if ttl := s.Client().PTTL(ctx, foreign).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("foreign record's ttl = %v, want one claim ttl", ttl)
		}
		if res, recs = pick(4); len(res) != 0 {
			t.Errorf("third pick = %+v, want nothing due", res)
		}
		if rcpt, err := s.ClaimReceipt(ctx, 0, recs[0].Token); err != nil || rcpt != nil {
			t.Errorf("receipt of an empty pick = %q, %v", rcpt, err)
		}
		// Released as synced, a picked item keeps its fence in the state.
		rel, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: ids[3], Token: secondRecs[0].Token, Kind: store.ReleaseSynced, Delay: time.Hour}})
		if err != nil || rel[0].Code != store.Released {
			t.Fatalf("release = %+v, %v", rel, err)
		}
		items, _, err := s.List(ctx, 0, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.ID == ids[3] && (it.Fence != second[0].Fence || it.LastSync.IsZero() || it.Attempts != 0) {
				t.Errorf("state after release = %+v, want fence %d and a lastSync", it, second[0].Fence)
			}
		}
		if _, err := s.ClaimPick(ctx, store.ClaimPickParams{Shard: 0, TTL: time.Minute}); err == nil {
			t.Error("a pick claim with no records was accepted")
		}
	})
}

// TestReleaseSyncedState: a synced release after failures clears the
// error and the attempts and keeps the claim's fence; a synced release of
// an item removed while it was claimed neither puts it back nor writes
// its state.
func TestReleaseSyncedState(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "p", "gone")
		r := record("w")
		claim(t, s, r, time.Minute, "p")
		s.Release(ctx, 0, []store.ReleaseRequest{{ID: "p", Token: r.Token, Kind: store.ReleaseFailed, Error: "boom"}})
		r = record("w")
		res := claim(t, s, r, time.Minute, "p")[0]
		if res.Attempt != 2 {
			t.Fatalf("second claim = %+v, want attempt 2", res)
		}
		rel, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "p", Token: r.Token, Kind: store.ReleaseSynced, Delay: time.Hour}})
		if err != nil || rel[0].Code != store.Released {
			t.Fatalf("release = %+v, %v", rel, err)
		}
		if s.Client().HExists(ctx, s.Keys().Errors(0), "p").Val() {
			t.Error("the error is kept after a synced release")
		}
		fence, last, attempts := store.ParseMeta(s.Client().HGet(ctx, s.Keys().Meta(0), "p").Val())
		if fence != res.Fence || last != rel[0].At.UnixMilli() || attempts != 0 {
			t.Errorf("meta = (%d, %d, %d), want (%d, %d, 0)", fence, last, attempts, res.Fence, rel[0].At.UnixMilli())
		}

		g := record("w")
		claim(t, s, g, time.Minute, "gone")
		if n, _ := s.Remove(ctx, "gone"); n != 1 {
			t.Fatal("remove failed")
		}
		if rel, _ := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "gone", Token: g.Token, Kind: store.ReleaseSynced}}); rel[0].Code != store.Released {
			t.Errorf("release of a removed item = %+v", rel[0])
		}
		if s.Client().ZScore(ctx, s.Keys().Due(0), "gone").Err() == nil || s.Client().HExists(ctx, s.Keys().Meta(0), "gone").Val() {
			t.Error("a synced release put a removed item back")
		}
	})
}

// Only a call that did not reach its server, or got no reply in time,
// is unreachable; a reply that is an error is not, though a failover's
// passing state still counts as unavailable.
func TestIsUnreachable(t *testing.T) {
	for _, c := range []struct {
		err                      error
		unreachable, unavailable bool
	}{
		{nil, false, false},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true, true},
		{fmt.Errorf("store: oldest of shard 3: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true, true},
		{fmt.Errorf("store: oldest of shard 3: %w", io.EOF), true, true},
		{context.DeadlineExceeded, true, true},
		{errors.New("MOVED 3999 127.0.0.1:6381"), false, false},
		{errors.New("CLUSTERDOWN The cluster is down"), false, true},
		{&store.DamageError{Shard: 1, Err: errors.New("WRONGTYPE")}, false, false},
	} {
		if got := store.IsUnreachable(c.err); got != c.unreachable {
			t.Errorf("IsUnreachable(%v) = %v, want %v", c.err, got, c.unreachable)
		}
		if got := store.IsUnavailable(c.err); got != c.unavailable {
			t.Errorf("IsUnavailable(%v) = %v, want %v", c.err, got, c.unavailable)
		}
	}
}

// A long last error keeps its start and its end, where a failed
// command's stderr ends, not only its first 1024 bytes (a second outside
// trial: status and the API lost the command's last lines). The cut
// falls between runes.
func TestReleaseKeepsErrorsEnd(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "p")
		r := record("w")
		claim(t, s, r, time.Minute, "p")
		msg := `exec: item "p": exit status 3; stderr: "` + strings.Repeat("filler line é\n", 200) + `LAST LINE: giving up"`
		if _, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "p", Token: r.Token, Kind: store.ReleaseFailed, Error: msg}}); err != nil {
			t.Fatal(err)
		}
		got := s.Client().HGet(ctx, s.Keys().Errors(0), "p").Val()
		if len(got) > 1024 || !strings.HasPrefix(got, `exec: item "p": exit status 3; stderr: "filler`) ||
			!strings.HasSuffix(got, `LAST LINE: giving up"`) || !strings.Contains(got, " … ") || !utf8.ValidString(got) {
			t.Errorf("last error kept (%d bytes): %q", len(got), got)
		}
	})
}
