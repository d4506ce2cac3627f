package engine

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/ownership"
)

// ahead claims ahead of free workers (Config.ClaimAhead), so that a
// claim's round trips and its settle delay cost the workers nothing: the
// scheduler's claims take slots of a budget of their own, not workers,
// and wait out their round trips, settle window and confirm read while
// earlier syncs still run. A confirmed
// lease joins a queue, longest waiting first (the pick's order), and the
// dispatcher starts it on
// the next free worker. While it waits it is a lease like any other:
// ownership heartbeats it from its confirm on, and its trust window is
// checked before its sync starts.
//
// How many claims it makes is adapted to how fast the workers free up:
// those that will free while one claim is under way (workers x claim
// lag / mean turn, the lag being the claim's round trips and settle
// window, measured; a worker's turn its sync, or with syncs of
// microseconds what starting and ending one costs, see mean), plus two
// per worker, at most Config.ClaimAhead. A lease so waits one or two
// turns for its worker; one that waits longer than claim lag + mean
// turn, what a worker's own claim would have taken to start and end it
// (the workers slowed down), is handed back, in its place in line,
// instead of being held from peers with free workers. At Stop the queue
// is handed back.
type ahead struct {
	e      *Engine
	max    int           // Config.ClaimAhead
	settle time.Duration // the ownership settle delay
	meanNs atomic.Int64  // mean sync duration (moving average), ns; 0: none seen yet
	lagNs  atomic.Int64  // mean claim lag (moving average), ns; 0: none seen yet
	// gapNs is the mean time between two starts of the dispatcher while
	// leases were queued (moving average), ns; 0: none seen yet. The
	// dispatcher's own: lastStart and queued are when it last started a
	// lease and whether the queue held more then.
	gapNs     atomic.Int64
	lastStart time.Time
	queued    bool
	// slots is the worker slots the dispatcher took (the worker
	// semaphore) that the syncs have not given back yet: what limit
	// counts as busy. It is taken before the budget is given back, so a
	// claim loop never sees a worker free that a lease is on its way to.
	slots atomic.Int64

	mu     sync.Mutex
	held   int           // budget taken: claims on their way and leases queued
	freed  chan struct{} // closed (and replaced) when budget is given back
	wake   chan struct{} // one token: the queue changed
	queue  []*pending    // confirmed leases waiting for a worker, in order (before)
	seq    uint64        // claim tickets handed out
	closed bool          // Stop: what is confirmed now is handed back
	// emptyAt is when a claim last found nothing to claim where the
	// scheduler had nowhere else to look; wonAt when one last won.
	emptyAt, wonAt time.Time
	// lateAt is when a lease was last handed back for waiting past the
	// bound, startedAt when the dispatcher last started a sync: while
	// lateAt is later, the workers are stuck, and claims ahead would
	// only be handed back in turn.
	lateAt, startedAt time.Time
	// sweptAt is when pop last looked through the whole queue.
	sweptAt time.Time
}

// pending is a confirmed lease waiting for a worker, with what its sync
// needs.
type pending struct {
	l      *ownership.Lease
	seq    uint64    // its claim's ticket: the queue's order after due
	ready  time.Time // confirmed
	permit string
	probe  bool
	span   trace.SpanContext
}

// newAhead returns e's claim-ahead, nil when it is off (ClaimAhead is
// ClaimAheadOff). It adds a worker number for each claim it may hold: a
// lease keeps its number from claim to release.
func newAhead(e *Engine) *ahead {
	settle := e.own.Config().Settle
	if e.cfg.ClaimAhead <= 0 {
		return nil
	}
	ids := make([]int, 0, e.cfg.ClaimAhead+len(e.ids))
	for w := e.cfg.Workers + e.cfg.ClaimAhead - 1; w >= e.cfg.Workers; w-- {
		ids = append(ids, w)
	}
	e.ids = append(ids, e.ids...) // taken last, after the workers' own
	return &ahead{e: e, max: e.cfg.ClaimAhead, settle: settle, freed: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// mean returns a worker's mean turn: the mean sync duration, or the
// mean gap between the dispatcher's starts times the workers when that
// is longer (syncs of microseconds); until a sync has ended, with a
// settle delay, a guess of 1/32 of it: too short a guess claims leases
// that wait past the bound and are handed back, once, at the start; too
// long leaves the workers idle after the first syncs until the claims
// made on the measured mean are through their settle window (a 1/16
// guess cost the fairness bench's settle scenario 0.03x of its ideal).
// Without one, 0: nothing is claimed ahead of the workers until the
// first sync shows how long syncs take.
func (a *ahead) mean() time.Duration {
	if m := a.meanNs.Load(); m > 0 {
		// A turn is a sync and what starting and ending it costs: with
		// syncs of microseconds, 8 workers took a lease every 270 µs
		// each (30k/s), and a budget made from the sync alone held a
		// thousand leases for them, most of which waited past the bound
		// and were handed back (24k in 2 s against 64k synced).
		return max(time.Duration(m), time.Duration(a.gapNs.Load())*time.Duration(a.e.cfg.Workers))
	}
	return a.settle / 32
}

// lag returns the mean time a claim takes from its send to its leases
// being ready: its round trips, and its settle window and confirm read;
// at least the settle delay plus lagMin.
func (a *ahead) lag() time.Duration {
	return max(time.Duration(a.lagNs.Load()), a.settle+lagMin)
}

// lagMin is the least claim lag assumed, and the guess before one is
// measured: a pick claim's round trip under load, so that a lease
// claimed ahead may wait at least that for its worker.
const lagMin = time.Millisecond

// observeLag folds a claim's lag into the mean (weight 1/16).
func (a *ahead) observeLag(took time.Duration) {
	if a == nil {
		return
	}
	fold(&a.lagNs, took)
}

// observe folds a sync's duration into the mean (weight 1/16), and
// wakes a claim loop waiting for budget: a worker is free.
func (a *ahead) observe(took time.Duration) {
	if a == nil {
		return
	}
	fold(&a.meanNs, took)
	a.give(0)
}

// fold folds d into the moving average at v (weight 1/16; the first
// value as it is).
func fold(v *atomic.Int64, d time.Duration) {
	d = max(d, time.Microsecond)
	m := v.Load()
	if m == 0 {
		v.Store(int64(d))
		return
	}
	v.Store(m + (int64(d)-m)/16)
}

// limit is how many claims may be held now: the workers that free up
// during one claim's lag (workers x lag / mean sync), plus up to two per
// worker of slack, fewer as syncs take longer than a claim's lag (with
// 30s syncs and a 1ms lag a lease claimed ahead would hold its item from
// peers for a sync, to save its worker a millisecond), at least one per
// free worker, at most max. Until the first sync ends without a settle
// delay (no mean to go by), only the free workers; one while the workers
// are stuck (a lease waited past the bound and no sync started since),
// so that the next worker to free up finds a lease soon, without a
// stream of claims made only to be handed back. Call it with a.mu held.
func (a *ahead) limit() int {
	w := a.e.cfg.Workers
	free := max(w-int(a.slots.Load()), 0)
	mean := a.mean()
	switch {
	case a.lateAt.After(a.startedAt):
		return 1
	case mean <= 0:
		return free
	}
	r := float64(a.lag()) / float64(mean)
	need := min(float64(w)*r+2*float64(w)*min(r, 1), float64(a.max))
	return min(max(free, int(need)), a.max)
}

// bound is how long a confirmed lease may wait for a worker: a claim's
// lag and one sync, what a worker's own claim would have taken to start
// and end it (the claims of one lag come out of it together, and the
// workers take one lag to work through them). Until a sync has ended
// there is no telling how long one takes: a lease then waits as long as
// its trust window lets it, rather than being handed back and claimed
// again every lag while the first syncs run.
func (a *ahead) bound() time.Duration {
	if a.meanNs.Load() == 0 {
		return a.e.own.Config().TTL
	}
	return a.lag() + a.mean()
}

// take takes up to n of the budget, at least one, waiting until there is
// some; it fails only when ctx ends.
func (a *ahead) take(ctx context.Context, n int) (int, error) {
	for {
		a.mu.Lock()
		if free := a.limit() - a.held; free > 0 {
			k := min(n, free)
			a.held += k
			a.mu.Unlock()
			return k, nil
		}
		freed := a.freed
		a.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// give gives n of the budget back (0: none, but the limit may have
// changed) and wakes the claim loops waiting for it.
func (a *ahead) give(n int) {
	a.mu.Lock()
	a.held -= n
	close(a.freed)
	a.freed = make(chan struct{})
	a.mu.Unlock()
}

// ticket numbers a claim before it is sent: its leases queue in that
// order, whichever claim's confirm comes back first.
func (a *ahead) ticket() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	return a.seq
}

// found notes what a claim won. One that won nothing where the
// scheduler had nowhere else to look makes the scheduler rest a poll
// (pause), as a round with nothing to claim does: claims ahead return
// before their outcome is known, so the loop cannot see it otherwise.
func (a *ahead) found(won int, only bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case won > 0:
		a.wonAt = time.Now()
	case only:
		a.emptyAt = time.Now()
	}
}

// pause returns how long the scheduler should rest before claiming
// again: what is left of a poll since a claim found nothing, unless one
// won since.
func (a *ahead) pause() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.emptyAt.IsZero() || a.wonAt.After(a.emptyAt) {
		return 0
	}
	return a.e.cfg.Poll - time.Since(a.emptyAt)
}

// enqueue queues a claim's confirmed leases, which hold one of the
// budget each, for the dispatcher; after Stop it hands them back.
func (a *ahead) enqueue(seq uint64, leases []*ownership.Lease, g *grant, span trace.SpanContext) {
	now := time.Now()
	ps := make([]*pending, len(leases))
	for i, l := range leases {
		ps[i] = &pending{l: l, seq: seq, ready: now, permit: g.take(), probe: g.probe, span: span}
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.handBack(ps, "shutdown")
		return
	}
	for _, p := range ps {
		i, _ := slices.BinarySearchFunc(a.queue, p, before)
		a.queue = slices.Insert(a.queue, i, p)
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// before orders the queue: longest waiting first, by the due time each
// item had before its claim (the pick's own order; claims sent at the
// same moment may reach Redis in either order), then by claim ticket;
// the leases of one claim keep the claim's order.
func before(p, q *pending) int {
	return cmp.Or(cmp.Compare(p.l.Due(), q.l.Due()), cmp.Compare(p.seq, q.seq), -1)
}

// run is the dispatcher: it starts the queued leases, longest waiting
// first, as workers free up, and hands back those that waited past the
// bound or lost their lease meanwhile. When ctx ends (Stop, or the end
// of a batch run's loops) it hands back the queue and returns.
func (a *ahead) run(ctx context.Context) {
	for {
		if !a.wait(ctx) {
			a.close()
			return
		}
		// A free worker takes the first lease at once; else the
		// dispatcher waits for one until the longest-waiting lease's
		// bound.
		var err error
		if !a.e.sem.TryAcquire(1) {
			wctx, cancel := context.WithDeadline(ctx, a.firstReady().Add(a.bound()))
			err = a.e.sem.Acquire(wctx, 1)
			cancel()
		}
		if ctx.Err() != nil {
			if err == nil {
				a.e.sem.Release(1)
			}
			a.close()
			return
		}
		p := a.pop(err == nil)
		if p == nil {
			if err == nil {
				a.e.sem.Release(1)
			}
			continue
		}
		a.slots.Add(1) // given back by the sync (Engine.work)
		now := time.Now()
		if a.queued {
			fold(&a.gapNs, now.Sub(a.lastStart))
		}
		a.mu.Lock()
		a.startedAt = now
		a.queued = len(a.queue) > 0
		a.mu.Unlock()
		a.lastStart = now
		a.give(1) // the lease moves from the budget to a worker
		a.e.workers.Add(1)
		go a.e.work(p.l, p.permit, p.probe, p.span)
	}
}

// wait waits until the queue holds a lease; false when ctx ended first.
func (a *ahead) wait(ctx context.Context) bool {
	for {
		a.mu.Lock()
		n := len(a.queue)
		a.mu.Unlock()
		if n > 0 {
			return true
		}
		select {
		case <-a.wake:
		case <-ctx.Done():
			return false
		}
	}
}

// firstReady returns when the longest waiting queued lease was
// confirmed (now if none).
func (a *ahead) firstReady() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first time.Time
	for _, p := range a.queue {
		if first.IsZero() || p.ready.Before(first) {
			first = p.ready
		}
	}
	if first.IsZero() {
		return time.Now()
	}
	return first
}

// sweepEvery is how often pop looks through the whole queue for leases
// that waited past the bound or lost their lease, when a worker is
// free: a pop per sync, each walking a queue of up to a thousand leases
// and reading the clock for each, cost the dispatcher 13% of the
// engine's CPU at 64 workers. In between only the lease it starts is
// checked; one that is late or lost deeper in the queue is handed back
// up to sweepEvery later, and none is ever started.
const sweepEvery = time.Millisecond

// pop hands back queued leases that waited past the bound or whose
// trust window closed (all of them when no worker is free or a sweep is
// due, see sweepEvery; else those at the head), and returns the first of
// the others (nil: none, or no worker is free).
func (a *ahead) pop(worker bool) *pending {
	bound := a.bound()
	now := time.Now()
	var late, lost []*pending
	// gone files p under late or lost when it must not start.
	gone := func(p *pending) bool {
		switch {
		case p.l.Err() != nil || !now.Before(p.l.Expiry()):
			// Lost, or its trust window closes now (its timer has yet
			// to run): started, its sync would be cancelled at once.
			lost = append(lost, p)
		case now.Sub(p.ready) >= bound:
			late = append(late, p)
		default:
			return false
		}
		return true
	}
	a.mu.Lock()
	if !worker || now.Sub(a.sweptAt) >= sweepEvery {
		a.sweptAt = now
		kept := a.queue[:0]
		for _, p := range a.queue {
			if !gone(p) {
				kept = append(kept, p)
			}
		}
		clear(a.queue[len(kept):])
		a.queue = kept
	}
	var p *pending
	for worker && p == nil && len(a.queue) > 0 {
		q := a.queue[0]
		a.queue[0] = nil
		a.queue = a.queue[1:]
		if !gone(q) {
			p = q
		}
	}
	a.mu.Unlock()
	a.handBack(late, "wait")
	a.handBack(lost, "lost")
	return p
}

// close hands back the queue; leases confirmed later are handed back as
// they come (enqueue).
func (a *ahead) close() {
	a.mu.Lock()
	a.closed = true
	q := a.queue
	a.queue = nil
	a.mu.Unlock()
	a.handBack(q, "shutdown")
}

// handBack releases queued leases without an outcome, due where they
// were, and gives back their worker numbers, permits and budget. why is
// "shutdown" (Stop), "wait" (no worker within the bound) or "lost" (the
// trust window closed while it waited; nothing to record either way).
func (a *ahead) handBack(ps []*pending, why string) {
	if len(ps) == 0 {
		return
	}
	leases := make([]*ownership.Lease, len(ps))
	outs := make([]ownership.Outcome, len(ps))
	for i, p := range ps {
		leases[i], outs[i] = p.l, ownership.Outcome{Kind: ownership.OutcomeHandBack}
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.e.own.Config().Heartbeat)
	res := a.e.own.Release(ctx, leases, outs)
	cancel()
	failed := 0
	for i, p := range ps {
		if res[i].Err != nil {
			failed++
		}
		a.e.giveID(p.l.Owner().Worker)
		a.e.tgt.done(p.permit)
	}
	a.give(len(ps))
	log := a.e.log.Debug()
	switch why {
	case "shutdown":
		a.e.m.HandedBack.Add(int64(len(ps)))
		log = a.e.log.Info()
	case "wait":
		a.e.m.AheadLate.Add(int64(len(ps)))
		a.mu.Lock()
		a.lateAt = time.Now()
		a.mu.Unlock()
	case "lost":
		a.e.m.AheadLost.Add(int64(len(ps)))
		log = a.e.log.Warn()
	}
	log.Int("leases", len(ps)).Str("why", why).Int("release_failed", failed).Dur("bound_ms", a.bound()).
		Msg("claimed-ahead leases handed back without a sync")
}
