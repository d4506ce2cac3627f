package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// source says what a claim round claims: the daemon's lets Redis pick the
// due items of the shards in order of their oldest one, a batch run's
// names items not synced since the run started.
type source interface {
	// requests returns the claims to try, in order, for up to n free
	// workers; none when there is nothing to claim now.
	requests(ctx context.Context, n int) ([]claimReq, error)
	// claim makes one of them for the given workers, one per slot.
	claim(ctx context.Context, req claimReq, workers []int) ([]*ownership.Lease, error)
	// finished reports whether the scheduler should stop (batch: all
	// done, or a refusal ended the run).
	finished() bool
	// refusalEnds reports whether an ACL refusal ends the loop (see
	// refusals): a batch run's, which retrying cannot finish; the daemon
	// retries.
	refusalEnds() bool
}

// claimReq is one claim a source asks for: up to n of a shard's due
// items, or the named items of a batch run.
type claimReq struct {
	shard int
	n     int      // a pick: how many at most
	ids   []string // a batch run's items
}

// slots is how many workers the claim can use.
func (r claimReq) slots() int { return max(r.n, len(r.ids)) }

// held reports whether ownership holds shard off (after Redis lost its
// data): the sources skip it instead of asking again every poll.
func (e *Engine) held(shard int) bool { return e.own.Held(shard) > 0 }

// scheduleLoops runs loops claim loops over src until they end (Stop,
// or a batch run's end) and, with claim-ahead on, the dispatcher that
// starts the leases they claimed ahead; it returns once the dispatcher
// handed back what it still held.
func (e *Engine) scheduleLoops(src source, loops int) {
	var sw sync.WaitGroup
	for range loops {
		sw.Go(func() { e.schedule(src) })
	}
	if e.ahead == nil {
		sw.Wait()
		e.settling.Wait() // claims still in their settle window
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	dispatched := make(chan struct{})
	go func() { defer close(dispatched); e.ahead.run(ctx) }()
	go func() {
		select {
		case <-e.stopCh: // no sync starts once Stop began
		case <-ctx.Done():
		}
		cancel()
	}()
	sw.Wait()
	e.settling.Wait() // claims still in their settle window: queued or handed back
	cancel()
	<-dispatched
}

// budget is what a claim holds until its leases start: free workers, or
// with claim-ahead on, the claim-ahead budget (see ahead).
type budget interface {
	// take takes at least one and up to n, waiting until there is one;
	// it fails only when ctx ends.
	take(ctx context.Context, n int) (int, error)
	give(n int)
}

// workerBudget is the worker semaphore as a budget.
type workerBudget struct{ sem *semaphore.Weighted }

func (b workerBudget) take(ctx context.Context, n int) (int, error) {
	if err := b.sem.Acquire(ctx, 1); err != nil {
		return 0, err
	}
	k := 1
	for k < n && b.sem.TryAcquire(1) {
		k++
	}
	return k, nil
}

func (b workerBudget) give(n int) { b.sem.Release(int64(n)) }

// budget is what the scheduler's claims hold.
func (e *Engine) budget() budget {
	if e.ahead != nil {
		return e.ahead
	}
	return workerBudget{e.sem}
}

// schedule is a claim loop (the daemon runs two). Each round it waits for
// a free worker (with claim-ahead on: for room in its budget), takes up
// to Batch, claims that many of the longest-waiting candidates and
// starts a sync for each lease: for the daemon, Redis picks the due
// items of the shards in order of their oldest one (a pick claim per
// shard); a batch run names its candidates.
func (e *Engine) schedule(src source) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	b := e.budget()
	errWait := e.cfg.Poll
	for !src.finished() {
		if e.ahead != nil {
			if d := e.ahead.pause(); d > 0 && !e.sleep(d) {
				return
			}
		}
		n, err := b.take(ctx, e.cfg.Batch)
		if err != nil {
			return // stopped
		}
		select {
		case <-e.stopCh: // Stop freed budget: not for new claims
			b.give(n)
			return
		default:
		}
		resumed := e.health.writesResumed() // before the round, which may be what Redis refuses
		started, wait, err := e.round(ctx, src, n, b)
		b.give(n - started)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			e.notReady(err)
			switch {
			case !store.IsPermission(err):
				e.log.Warn().Err(err).Int64("retry_in_ms", errWait.Milliseconds()).Msg("claim round failed")
			case src.refusalEnds():
				continue // finished now; logged where it was refused (claimRefused)
			}
			// Redis that refused writes for lack of memory takes them
			// again (another write went through): claim now, not after
			// the backoff.
			woken, ok := e.sleepOr(errWait, resumed)
			if !ok {
				return
			}
			errWait = min(2*errWait, 5*time.Second)
			if woken {
				errWait = e.cfg.Poll
			}
		case started == 0:
			e.ready.Store(true)
			errWait = e.cfg.Poll
			if !e.sleep(min(e.cfg.Poll, max(wait, time.Millisecond))) {
				return
			}
		default:
			e.ready.Store(true)
			errWait = e.cfg.Poll
		}
	}
}

// notReady records that a claim failed with err: the engine is not
// ready, unless Redis refused it for lack of memory, which /readyz says
// by itself (health) and holds until writes go through again. Once the
// hold ends, the daemon is ready at once, where it said "not claiming
// yet" until a claim round went through, up to the 5 s backoff later.
func (e *Engine) notReady(err error) {
	if !store.IsOutOfMemory(err) {
		e.ready.Store(false)
	}
}

// round claims up to n candidates and starts their syncs; it returns how
// many of the n slots of b it used and, when it used none because the
// target's limits or breaker held it back, when to try again. The target
// is asked first, so no claim waits on a limiter while its lease runs
// down. With a settle delay the claim, the wait and the confirm read run
// in a goroutine of their own that keeps the slots, so the scheduler goes
// on claiming instead of sleeping through every settle window; with
// claim-ahead on, those slots are not workers, and the confirmed leases
// queue for the next free worker (see ahead).
func (e *Engine) round(ctx context.Context, src source, n int, b budget) (int, time.Duration, error) {
	g, err := e.tgt.admit(ctx, n)
	if err != nil || g.n == 0 {
		e.claimRefused(src, wholeCall, err)
		return 0, g.wait, err
	}
	defer func() { e.tgt.done(g.permits...) }() // those no sync took
	n = g.n
	reqs, err := src.requests(ctx, n)
	if err != nil {
		e.claimRefused(src, wholeCall, err)
		return 0, 0, err
	}
	if len(reqs) == 0 {
		return 0, 0, nil
	}
	if e.own.Config().Settle > 0 {
		req := reqs[0]
		slots := min(req.slots(), n)
		gg := g
		g.permits = nil // the goroutine gives back what it does not use
		var seq uint64
		if e.ahead != nil {
			seq = e.ahead.ticket() // here, in the loop's order
		}
		e.settling.Add(1)
		go func() {
			defer e.settling.Done()
			defer func() { e.tgt.done(gg.permits...) }()
			started, err := e.claim(ctx, src, req, slots, &gg, seq)
			b.give(n - started)
			if e.ahead != nil && err == nil {
				e.ahead.found(started, len(reqs) == 1)
			}
			switch {
			case err == nil || ctx.Err() != nil:
			case store.IsPermission(err):
				e.notReady(err) // logged by claim (claimRefused)
			default:
				e.notReady(err)
				e.log.Warn().Err(err).Int("shard", req.shard).Msg("claim failed")
			}
		}()
		return n, 0, nil
	}
	// Without a settle delay, claim inline, going down the requests (the
	// daemon's: shards in order of their oldest due item) while free slots
	// remain: one round trip each.
	used := 0
	for _, req := range reqs {
		left := n - used
		if left == 0 {
			break
		}
		if req.n > 0 {
			req.n = left
		}
		started, err := e.claim(ctx, src, req, min(left, req.slots()), &g, 0)
		used += started
		if err != nil {
			return used, 0, err
		}
	}
	return used, 0, nil
}

// claim claims for slots free workers and starts a sync for each lease
// (claim-ahead: queues each for a worker, in the order of the claim's
// ticket seq); it returns how many it started (queued). A shard held off is no error: ownership
// logged it and the sources skip it until the hold ends. Nor is a shard
// whose keys are damaged: it is marked, and skipped but for a probe
// every damageProbe (see damage).
func (e *Engine) claim(ctx context.Context, src source, req claimReq, slots int, g *grant, seq uint64) (int, error) {
	workers := e.takeIDs(slots)
	ct := e.startClaim(req, slots)
	sent := time.Now()
	leases, err := src.claim(ctx, req, workers)
	if err == nil {
		e.refusals.cleared(opClaim, req.shard, sent)
	} else {
		e.claimRefused(src, req.shard, err)
	}
	if err != nil || len(leases) > 0 {
		e.health.wrote(err, sent)
	}
	if err == nil && len(leases) > 0 {
		e.ahead.observeLag(time.Since(sent))
	}
	claimSpan := e.endClaim(ct, len(leases), err)
	used := map[int]bool{}
	for _, l := range leases {
		used[l.Owner().Worker] = true
	}
	for _, w := range workers {
		if !used[w] {
			e.giveID(w)
		}
	}
	switch {
	case errors.Is(err, ownership.ErrHeldOff):
		return 0, nil
	case errors.Is(err, store.ErrDamaged):
		// The shard's own problem: the round goes on with the others.
		e.damage.mark(req.shard, err)
		return 0, nil
	case err != nil:
		return 0, err
	}
	e.damage.clear(req.shard)
	if e.ahead != nil {
		e.ahead.enqueue(seq, leases, g, claimSpan)
		return len(leases), nil
	}
	for _, l := range leases {
		e.workers.Add(1)
		go e.work(l, g.take(), g.probe, claimSpan)
	}
	return len(leases), nil
}

// claimRefused records err when it is an ACL refusal of src's claims to
// shard (wholeCall: a call across shards): it ends a batch run, and the
// daemon logs it once per cause (see refusals).
func (e *Engine) claimRefused(src source, shard int, err error) {
	switch {
	case !store.IsPermission(err):
	case src.refusalEnds():
		e.refusals.endRun(err)
	default:
		e.refusals.seen(opClaim, shard, err)
	}
}

// dueSource picks due items, longest waiting first across shards.
//
// It keeps the lowest due score of every shard (heads): read whole with
// Store.Oldest at most every headsMaxAge, and kept current in between by
// every pick claim, whose reply carries its shard's new head. A round
// then needs one round trip, the claim, instead of two. What the cache
// can miss for up to headsMaxAge is an item another process moved
// earlier in a shard it does not think due (an Add, a requeue, a failure
// released with a short backoff); items that come due with time are
// never missed, since a head is a due time, compared with the clock.
type dueSource struct {
	e *Engine

	mu    sync.Mutex
	heads []int64   // lowest due score per shard, ms; store.NoDue = nothing
	read  time.Time // when heads were last read whole
	// busy counts the pick claims in flight per shard: until one comes
	// back with the shard's new head, its cached head is the item that
	// claim is taking, and another loop's claim (claim-ahead lets the
	// two loops claim at once) would take the shard's next item ahead
	// of older items elsewhere.
	busy []int
}

// headsMaxAge bounds how stale the head of a shard nobody here claimed
// from may be.
const headsMaxAge = 20 * time.Millisecond

func (e *Engine) dueSource() *dueSource {
	return &dueSource{e: e, busy: make([]int, e.idx.Keys().Shards())}
}

func (s *dueSource) finished() bool { return false }

func (s *dueSource) refusalEnds() bool { return false }

// requests returns a pick claim for each shard with due items, the one
// with the longest-waiting item first.
func (s *dueSource) requests(ctx context.Context, n int) ([]claimReq, error) {
	shards, err := s.order(ctx)
	if err != nil {
		return nil, err
	}
	reqs := make([]claimReq, len(shards))
	for i, sh := range shards {
		reqs[i] = claimReq{shard: sh, n: n}
	}
	return reqs, nil
}

// claim picks the shard's longest-waiting due items, one per worker, and
// keeps the shard's new head, which the reply carries, in the cache.
func (s *dueSource) claim(ctx context.Context, req claimReq, workers []int) ([]*ownership.Lease, error) {
	s.setBusy(req.shard, 1)
	defer s.setBusy(req.shard, -1)
	res, err := s.e.own.ClaimPick(ctx, ownership.ClaimPickParams{Shard: req.shard, Workers: workers})
	if res == nil {
		return nil, err
	}
	if res.HeadKnown {
		s.setHead(req.shard, res.Head)
	}
	return res.Leases, err
}

func (s *dueSource) setBusy(shard, d int) {
	s.mu.Lock()
	s.busy[shard] += d
	s.mu.Unlock()
}

func (s *dueSource) setHead(shard int, ms int64) {
	s.mu.Lock()
	if shard < len(s.heads) {
		s.heads[shard] = ms
	}
	s.mu.Unlock()
}

// order returns the shards that have due items, the one with the
// longest-waiting item first (none with a single shard, which the claim
// itself checks); shards with a claim in flight come after the others.
// Shards held off are left out, and so are damaged ones but for a probe
// every damageProbe, which comes last.
func (s *dueSource) order(ctx context.Context) ([]int, error) {
	shards := s.e.idx.Keys().Shards()
	if shards == 1 {
		if skip, _ := s.e.damage.check(0); skip || s.e.held(0) {
			return nil, nil
		}
		return []int{0}, nil
	}
	heads, busy, err := s.cachedHeads(ctx)
	if err != nil {
		return nil, err
	}
	now := s.e.redisNow() + 50 // tolerate a little clock estimate error
	var order []int
	for sh, o := range heads {
		if s.e.held(sh) {
			continue
		}
		if skip, probe := s.e.damage.check(sh); probe || !skip && o <= now {
			order = append(order, sh)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(min(busy[a], 1), min(busy[b], 1)), cmp.Compare(heads[a], heads[b]))
	})
	return order, nil
}

// probe reads the heads of shards out of reach into read, bounded by
// awayProbeTimeout: a master that still does not answer costs the round
// that little. A read that fails as a whole (every shard probed is on
// that master) leaves each probed shard with its error.
func (s *dueSource) probe(ctx context.Context, shards []int, read []store.ShardHead) {
	var others []int
	for sh := range read {
		if !slices.Contains(shards, sh) {
			others = append(others, sh)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, awayProbeTimeout)
	got, err := s.e.idx.Oldest(pctx, others...)
	cancel()
	for _, sh := range shards {
		if err != nil {
			read[sh] = store.ShardHead{Due: store.NoDue, Err: err}
		} else {
			read[sh] = got[sh]
		}
	}
}

// cachedHeads returns the heads, read whole when the cache is stale,
// and the claims in flight per shard. The
// loop that finds them stale reads them; the other goes on with the
// cache meanwhile instead of reading them a second time (until there is
// a cache, both read). A shard whose due index is damaged is marked so,
// and has no head.
func (s *dueSource) cachedHeads(ctx context.Context) ([]int64, []int, error) {
	s.mu.Lock()
	stale := s.heads == nil || time.Since(s.read) > headsMaxAge
	if stale {
		s.read = time.Now()
	}
	s.mu.Unlock()
	if stale {
		// Shards out of reach are not read with the others (the round
		// would wait out the read timeout); those due for a probe are
		// read apart, briefly.
		away, probe := s.e.away.due()
		read, err := s.e.idx.Oldest(ctx, away...)
		if err != nil {
			s.mu.Lock()
			s.read = time.Time{} // the next round reads them again
			s.mu.Unlock()
			return nil, nil, err
		}
		if len(probe) > 0 {
			s.probe(ctx, probe, read)
		}
		heads := make([]int64, len(read))
		for sh, h := range read {
			heads[sh] = h.Due
			var dmg *store.DamageError
			switch {
			case errors.As(h.Err, &dmg):
				s.e.damage.mark(sh, h.Err)
			case store.IsUnreachable(h.Err):
				s.e.away.mark(sh, h.Err)
			case h.Err != nil:
				// A redirection or a failover's passing state (MOVED,
				// TRYAGAIN, CLUSTERDOWN): no head this round, read
				// again next round.
				s.e.log.Debug().Err(h.Err).Int("shard", sh).Msg("read the shard's head")
			case !slices.Contains(away, sh) || slices.Contains(probe, sh):
				s.e.away.clear(sh)
			}
		}
		s.mu.Lock()
		s.heads = heads
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.heads), slices.Clone(s.busy), nil
}
