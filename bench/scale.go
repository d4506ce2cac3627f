package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/syncd/syncd/store"
)

// ScaleRound is how many items one claim round takes.
const ScaleRound = 32

// ScaleRun is one build of a schedule of Items items and the claim rounds
// measured on it.
type ScaleRun struct {
	Items     int
	IDLen     int
	MemAdded  int64 // used_memory after Add, minus before
	MemSynced int64 // used_memory after every item synced once, minus before
	Keys      int64 // DBSIZE after the fill
	// DueBytes and MetaBytes are MEMORY USAGE of the due indexes and the
	// state hashes after the fill; MetaSample is one state value.
	DueBytes, MetaBytes int64
	MetaSample          string
	AddTime             time.Duration
	FillTime            time.Duration
	Round1              []time.Duration // Due + Claim + Release, one goroutine, sorted
	Oldest1             []time.Duration // the engine's Oldest (16 ZRANGEs, 1 pipeline), sorted
	Round8              []time.Duration // Due + Claim + Release, 8 goroutines at once, sorted
	Round8Rate          float64         // items claimed per second with 8 goroutines
	RedisPerItem        time.Duration   // Redis CPU per item in the one-goroutine rounds
	Rebuilt             bool            // first window on its build (memory measured)
	// Load is CPU time other processes used during the one-goroutine
	// window of LoadWall.
	Load, LoadWall time.Duration
}

// ScaleResults are the runs per size.
type ScaleResults struct {
	Sizes []int
	Runs  map[int][]ScaleRun
	Dur   time.Duration
	// MemAlts are the state-hash layouts compared at MemAltItems items.
	MemAlts     []MemAlt
	MemAltItems int
}

func scaleID(i int) string { return "item-" + fmt.Sprintf("%07d", i) }

// buildSchedule adds n items and then syncs each once (claim, release as
// synced with no delay, so every item stays due and the meta hash has an
// entry per item, as in a deployment that has run a cycle).
func buildSchedule(ctx context.Context, srv *Server, st *store.Store, n int, run *ScaleRun) error {
	m0, err := srv.UsedMemory(ctx)
	if err != nil {
		return err
	}
	byShard := make([][]string, st.Keys().Shards())
	for i := range n {
		id := scaleID(i)
		sh := st.Keys().Shard(id)
		byShard[sh] = append(byShard[sh], id)
	}
	run.IDLen = len(scaleID(0))
	par := func(f func(sh int) error) error {
		var wg sync.WaitGroup
		errs := make([]error, len(byShard))
		sem := make(chan struct{}, 4)
		for sh := range byShard {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				errs[sh] = f(sh)
			}()
		}
		wg.Wait()
		for _, e := range errs {
			if e != nil {
				return e
			}
		}
		return nil
	}
	t := time.Now()
	if err := par(func(sh int) error {
		_, err := st.Add(ctx, byShard[sh]...)
		return err
	}); err != nil {
		return err
	}
	run.AddTime = time.Since(t)
	m1, err := srv.UsedMemory(ctx)
	if err != nil {
		return err
	}
	t = time.Now()
	if err := par(func(sh int) error {
		tok := store.NewToken()
		recs := claimRecords(tok, 1)
		ids := byShard[sh]
		for i := 0; i < len(ids); i += 500 {
			chunk := ids[i:min(i+500, len(ids))]
			resp, err := st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: sh, IDs: chunk, Records: recs, TTL: LockTTL})
			if err != nil {
				return err
			}
			reqs := make([]store.ReleaseRequest, 0, len(chunk))
			for _, r := range resp.Items {
				if r.Code == store.ClaimOK {
					reqs = append(reqs, store.ReleaseRequest{ID: r.ID, Token: tok, Kind: store.ReleaseSynced})
				}
			}
			if len(reqs) != len(chunk) {
				return fmt.Errorf("fill: claimed %d of %d", len(reqs), len(chunk))
			}
			if _, err := st.Release(ctx, sh, reqs); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	run.FillTime = time.Since(t)
	m2, err := srv.UsedMemory(ctx)
	if err != nil {
		return err
	}
	run.MemAdded, run.MemSynced = m1-m0, m2-m0
	run.Keys, _ = srv.Client().DBSize(ctx).Result()
	// Which structure holds the bytes: MEMORY USAGE of every shard's due
	// index and state hash, all elements counted.
	for sh := range st.Keys().Shards() {
		d, err := srv.Client().MemoryUsage(ctx, st.Keys().Due(sh), 0).Result()
		if err != nil {
			return err
		}
		m, err := srv.Client().MemoryUsage(ctx, st.Keys().Meta(sh), 0).Result()
		if err != nil {
			return err
		}
		run.DueBytes += d
		run.MetaBytes += m
	}
	run.MetaSample, _ = srv.Client().HGet(ctx, st.Keys().Meta(0), byShard[0][0]).Result()
	return nil
}

// claimRound is one round of the engine's loop on shard sh: a pick claim
// of the ScaleRound longest-waiting due items (the script finds them),
// then their release as synced. Each round takes a fresh token, as the
// engine's claims do: a pick under a token that already claimed is a
// re-send, answered from its receipt.
func claimRound(ctx context.Context, st *store.Store, sh int, recs []*store.Record) (int, error) {
	tok := store.NewToken()
	for _, r := range recs {
		r.Token = tok
	}
	resp, err := st.ClaimPick(ctx, store.ClaimPickParams{Shard: sh, Records: recs, TTL: LockTTL})
	if err != nil {
		return 0, err
	}
	if len(resp.Items) == 0 {
		return 0, fmt.Errorf("shard %d: nothing due", sh)
	}
	reqs := make([]store.ReleaseRequest, 0, len(resp.Items))
	for _, r := range resp.Items {
		reqs = append(reqs, store.ReleaseRequest{ID: r.ID, Token: recs[0].Token, Kind: store.ReleaseSynced})
	}
	if _, err := st.Release(ctx, sh, reqs); err != nil {
		return 0, err
	}
	return len(reqs), nil
}

// BigBuild is the size from which a schedule is built once and its
// rounds measured reps times on that one build: filling it through the
// real claim and release scripts takes tens of seconds.
const BigBuild = 1_000_000

// RunScale builds each size reps times (sizes of BigBuild and up: once)
// and measures claim rounds on each build (on a single build: reps
// times).
func RunScale(ctx context.Context, srv *Server, sizes []int, reps int, dur time.Duration, logf func(string, ...any)) (*ScaleResults, error) {
	res := &ScaleResults{Sizes: sizes, Runs: map[int][]ScaleRun{}, Dur: dur}
	for _, n := range sizes {
		builds, windows := reps, 1
		if n >= BigBuild {
			builds, windows = 1, reps
		}
		for b := range builds {
			srv.FlushAll(ctx)
			st, cnt, err := openStore(ctx, srv.Addr(), "sc", nil)
			if err != nil {
				return nil, err
			}
			built := ScaleRun{Items: n}
			if err := buildSchedule(ctx, srv, st, n, &built); err != nil {
				st.Close()
				return nil, fmt.Errorf("scale %d: %w", n, err)
			}
			logf("scale %s items built: add %v, fill %v", humanCount(n), built.AddTime.Round(time.Millisecond), built.FillTime.Round(time.Millisecond))
			for win := range windows {
				rep := b*windows + win
				run := built
				run.Rebuilt = win == 0
				shards := st.Keys().Shards()
				// One goroutine: latency of a round on an otherwise idle Redis.
				recs := claimRecords(store.NewToken(), ScaleRound)
				w := beginWindow(ctx, srv, cnt)
				items := 0
				for r, start := 0, time.Now(); time.Since(start) < dur; r++ {
					t := time.Now()
					if _, err := st.Oldest(ctx); err != nil {
						st.Close()
						return nil, err
					}
					t1 := time.Now()
					k, err := claimRound(ctx, st, r%shards, recs)
					if err != nil {
						st.Close()
						return nil, fmt.Errorf("scale %d: %w", n, err)
					}
					run.Oldest1 = append(run.Oldest1, t1.Sub(t))
					run.Round1 = append(run.Round1, time.Since(t1))
					items += k
				}
				win1 := w.end(ctx)
				run.RedisPerItem = win1.RedisCPU / time.Duration(max(items, 1))
				// Eight goroutines at once, each on its own shards.
				r8 := runLoop(ctx, srv, []*Counter{cnt}, 8, 50*time.Millisecond, dur, func(g int) opFunc {
					recs := claimRecords(store.NewToken(), ScaleRound)
					i := 0
					return func(ctx context.Context) (bool, error) {
						sh := g + 8*(i%(shards/8))
						i++
						_, err := claimRound(ctx, st, sh, recs)
						return err == nil, err
					}
				})
				if r8.Errs > 0 {
					st.Close()
					return nil, fmt.Errorf("scale %d, 8 goroutines: %w", n, r8.FirstErr)
				}
				run.Round8, run.Round8Rate = r8.Lat, r8.Rate()*ScaleRound
				slices.Sort(run.Round1)
				slices.Sort(run.Oldest1)
				logf("scale rep %d %8s items: %.0f B/item added, %.0f B/item synced once, round p50 %v p99 %v (8 goroutines p99 %v), fill %v",
					rep+1, strconv.Itoa(n), float64(run.MemAdded)/float64(n), float64(run.MemSynced)/float64(n),
					percentile(run.Round1, 50), percentile(run.Round1, 99), percentile(run.Round8, 99), run.FillTime.Round(time.Millisecond))
				run.Load = win1.Foreign()
				run.LoadWall = win1.Wall
				res.Runs[n] = append(res.Runs[n], run)
			}
			st.Close()
		}
	}
	if len(sizes) > 0 {
		n := sizes[len(sizes)-1]
		alts, err := RunMemAlternatives(ctx, srv, n)
		if err != nil {
			return nil, fmt.Errorf("state hash layouts: %w", err)
		}
		res.MemAlts, res.MemAltItems = alts, n
		for _, a := range alts {
			logf("state hash layout at %s items: %-64s %.0f B/item", humanCount(n), a.Name, a.BytesPerItem)
		}
	}
	srv.FlushAll(ctx)
	return res, nil
}
