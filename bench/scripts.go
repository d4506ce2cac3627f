package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// dueScript is store's due.lua as it was loaded (its prelude's now()),
// kept to measure what reading due items costs apart from a claim.
const dueScript = `local function now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end
-- due.lua: the longest-waiting due items of one shard.
-- KEYS[1]  due ZSET of the shard
-- ARGV[1]  how many at most
-- Result: ids whose score <= now (Redis clock), lowest score first.
local nowms = now()
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nowms, 'LIMIT', 0, tonumber(ARGV[1]))
`

// ScriptCost is Redis's own time per call of one script (INFO
// commandstats usec of EVALSHA, or of the native command). Calls come
// from 8 goroutines at once so that Redis stays busy, as under load: a
// lone client lets Redis idle between calls and every call then pays for
// cold caches.
type ScriptCost struct {
	Name        string
	Calls       int64
	Items       int // items per call
	UsecPerCall float64
	Min, Max    float64 // over the repetitions
	// Inner is the Redis commands the script ran, per call.
	Inner map[string]float64
}

// PerItem is the cost per item.
func (c ScriptCost) PerItem() float64 { return c.UsecPerCall / float64(max(c.Items, 1)) }

// Probe scripts. Each runs after the product's prelude (so that its
// cost per call is included, as in every product script) but defines
// what it uses itself, so the probes measure the same work whatever the
// prelude provides today.
const (
	// tableProbe builds an owner record from its template with four
	// patches and a be() that fills a Lua table and calls
	// string.char(unpack(t)): how the scripts built records before
	// commit 285ff5e.
	tableProbe = `local function be_t(n, width)
  local b = {}
  for i = width, 1, -1 do
    b[i] = n % 256
    n = math.floor(n / 256)
  end
  return string.char(unpack(b))
end
local function patch_t(rec, at, bytes)
  return string.sub(rec, 1, at - 1) .. bytes .. string.sub(rec, at + #bytes)
end
local rec = ARGV[1]
local fence, nowms = 1700000000000000, 1700000000000
rec = patch_t(rec, 22, be_t(fence, 8))
rec = patch_t(rec, 31, be_t(nowms, 8))
rec = patch_t(rec, 40, be_t(nowms, 8))
rec = patch_t(rec, 50, be_t(1, 4))
return rec`

	// concatProbe builds the same record with one concatenation and a
	// table-free be (string.char of computed bytes).
	concatProbe = `local function be4_c(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end
local function be8_c(n)
  local lo = n % 4294967296
  return be4_c((n - lo) / 4294967296) .. be4_c(lo)
end
local t = ARGV[1]
local fence, nowms = 1700000000000000, 1700000000000
local nowb = be8_c(nowms)
return string.sub(t, 1, 21) .. be8_c(fence) .. string.sub(t, 30, 30) .. nowb .. string.sub(t, 39, 39) .. nowb ..
  string.sub(t, 48, 49) .. be4_c(1) .. string.sub(t, 54)`

	// timeProbe reads Redis's clock as the scripts' now() does.
	timeProbe = `local t = redis.call('TIME')
local s, us = tonumber(t[1]), tonumber(t[2])
return s * 1000 + math.floor(us / 1000)`

	// numProbe builds a state value (14 bytes) as meta_value in the
	// prelude does.
	numProbe = `local s = meta_value(1700000000000001, 1700000000000, 0)
return #s`
)

// ConcatSame reports whether concatProbe built the same bytes as the
// product's patching (set by RunScriptCosts).
var ConcatSame *bool

// RunScriptCosts measures reps times what each of syncd's scripts costs
// Redis per call and keeps the median per script.
func RunScriptCosts(ctx context.Context, srv *Server, repoDir string, calls, reps int, logf func(string, ...any)) ([]ScriptCost, error) {
	var all [][]ScriptCost
	for range reps {
		cs, err := scriptCostsOnce(ctx, srv, repoDir, calls, logf)
		if err != nil {
			return nil, err
		}
		all = append(all, cs)
	}
	out := all[0]
	for i := range out {
		var vs []float64
		for _, cs := range all {
			vs = append(vs, cs[i].UsecPerCall)
		}
		sp := spreadOf(vs)
		out[i].UsecPerCall, out[i].Min, out[i].Max = sp.Med, sp.Min, sp.Max
	}
	return out, nil
}

// scriptCostsOnce measures every script once, next to the trivial
// script and the hand-rolled lock's commands.
func scriptCostsOnce(ctx context.Context, srv *Server, repoDir string, calls int, logf func(string, ...any)) ([]ScriptCost, error) {
	srv.FlushAll(ctx)
	st, _, err := openStore(ctx, srv.Addr(), "sx", nil)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	rdb := st.Client()
	var out []ScriptCost
	measure := func(name, cmd string, items, n int, f func(i int) error) error {
		srv.ResetStats(ctx)
		var next atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					if err := f(i); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if e := firstErr.Load(); e != nil {
			return fmt.Errorf("%s: %w", name, e.(error))
		}
		cs, err := srv.CommandStats(ctx)
		if err != nil {
			return err
		}
		c := cs[cmd]
		sc := ScriptCost{Name: name, Calls: c.Calls, Items: items, UsecPerCall: float64(c.Usec) / float64(max(c.Calls, 1)),
			Inner: map[string]float64{}}
		if cmd == "evalsha" {
			for k, v := range cs {
				if k != "evalsha" && k != "config|resetstat" && k != "config" && k != "info" && k != "hello" &&
					!strings.HasPrefix(k, "client") && v.Calls > 0 {
					sc.Inner[k] = float64(v.Calls) / float64(max(c.Calls, 1))
				}
			}
		}
		logf("script cost %-52s %7.2f µs/call %6.2f µs/item", name, sc.UsecPerCall, sc.PerItem())
		out = append(out, sc)
		return nil
	}
	one := redis.NewScript("return 1")
	if err := measure("EVALSHA `return 1`", "evalsha", 1, calls, func(int) error { return one.Run(ctx, rdb, nil).Err() }); err != nil {
		return nil, err
	}
	if prelude, err := os.ReadFile(filepath.Join(repoDir, "store", "scripts", "prelude.lua")); err == nil {
		p1 := redis.NewScript(string(prelude) + "\nreturn 1")
		if err := measure("EVALSHA syncd prelude + `return 1`", "evalsha", 1, calls, func(int) error { return p1.Run(ctx, rdb, nil).Err() }); err != nil {
			return nil, err
		}
		pp := redis.NewScript(string(prelude) + "\n" + tableProbe)
		tmpl := store.MarshalRecord(&store.Record{Version: store.RecordVersion, Token: store.NewToken(), State: store.StateSyncing,
			Owner: store.Owner{Host: "bench-host", PID: 4242, Run: "benchrun01", Worker: 3}})
		if err := measure("prelude + building one record: 4 patches, be() via a Lua table", "evalsha", 1, calls, func(int) error { return pp.Run(ctx, rdb, nil, tmpl).Err() }); err != nil {
			return nil, err
		}
		pc := redis.NewScript(string(prelude) + "\n" + concatProbe)
		if err := measure("prelude + the same record: one concatenation, table-free be()", "evalsha", 1, calls, func(int) error { return pc.Run(ctx, rdb, nil, tmpl).Err() }); err != nil {
			return nil, err
		}
		a, err1 := pp.Run(ctx, rdb, nil, tmpl).Text()
		b, err2 := pc.Run(ctx, rdb, nil, tmpl).Text()
		same := err1 == nil && err2 == nil && a == b && len(a) == len(tmpl)
		ConcatSame = &same
		pt := redis.NewScript(string(prelude) + "\n" + timeProbe)
		if err := measure("prelude + reading TIME as now() does", "evalsha", 1, calls, func(int) error { return pt.Run(ctx, rdb, nil).Err() }); err != nil {
			return nil, err
		}
		pg := redis.NewScript(string(prelude) + "\nreturn redis.call('GET', KEYS[1])")
		if err := measure("prelude + one redis.call: GET of a missing key", "evalsha", 1, calls, func(i int) error {
			if err := pg.Run(ctx, rdb, []string{fmt.Sprintf("missing%d", i)}).Err(); !errors.Is(err, redis.Nil) {
				return err
			}
			return nil
		}); err != nil {
			return nil, err
		}
		ps := redis.NewScript(string(prelude) + "\nreturn redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 30000)")
		if err := measure("prelude + one redis.call: SET NX PX of a new key", "evalsha", 1, calls, func(i int) error {
			return ps.Run(ctx, rdb, []string{fmt.Sprintf("probe%d", i)}, tmpl).Err()
		}); err != nil {
			return nil, err
		}
		pn := redis.NewScript(string(prelude) + "\n" + numProbe)
		if err := measure("prelude + building a state value (meta_value, 14 bytes)", "evalsha", 1, calls, func(int) error { return pn.Run(ctx, rdb, nil).Err() }); err != nil {
			return nil, err
		}
	}
	tok := make([]string, calls)
	for i := range tok {
		var b [16]byte
		rand.Read(b[:])
		tok[i] = string(b[:])
		if err := rdb.Do(ctx, "set", fmt.Sprintf("hr%d", i), tok[i], "nx", "px", 30000).Err(); err != nil {
			return nil, err
		}
	}
	if err := measure("hand-rolled delete (GET, DEL)", "evalsha", 1, calls, func(i int) error {
		return handRolledDelete.Run(ctx, rdb, []string{fmt.Sprintf("hr%d", i)}, tok[i]).Err()
	}); err != nil {
		return nil, err
	}
	if err := measure("native SET NX PX (no script)", "set", 1, calls, func(i int) error {
		return rdb.Do(ctx, "set", fmt.Sprintf("hs%d", i), tok[i], "nx", "px", 30000).Err()
	}); err != nil {
		return nil, err
	}
	rec := &store.Record{Version: store.RecordVersion, Token: store.NewToken(), State: store.StateSyncing,
		Owner: store.Owner{Host: "bench-host", PID: 4242, Run: "benchrun01"}}
	if err := measure("lock.lua (Store.Lock, free name)", "evalsha", 1, calls, func(i int) error {
		name := fmt.Sprintf("l%d", i)
		if _, err := st.Lock(ctx, name, rec, LockTTL); err != nil {
			return fmt.Errorf("lock %q: %w", name, err) // Store.Lock does not name it
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := measure("unlock.lua (Store.Unlock)", "evalsha", 1, calls, func(i int) error {
		name := fmt.Sprintf("l%d", i)
		if _, err := st.Unlock(ctx, name, rec.Token); err != nil {
			return fmt.Errorf("unlock %q: %w", name, err) // Store.Unlock does not name it
		}
		return nil
	}); err != nil {
		return nil, err
	}
	recs := claimRecords(rec.Token, 1)
	shards := st.Keys().Shards()
	var ids [][]string
	for _, n := range []int{1, 32} {
		calls := calls
		if n > 1 {
			calls = max(calls/8, 64)
		}
		// A fresh pool per size, one chunk per shard more than needed.
		ids = pool(st, n*(calls/shards+1), fmt.Sprintf("p%d-", n))
		if err := addPool(ctx, st, ids); err != nil {
			return nil, err
		}
		type claimed struct {
			shard int
			ids   []string
		}
		held := make([]claimed, calls)
		// Every item is due, as the engine's due-only claim of named items
		// found them before it became claim_ids.lua: the same commands per
		// item, without the comparison of the score with now.
		if err := measure(fmt.Sprintf("claim_ids.lua, %s (Store.ClaimIDs)", plural(n, "item")), "evalsha", n, calls, func(i int) error {
			sh := i % len(ids)
			off := (i / len(ids)) * n
			chunk := ids[sh][off : off+n]
			_, err := st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: sh, IDs: chunk, Records: recs, TTL: LockTTL})
			held[i] = claimed{sh, chunk}
			return err
		}); err != nil {
			return nil, err
		}
		if n > 1 {
			if err := measure(fmt.Sprintf("extend.lua, %s (Store.Extend)", plural(n, "key")), "evalsha", n, calls, func(i int) error {
				reqs := make([]store.ExtendRequest, n)
				for j, id := range held[i].ids {
					sh := held[i].shard // Due and ID, as ownership's heartbeat sends them
					reqs[j] = store.ExtendRequest{Key: st.Keys().Record(sh, id), Token: rec.Token, Due: st.Keys().Due(sh), ID: id}
				}
				_, err := st.Extend(ctx, LockTTL, 0, reqs)
				return err
			}); err != nil {
				return nil, err
			}
		}
		if err := measure(fmt.Sprintf("release.lua synced, %s (Store.Release)", plural(n, "item")), "evalsha", n, calls, func(i int) error {
			reqs := make([]store.ReleaseRequest, n)
			for j, id := range held[i].ids {
				reqs[j] = store.ReleaseRequest{ID: id, Token: rec.Token, Kind: store.ReleaseSynced, Delay: time.Hour}
			}
			_, err := st.Release(ctx, held[i].shard, reqs)
			return err
		}); err != nil {
			return nil, err
		}
	}
	// Store.Due moved here: only the bench reads due items apart from a
	// claim. Same script text as store's due.lua with its prelude.
	due := redis.NewScript(dueScript)
	if err := measure("due.lua, 32 of a shard (bench, was Store.Due)", "evalsha", 32, max(calls/8, 64), func(i int) error {
		return due.Run(ctx, rdb, []string{st.Keys().Due(i % len(ids))}, 32).Err()
	}); err != nil {
		return nil, err
	}
	// A batch run's claim: 32 named items not synced since the run began.
	{
		calls := max(calls/8, 64)
		bids := pool(st, 32*(calls/shards+1), "bt-")
		if err := addPool(ctx, st, bids); err != nil {
			return nil, err
		}
		since, err := st.Now(ctx)
		if err != nil {
			return nil, err
		}
		if err := measure("claim_batch.lua, 32 items (Store.ClaimBatch)", "evalsha", 32, calls, func(i int) error {
			sh := i % len(bids)
			off := (i / len(bids)) * 32
			_, err := st.ClaimBatch(ctx, store.ClaimBatchParams{Shard: sh, IDs: bids[sh][off : off+32], Records: recs, Since: since + 1, TTL: LockTTL})
			return err
		}); err != nil {
			return nil, err
		}
	}
	// The engine's claim: the script finds the 32 longest-waiting due
	// items itself (one template per item, as the engine sends).
	{
		calls := max(calls/8, 64)
		pick := pool(st, 32*(calls/shards+1), "pk-")
		if err := addPool(ctx, st, pick); err != nil {
			return nil, err
		}
		if err := measure("claim_pick.lua, 32 items (Store.ClaimPick)", "evalsha", 32, calls, func(i int) error {
			// A token per claim, as the engine sends: a pick with a token
			// that already claimed is a re-send, answered from its receipt.
			precs := claimRecords(store.NewToken(), 32)
			resp, err := st.ClaimPick(ctx, store.ClaimPickParams{Shard: i % shards, Records: precs, TTL: LockTTL})
			if err == nil && len(resp.Items) != 32 {
				err = fmt.Errorf("pick claimed %d of 32", len(resp.Items))
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	srv.FlushAll(ctx)
	return out, nil
}
