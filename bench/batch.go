package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd/syncd/store"
)

// BatchSizes are the claim and extend batch sizes measured.
var BatchSizes = []int{1, 8, 32, 128}

// BatchGoroutines is how many goroutines call the store at once in the
// batch benchmarks; goroutine g works on shards g, g+8.
const BatchGoroutines = 8

// BatchRun is one measured run of a batched store call.
type BatchRun struct {
	Items int64           // items claimed or leases extended
	Calls int64           // store calls
	Lat   []time.Duration // per call, sorted
	W     Window          // summed over the measured phases
}

// Rate is items per second.
func (r BatchRun) Rate() float64 { return float64(r.Items) / r.W.Wall.Seconds() }

// BatchRow is one line of the batch table.
type BatchRow struct {
	Op    string // "claim" or "extend"
	N     int    // items per call
	Label string
	Runs  []BatchRun
}

// BatchResults holds both tables.
type BatchResults struct {
	Rows     []*BatchRow
	PerShard int
	Dur      time.Duration
}

// pool returns perShard item IDs for each of the store's shards.
func pool(st *store.Store, perShard int, prefix string) [][]string {
	k := st.Keys()
	out := make([][]string, k.Shards())
	full := 0
	for i := 0; full < k.Shards(); i++ {
		id := fmt.Sprintf("%s%07d", prefix, i)
		sh := k.Shard(id)
		if len(out[sh]) < perShard {
			out[sh] = append(out[sh], id)
			if len(out[sh]) == perShard {
				full++
			}
		}
	}
	return out
}

// openPool empties the server and opens a store under keyPrefix that
// holds a pool of perShard items per shard, their IDs starting with
// idPrefix. The caller closes the store.
func openPool(ctx context.Context, srv *Server, keyPrefix, idPrefix string, perShard int) (*store.Store, *Counter, [][]string, error) {
	srv.FlushAll(ctx)
	st, cnt, err := openStore(ctx, srv.Addr(), keyPrefix, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	ids := pool(st, perShard, idPrefix)
	if err := addPool(ctx, st, ids); err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	return st, cnt, ids, nil
}

func addPool(ctx context.Context, st *store.Store, ids [][]string) error {
	for _, sh := range ids {
		if _, err := st.Add(ctx, sh...); err != nil {
			return err
		}
	}
	return nil
}

func claimRecords(tok store.Token, n int) []*store.Record {
	recs := make([]*store.Record, n)
	for i := range recs {
		recs[i] = &store.Record{Version: store.RecordVersion, Token: tok, State: store.StateSyncing,
			Owner: store.Owner{Host: "bench-host", PID: 4242, Run: "benchrun01", Worker: i}}
	}
	return recs
}

func addWindows(a *Window, b Window) {
	a.Wall += b.Wall
	a.CPU += b.CPU
	a.RedisCPU += b.RedisCPU
	for i, c := range b.RedisCPUs {
		if i == len(a.RedisCPUs) {
			a.RedisCPUs = append(a.RedisCPUs, 0)
		}
		a.RedisCPUs[i] += c
	}
	a.HostBusy += b.HostBusy
	a.HostIdle += b.HostIdle
	a.HostSteal += b.HostSteal
	a.Mallocs += b.Mallocs
	a.Bytes += b.Bytes
	a.RoundTrips += b.RoundTrips
	a.Commands += b.Commands
	if a.ByName == nil {
		a.ByName = map[string]int64{}
	}
	for k, v := range b.ByName {
		a.ByName[k] += v
	}
	if a.Redis == nil {
		a.Redis = map[string]CmdStat{}
	}
	for k, v := range b.Redis {
		s := a.Redis[k]
		s.Calls += v.Calls
		s.Usec += v.Usec
		a.Redis[k] = s
	}
}

// timedPhase runs one timed phase of runClaims or runReleases and adds
// it to run: BatchGoroutines goroutines, goroutine g taking shards g,
// g+BatchGoroutines, ..., call op with chunks of n IDs of a shard until
// the IDs run out or the time left (dur less run's time so far) does. op
// makes one store call and returns how many items it took and how long
// the call itself took.
func timedPhase(ctx context.Context, srv *Server, cnt *Counter, run *BatchRun, ids [][]string, n int, dur time.Duration,
	op func(g, sh int, chunk []string) (items int, took time.Duration, err error)) error {
	var items, calls atomic.Int64
	var firstErr atomic.Value
	var latMu sync.Mutex
	w := beginWindow(ctx, srv, cnt)
	deadline := time.Now().Add(dur - run.W.Wall)
	var wg sync.WaitGroup
	for g := range BatchGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for sh := g; sh < len(ids); sh += BatchGoroutines {
				for i := 0; i < len(ids[sh]) && time.Now().Before(deadline); i += n {
					k, took, err := op(g, sh, ids[sh][i:min(i+n, len(ids[sh]))])
					lat = append(lat, took)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					calls.Add(1)
					items.Add(int64(k))
				}
			}
			latMu.Lock()
			run.Lat = append(run.Lat, lat...)
			latMu.Unlock()
		}()
	}
	wg.Wait()
	addWindows(&run.W, w.end(ctx))
	if e := firstErr.Load(); e != nil {
		return e.(error)
	}
	run.Items += items.Load()
	run.Calls += calls.Load()
	return nil
}

// runClaims measures store.ClaimIDs with n IDs of one shard per call: every
// claim is a real one (SET NX PX, fence, meta, due index). Claim phases
// take items until the pool is used up or the time is; untimed phases
// hand them back in between.
func runClaims(ctx context.Context, srv *Server, n, perShard int, dur time.Duration) (BatchRun, error) {
	st, cnt, ids, err := openPool(ctx, srv, "bc", "c", perShard)
	if err != nil {
		return BatchRun{}, err
	}
	defer st.Close()
	var run BatchRun
	for run.W.Wall < dur {
		// Each goroutine claims with its own token; held[sh] is what it
		// took of shard sh (one goroutine's alone).
		toks, recs := make([]store.Token, BatchGoroutines), make([][]*store.Record, BatchGoroutines)
		for g := range toks {
			toks[g] = store.NewToken()
			recs[g] = claimRecords(toks[g], n)
		}
		held := make([][]string, len(ids))
		err := timedPhase(ctx, srv, cnt, &run, ids, n, dur, func(g, sh int, chunk []string) (int, time.Duration, error) {
			before := len(held[sh])
			t := time.Now()
			resp, err := st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: sh, IDs: chunk, Records: recs[g][:len(chunk)], TTL: LockTTL})
			took := time.Since(t)
			if err != nil {
				return 0, took, err
			}
			for _, r := range resp.Items {
				if r.Code == store.ClaimOK {
					held[sh] = append(held[sh], r.ID)
				}
			}
			return len(held[sh]) - before, took, nil
		})
		if err != nil {
			return run, fmt.Errorf("claim batch %d: %w", n, err)
		}
		// Hand everything back, untimed.
		for sh, shIDs := range held {
			if err := handBack(ctx, st, sh, toks[sh%BatchGoroutines], shIDs); err != nil {
				return run, err
			}
		}
	}
	slices.Sort(run.Lat)
	return run, nil
}

// claimAll claims every item of ids, 500 per call, with recs (of one
// record).
func claimAll(ctx context.Context, st *store.Store, ids [][]string, recs []*store.Record) error {
	for sh, shIDs := range ids {
		for i := 0; i < len(shIDs); i += 500 {
			chunk := shIDs[i:min(i+500, len(shIDs))]
			if _, err := st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: sh, IDs: chunk, Records: recs, TTL: LockTTL}); err != nil {
				return err
			}
		}
	}
	return nil
}

// handBack releases ids of shard sh, held with tok, 500 per call.
// Releasing an item that is no longer held changes nothing.
func handBack(ctx context.Context, st *store.Store, sh int, tok store.Token, ids []string) error {
	for i := 0; i < len(ids); i += 500 {
		chunk := ids[i:min(i+500, len(ids))]
		reqs := make([]store.ReleaseRequest, len(chunk))
		for j, id := range chunk {
			reqs[j] = store.ReleaseRequest{ID: id, Token: tok, Kind: store.ReleaseHandBack}
		}
		if _, err := st.Release(ctx, sh, reqs); err != nil {
			return err
		}
	}
	return nil
}

// runReleases measures store.Release (as synced, as the engine's worker
// does) with n items of one shard per call. Untimed phases claim the
// whole pool; timed phases release it until the pool or the time is
// used up.
func runReleases(ctx context.Context, srv *Server, n, perShard int, dur time.Duration) (BatchRun, error) {
	st, cnt, ids, err := openPool(ctx, srv, "br", "r", perShard)
	if err != nil {
		return BatchRun{}, err
	}
	defer st.Close()
	tok := store.NewToken()
	recs := claimRecords(tok, 1)
	reqs := make([][]store.ReleaseRequest, BatchGoroutines)
	for g := range reqs {
		reqs[g] = make([]store.ReleaseRequest, n)
	}
	var run BatchRun
	for run.W.Wall < dur {
		if err := claimAll(ctx, st, ids, recs); err != nil { // untimed
			return run, err
		}
		err := timedPhase(ctx, srv, cnt, &run, ids, n, dur, func(g, sh int, chunk []string) (int, time.Duration, error) {
			for j, id := range chunk {
				reqs[g][j] = store.ReleaseRequest{ID: id, Token: tok, Kind: store.ReleaseSynced}
			}
			t := time.Now()
			res, err := st.Release(ctx, sh, reqs[g][:len(chunk)])
			took := time.Since(t)
			released := 0
			for _, r := range res {
				if r.Code == store.Released {
					released++
				}
			}
			return released, took, err
		})
		if err != nil {
			return run, fmt.Errorf("release batch %d: %w", n, err)
		}
		// Hand back what the deadline left claimed, so that the next
		// phase claims the whole pool again.
		for sh, shIDs := range ids {
			if err := handBack(ctx, st, sh, tok, shIDs); err != nil {
				return run, err
			}
		}
	}
	slices.Sort(run.Lat)
	return run, nil
}

// runExtends measures store.Extend with n record keys per call, the
// heartbeat of n leases. With mixed, the n keys are spread over all
// shards (n/16 per shard, so 16 scripts in one pipeline, as a process's
// heartbeat of many leases is); otherwise they are of one shard.
func runExtends(ctx context.Context, srv *Server, n, perShard int, mixed bool, warm, dur time.Duration) (BatchRun, error) {
	st, cnt, ids, err := openPool(ctx, srv, "be", "x", perShard)
	if err != nil {
		return BatchRun{}, err
	}
	defer st.Close()
	// Claim the whole pool and keep it.
	tok := store.NewToken()
	recs := claimRecords(tok, 1)
	if err := claimAll(ctx, st, ids, recs); err != nil {
		return BatchRun{}, err
	}
	reqsByShard := make([][]store.ExtendRequest, len(ids))
	for sh, shIDs := range ids {
		for _, id := range shIDs {
			// Due and ID, as ownership's heartbeat sends them.
			reqsByShard[sh] = append(reqsByShard[sh], store.ExtendRequest{Key: st.Keys().Record(sh, id), Token: tok, Due: st.Keys().Due(sh), ID: id})
		}
	}
	r := runLoop(ctx, srv, []*Counter{cnt}, BatchGoroutines, warm, dur, func(g int) opFunc {
		// Pre-build this goroutine's batches; calls cycle through them.
		var batches [][]store.ExtendRequest
		if mixed {
			per := max(n/len(ids), 1)
			for off := 0; off+per <= perShard; off += per {
				var b []store.ExtendRequest
				for sh := range ids {
					b = append(b, reqsByShard[sh][off:off+per]...)
				}
				batches = append(batches, b)
			}
			// Goroutines start at different offsets.
			batches = append(batches[g*len(batches)/BatchGoroutines:], batches[:g*len(batches)/BatchGoroutines]...)
		} else {
			for sh := g; sh < len(ids); sh += BatchGoroutines {
				for i := 0; i+n <= perShard; i += n {
					batches = append(batches, reqsByShard[sh][i:i+n])
				}
			}
		}
		i := 0
		return func(ctx context.Context) (bool, error) {
			b := batches[i%len(batches)]
			i++
			res, err := st.Extend(ctx, LockTTL, 0, b)
			if err != nil {
				return false, err
			}
			for _, x := range res {
				if x.Code != store.ExtendOK {
					return false, fmt.Errorf("extend: code %d", x.Code)
				}
			}
			return true, nil
		}
	})
	if r.Errs > 0 {
		return BatchRun{}, fmt.Errorf("extend batch %d: %d errors: %w", n, r.Errs, r.FirstErr)
	}
	per := n
	if mixed {
		per = max(n/len(ids), 1) * len(ids)
	}
	return BatchRun{Items: r.OK * int64(per), Calls: r.OK, Lat: r.Lat, W: r.W}, nil
}

// RunBatches measures batched claims and heartbeats.
func RunBatches(ctx context.Context, srv *Server, reps, perShard int, warm, dur time.Duration, logf func(string, ...any)) (*BatchResults, error) {
	res := &BatchResults{PerShard: perShard, Dur: dur}
	for _, n := range BatchSizes {
		res.Rows = append(res.Rows, &BatchRow{Op: "claim", N: n, Label: fmt.Sprintf("Claim, %s of one shard", plural(n, "id"))})
	}
	for _, n := range BatchSizes {
		res.Rows = append(res.Rows, &BatchRow{Op: "release", N: n, Label: fmt.Sprintf("Release as synced, %s of one shard", plural(n, "id"))})
	}
	for _, n := range BatchSizes {
		res.Rows = append(res.Rows, &BatchRow{Op: "extend", N: n, Label: fmt.Sprintf("Extend, %s of one shard", plural(n, "key"))})
	}
	res.Rows = append(res.Rows, &BatchRow{Op: "extend-mixed", N: 128, Label: "Extend, 128 keys over 16 shards (16 scripts, 1 pipeline)"})
	for rep := range reps {
		for _, row := range res.Rows {
			var r BatchRun
			var err error
			switch row.Op {
			case "claim":
				r, err = runClaims(ctx, srv, row.N, perShard, dur)
			case "release":
				r, err = runReleases(ctx, srv, row.N, perShard, dur)
			case "extend":
				r, err = runExtends(ctx, srv, row.N, perShard, false, warm, dur)
			default:
				r, err = runExtends(ctx, srv, row.N, perShard, true, warm, dur)
			}
			if err != nil {
				return nil, err
			}
			logf("batch rep %d %-58s %9.0f items/s", rep+1, row.Label, r.Rate())
			row.Runs = append(row.Runs, r)
		}
	}
	srv.FlushAll(ctx)
	return res, nil
}

// plural is "1 id", "8 ids".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
