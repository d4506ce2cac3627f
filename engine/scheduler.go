package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// source picks candidates for a claim round: the daemon's picks due items,
// a batch run's picks items not synced since the run started.
type source interface {
	// next returns up to n candidate IDs of one shard, or none when there
	// is nothing to claim now.
	next(ctx context.Context, n int) (shard int, ids []string, err error)
	// claimRequest fills in the mode of the claim.
	mode(req *ownership.ClaimRequest)
	// finished reports whether the scheduler should stop (batch: all
	// done).
	finished() bool
	// held marks a shard held off for d; it reports whether the shard
	// was not held before.
	held(shard int, d time.Duration) bool
}

// holds remembers shards held off after Redis lost data, so the sources
// skip them instead of asking again every poll. Claims running in their
// settle window mark shards from other goroutines, hence the lock.
type holds struct {
	mu sync.Mutex
	m  map[int]time.Time
}

func (h *holds) held(shard int, d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[int]time.Time{}
	}
	_, was := h.m[shard]
	h.m[shard] = time.Now().Add(d)
	return !was
}

// skip reports whether a shard is still held off.
func (h *holds) skip(shard int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.m[shard]
	if ok && time.Now().After(until) {
		delete(h.m, shard)
		return false
	}
	return ok
}

// schedule is the claim loop. Each round it waits for a free worker,
// takes up to Batch free workers, asks the source for that many of the
// longest-waiting candidates, claims them in one script call and starts a
// sync for each lease.
func (e *Engine) schedule(src source) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer e.settling.Wait() // claims still in their settle window
	go func() {
		select {
		case <-e.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	errWait := e.cfg.Poll
	for !src.finished() {
		if err := e.sem.Acquire(ctx, 1); err != nil {
			return // stopped
		}
		n := 1
		for n < e.cfg.Batch && e.sem.TryAcquire(1) {
			n++
		}
		started, err := e.round(ctx, src, n)
		e.sem.Release(int64(n - started))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			e.ready.Store(false)
			e.log.Warn().Err(err).Dur("retry_in", errWait).Msg("claim round failed")
			if !e.sleep(errWait) {
				return
			}
			errWait = min(2*errWait, 5*time.Second)
		case started == 0:
			e.ready.Store(true)
			errWait = e.cfg.Poll
			if !e.sleep(e.cfg.Poll) {
				return
			}
		default:
			e.ready.Store(true)
			errWait = e.cfg.Poll
		}
	}
}

// round claims up to n candidates and starts their syncs; it returns how
// many of the n worker slots it used. With a settle delay the claim, the
// wait and the confirm read run in a goroutine of their own that keeps
// the slots, so the scheduler goes on claiming for other free workers
// instead of sleeping through every settle window.
func (e *Engine) round(ctx context.Context, src source, n int) (int, error) {
	shard, ids, err := src.next(ctx, n)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	workers := e.takeIDs(len(ids))
	if e.own.Config().Settle == 0 {
		return e.claim(ctx, src, shard, ids, workers)
	}
	e.settling.Add(1)
	go func() {
		defer e.settling.Done()
		started, err := e.claim(ctx, src, shard, ids, workers)
		e.sem.Release(int64(n - started))
		if err != nil && ctx.Err() == nil {
			e.ready.Store(false)
			e.log.Warn().Err(err).Int("shard", shard).Msg("claim failed")
		}
	}()
	return n, nil
}

// claim claims ids for the given workers and starts a sync for each
// lease; it returns how many it started.
func (e *Engine) claim(ctx context.Context, src source, shard int, ids []string, workers []int) (int, error) {
	req := ownership.ClaimRequest{Shard: shard, IDs: ids, Workers: workers}
	src.mode(&req)
	leases, err := e.own.Claim(ctx, req)
	used := map[int]bool{}
	for _, l := range leases {
		used[l.Owner().Worker] = true
	}
	for _, w := range workers {
		if !used[w] {
			e.giveID(w)
		}
	}
	var hold *store.HoldError
	if errors.As(err, &hold) {
		if src.held(hold.Shard, hold.For) {
			e.log.Warn().Int("shard", hold.Shard).Dur("for", hold.For).Msg("shard held off: no claims until every lease from before redis lost its data has expired")
		}
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, l := range leases {
		e.workers.Add(1)
		go e.work(l)
	}
	return len(leases), nil
}

// dueSource picks due items, longest waiting first across shards.
type dueSource struct {
	e *Engine
	holds
}

func (e *Engine) dueSource() *dueSource { return &dueSource{e: e} }

func (s *dueSource) mode(req *ownership.ClaimRequest) { req.OnlyDue = true }
func (s *dueSource) finished() bool                   { return false }

// next visits shards in the order of their oldest due item (one
// pipelined round trip for all shards) and returns the due items of the
// first shard that has any.
func (s *dueSource) next(ctx context.Context, n int) (int, []string, error) {
	shards := s.e.st.Keys().Shards()
	if shards == 1 {
		if s.skip(0) {
			return 0, nil, nil
		}
		ids, err := s.e.st.Due(ctx, 0, n)
		return 0, ids, err
	}
	oldest, err := s.e.st.Oldest(ctx)
	if err != nil {
		return 0, nil, err
	}
	now := s.e.redisNow() + 50 // tolerate a little clock estimate error
	var order []int
	for sh, o := range oldest {
		if o > 0 && o <= now && !s.skip(sh) {
			order = append(order, sh)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return int(oldest[a] - oldest[b]) })
	for _, sh := range order {
		ids, err := s.e.st.Due(ctx, sh, n)
		if err != nil {
			return 0, nil, err
		}
		if len(ids) > 0 {
			return sh, ids, nil
		}
	}
	return 0, nil, nil
}
