package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// ErrShutdown is the cause a sync's context is cancelled with when Stop's
// drain timeout passes; such items are handed back, not failed.
var ErrShutdown = errors.New("engine: shutting down")

// ErrStarted reports a second Start, or a batch run on a running engine.
var ErrStarted = errors.New("engine: already started")

// ErrStopped reports a Start or batch run after Stop: an engine runs once.
var ErrStopped = errors.New("engine: stopped: an engine runs once, make a new one")

// claimer is what the engine needs from ownership; *ownership.Manager
// implements it. The engine claims through it, releases through it and
// asks it which shards are held off: ownership alone tracks hold-offs.
type claimer interface {
	Config() ownership.Config
	Owner(worker int) store.Owner
	Stats() *ownership.Stats
	// Held returns how long claims of shard stay held off, 0 when they
	// may go on.
	Held(shard int) time.Duration
	ClaimPick(ctx context.Context, p ownership.ClaimPickParams) (*ownership.ClaimPickResult, error)
	ClaimBatch(ctx context.Context, p ownership.ClaimBatchParams) ([]*ownership.Lease, error)
	Release(ctx context.Context, leases []*ownership.Lease, outs []ownership.Outcome) []ownership.ReleaseResult
	Close() error
}

// dueIndex is what the scheduler and the monitor read from the store;
// *store.Store implements it.
type dueIndex interface {
	Keys() store.Keys
	// Oldest returns the lowest due score of each shard but those in
	// skip (ms, Redis clock; store.NoDue when the shard has nothing
	// claimable or was skipped), with an error of its own for a shard
	// whose due index is damaged or, in a Cluster, out of reach.
	Oldest(ctx context.Context, skip ...int) ([]store.ShardHead, error)
	// Now returns Redis's clock, in ms, asking (in a Cluster) a master
	// of a shard not in skip.
	Now(ctx context.Context, skip ...int) (int64, error)
	// Backlog returns how many items are due and the oldest due time
	// (store.NoDue when none), of every shard but those in skip; with an
	// error wrapping store.ErrDamaged or store.ErrUnread, those of the
	// shards it could read.
	Backlog(ctx context.Context, skip ...int) (due int64, oldest int64, err error)
}

var (
	_ claimer  = (*ownership.Manager)(nil)
	_ dueIndex = (*store.Store)(nil)
)

// Engine runs the sync loop of one process: it claims the longest-waiting
// due items, runs the sink for each under its lease, and writes the
// outcome back. It is safe for concurrent use.
type Engine struct {
	st   *store.Store // batch runs and admin calls
	idx  dueIndex     // the scheduler's and the monitor's reads
	addr string       // the store's address, for logs
	sink sinks.Sink
	cfg  Config
	log  zerolog.Logger
	own  claimer
	rel  *releaser
	m    *Metrics
	// damage tracks the shards whose keys are damaged.
	damage *damage
	// errorsLost: the shards whose err hash alone the last count found
	// damaged (noteErrorsLost; the count loop's alone).
	errorsLost map[int]bool
	away       *away // shards out of reach (a Cluster master)
	refusals   *refusals
	// tgt gates claims on the target's limits and breaker; nil over a
	// fake store.
	tgt       *target
	deploy    deployWatch    // the monitor's
	watchStop chan struct{}  // closed by Stop once syncs drained
	bg        sync.WaitGroup // the target's watcher and the reconciler

	// tracer makes the claim and sync spans; nil: tracing is off.
	tracer trace.Tracer

	sem   *semaphore.Weighted // bounds concurrent syncs at cfg.Workers
	ahead *ahead              // claims ahead of free workers; nil: off
	idsMu sync.Mutex
	ids   []int // free worker numbers

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopOnce sync.Once
	stopCh   chan struct{} // closed: stop claiming
	done     chan struct{} // closed when the scheduler and monitor ended
	inflight map[*ownership.Lease]context.CancelCauseFunc
	workers  sync.WaitGroup
	settling sync.WaitGroup // claims waiting out their settle delay

	ready   atomic.Bool
	health  health       // whether Redis answers the monitor, for /readyz
	looping atomic.Bool  // runLoops was started: Stop waits for done
	offset  atomic.Int64 // Redis clock - local clock, ms
	batch   *batchRun    // set during RunBatch
	batchMu sync.Mutex
	// startedAt is when Start ran, for the daemon registry.
	startedAt time.Time
}

// New returns an engine over st that syncs through sink. It owns a
// claim Manager and a releaser, whose goroutines end with Stop (Run and
// RunBatch stop it too): call Stop even if the engine never started. It
// does not close st or sink.
func New(st *store.Store, sink sinks.Sink, cfg Config) (*Engine, error) {
	switch {
	case st == nil:
		return nil, errors.New("engine: the store is nil")
	case sink == nil || isNilPointer(sink):
		// Every sync would panic, and each panic count against its item
		// until every item is quarantined.
		return nil, errors.New("engine: the sink is nil")
	}
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	c.Ownership.Logger = c.Logger
	// Made before the Manager, whose heartbeats feed it.
	leaseLeft := newLeaseLeft()
	c.Ownership.ObserveHeartbeat = chainObserver(c.Ownership.ObserveHeartbeat,
		func(left time.Duration) { leaseLeft.Observe(left.Seconds()) })
	own, err := ownership.New(st, c.Ownership)
	if err != nil {
		return nil, err
	}
	e := newEngine(st, own, sink, c)
	e.m.leaseLeft = leaseLeft
	e.st, e.addr = st, st.Addr()
	oc := own.Config()
	e.tgt = &target{st: st, cfg: c.Target, ttl: oc.TTL, beat: oc.Heartbeat, base: own.Owner(0).String(),
		log: e.log, m: e.m, now: e.redisNow, permits: map[string]struct{}{}}
	return e, nil
}

// isNilPointer reports a nil pointer in an interface: a constructor that
// failed and returned (*mySink)(nil) with its error unchecked.
func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// chainObserver returns a heartbeat observer that calls the caller's
// (when set) and then the engine's.
func chainObserver(theirs, ours func(time.Duration)) func(time.Duration) {
	if theirs == nil {
		return ours
	}
	return func(d time.Duration) { theirs(d); ours(d) }
}

// newEngine returns an engine over idx and own with c resolved; New adds
// the store for batch runs and admin calls.
func newEngine(idx dueIndex, own claimer, sink sinks.Sink, c Config) *Engine {
	e := &Engine{idx: idx, sink: sink, cfg: c, own: own, log: c.Logger.With().Str("component", "engine").Logger(),
		sem: semaphore.NewWeighted(int64(c.Workers)), stopCh: make(chan struct{}), done: make(chan struct{}),
		inflight: map[*ownership.Lease]context.CancelCauseFunc{}, tracer: newTracer(c.TracerProvider)}
	e.m = newMetrics(own.Stats())
	e.damage = newDamage(e.log, &e.m.ShardsDamaged)
	e.away = newAway(e.log)
	e.refusals = &refusals{log: e.log}
	e.rel = newReleaser(own, own.Config().Heartbeat)
	for w := c.Workers - 1; w >= 0; w-- {
		e.ids = append(e.ids, w)
	}
	e.ahead = newAhead(e)
	return e
}

// Config returns the configuration in force, defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Metrics returns the engine's counters and gauges.
func (e *Engine) Metrics() *Metrics { return e.m }

// Ready reports whether the engine is running and its last claim round
// went through, or was refused by Redis for lack of memory after one did
// (ReadyState.OutOfMemorySince says that spell).
func (e *Engine) Ready() bool { return e.ready.Load() }

// Damaged returns, by shard, the error of each shard whose keys are
// damaged (each wraps store.ErrDamaged and names its shard): their items
// wait while every other shard goes on, until the key is fixed or
// deleted. Nil when every shard works.
func (e *Engine) Damaged() []error { return e.damage.list() }

// Refused returns what Redis's ACL refuses the claims, one entry per
// cause (store.PermissionError.Refused: "command evalsha"), while it
// does; nil while claims go through. The daemon retries them until an
// operator grants what is missing.
func (e *Engine) Refused() []string { return e.refusals.causes(opClaim) }

// ReleasesRefused returns what Redis's ACL refuses the releases, one
// entry per cause, while it does: the syncs go on but none is recorded.
// Nil while releases go through.
func (e *Engine) ReleasesRefused() []string { return e.refusals.causes(opRelease) }

// OutOfReach returns, by shard, an error for each shard whose Redis did
// not answer while the others did (a Cluster master crashed, paused or
// cut off): its items wait while every other shard goes on, and the
// shard is read again every second. Nil when every shard answers.
func (e *Engine) OutOfReach() []error { return e.away.list() }

// Add adds items to the set; each new one is due at once. It returns how
// many were new. Every ID is checked first: one invalid ID refuses the
// call before anything is written (the error wraps store.ErrInvalidID
// and names it), so filter untrusted IDs with store.ValidateID to add
// the rest. Items go to Redis shard by shard, up to 1000 per script
// call: a Redis error part way leaves the shards before it added, and the
// count says how many were new there; adding again is harmless.
func (e *Engine) Add(ctx context.Context, ids ...string) (int, error) { return e.st.Add(ctx, ids...) }

// Remove removes items from the set.
func (e *Engine) Remove(ctx context.Context, ids ...string) (int, error) {
	return e.st.Remove(ctx, ids...)
}

// Start starts claiming and syncing in the background until Stop. ctx
// bounds Start's own first read of Redis's clock, not the engine's run;
// when ctx is already done, Start returns its error and starts nothing
// (an API user's trial saw a cancelled ctx return nil and the engine
// run).
func (e *Engine) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: not started: %w", context.Cause(ctx))
	}
	if err := e.begin(); err != nil {
		return err
	}
	e.startedAt = time.Now()
	if err := e.syncClock(ctx); err != nil {
		e.log.Warn().Err(err).Msg("read redis clock; retrying in the loop")
	}
	e.log.Info().Int("workers", e.cfg.Workers).Int64("interval_ms", e.cfg.Interval.Milliseconds()).Int("batch", e.cfg.Batch).
		Str("owner", e.own.Owner(0).String()).Str("redis", e.addr).Msg("engine started")
	e.looping.Store(true)
	e.startWatch()
	e.bg.Go(func() { e.reconcileLoop(e.watchStop) })
	if e.st != nil {
		e.bg.Go(func() { e.countLoop(e.watchStop, 0) })
	}
	go e.runLoops(e.dueSource())
	return nil
}

func (e *Engine) begin() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.stopped:
		return ErrStopped
	case e.started:
		return ErrStarted
	}
	e.started = true
	return nil
}

// runLoops runs the scheduler and the monitor; done closes when both end.
// Call it as a new goroutine, after e.looping.Store(true).
func (e *Engine) runLoops(src source) {
	e.startWatch()
	var wg sync.WaitGroup
	schedDone := make(chan struct{})
	wg.Add(2)
	// Two claim loops for the daemon: while one waits on a round trip the
	// other claims for the workers that freed up meanwhile. Pick claims
	// never collide on an item, so the loops need no coordination beyond
	// the worker semaphore. A batch run's candidates come from a paged
	// scan that one loop owns.
	loops := 1
	if _, ok := src.(*dueSource); ok && e.cfg.Workers > 1 {
		loops = 2
	}
	go func() {
		defer wg.Done()
		defer close(schedDone)
		e.scheduleLoops(src, loops)
	}()
	go func() { defer wg.Done(); e.monitor(schedDone) }()
	wg.Wait()
	close(e.done)
}

// startWatch starts the target's watcher, once; it ends with Stop.
func (e *Engine) startWatch() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.watchStop == nil {
		e.watchStop = make(chan struct{})
		e.bg.Go(func() { e.tgt.watch(e.watchStop) })
	}
}

// Stop shuts the engine down, in this order:
//
//  1. stop claiming (the scheduler and monitor end);
//  2. let in-flight syncs finish, for at most DrainTimeout (and at most
//     until ctx ends);
//  3. cancel the rest with cause ErrShutdown; they return and their
//     claims are handed back at once, so peers resume them immediately
//     instead of waiting out the TTL;
//  4. stop heartbeats (close the claim Manager).
//
// Stop returns only once every Sync has returned, whatever ctx says: a
// sync that runs on must keep its lease heartbeated, or a peer could
// start the item meanwhile. A sink that ignores its ctx therefore holds
// Stop up (it logs, every 5 s, how many syncs it waits for). When ctx
// ended before Stop finished, Stop returns an error wrapping ctx's, so
// that the caller knows the shutdown ran past it; the engine is stopped
// all the same.
//
// Stop is safe to call more than once and before Start; only the first
// call can return an error.
func (e *Engine) Stop(ctx context.Context) (err error) {
	e.stopOnce.Do(func() {
		defer func() {
			if ctx.Err() != nil {
				err = fmt.Errorf("engine: stop ran past its context, waiting for every sync to return and its claim to be handed back: %w", context.Cause(ctx))
			}
		}()
		e.mu.Lock()
		started := e.started
		e.started, e.stopped = true, true
		e.mu.Unlock()
		close(e.stopCh)
		if started && e.looping.Load() {
			<-e.done
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			e.register(rctx, true)
			cancel()
		}
		e.ready.Store(false)
		drained := make(chan struct{})
		go func() { e.workers.Wait(); close(drained) }()
		t := time.NewTimer(e.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
			e.cancelInflight()
		case <-ctx.Done():
			e.cancelInflight()
		}
		for waited := time.Duration(0); ; {
			tick := time.NewTimer(5 * time.Second)
			select {
			case <-drained:
				tick.Stop()
			case <-tick.C:
				waited += 5 * time.Second
				e.mu.Lock()
				n := len(e.inflight)
				e.mu.Unlock()
				e.log.Warn().Int("syncs", n).Int64("waited_ms", waited.Milliseconds()).
					Msg("stop waits for syncs that were cancelled but have not returned: the sink ignores its context")
				continue
			}
			break
		}
		e.mu.Lock()
		if e.watchStop != nil {
			close(e.watchStop)
		}
		e.mu.Unlock()
		e.bg.Wait()
		e.tgt.wait()
		e.rel.close()
		if started && e.looping.Load() {
			e.unregister()
		}
		e.own.Close()
		e.log.Info().Msg("engine stopped")
	})
	return err
}

func (e *Engine) cancelInflight() {
	e.mu.Lock()
	n := len(e.inflight)
	for _, cancel := range e.inflight {
		cancel(ErrShutdown)
	}
	e.mu.Unlock()
	if n > 0 {
		e.log.Warn().Int("syncs", n).Msg("drain timeout: cancelling in-flight syncs and handing their items back")
	}
}

// Run starts the engine and stops it when ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	if ctx.Err() != nil {
		// Stopped before it began (a signal while Redis was reached):
		// nothing ran, nothing to report.
		return e.Stop(context.Background())
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-e.done:
	}
	return e.Stop(context.Background())
}

// syncClock measures the offset between Redis's clock and ours, used only
// to decide how long to sleep when nothing is due.
func (e *Engine) syncClock(ctx context.Context, skip ...int) error {
	before := time.Now()
	now, err := e.idx.Now(ctx, skip...)
	if err != nil {
		return err
	}
	mid := before.Add(time.Since(before) / 2)
	e.offset.Store(now - mid.UnixMilli())
	return nil
}

// redisNow estimates Redis's clock, in ms.
func (e *Engine) redisNow() int64 { return time.Now().UnixMilli() + e.offset.Load() }

// sleep waits d or until Stop; it reports false on Stop.
func (e *Engine) sleep(d time.Duration) bool {
	_, ok := e.sleepOr(d, nil)
	return ok
}

// sleepOr is sleep that ends early, woken, when wake is closed.
func (e *Engine) sleepOr(d time.Duration, wake <-chan struct{}) (woken, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.stopCh:
		return false, false
	case <-wake:
		return true, true
	case <-t.C:
		return false, true
	}
}

// monitor refreshes the gauges: due backlog and the age of the oldest due
// item. It ends with the scheduler.
func (e *Engine) monitor(schedDone <-chan struct{}) {
	every := min(2*time.Second, max(e.cfg.Poll, 100*time.Millisecond))
	// A read may take longer than a tick: a new pooled connection needs a
	// dial, and over TLS a handshake. Bounding it by the tick (100 ms with
	// a short poll) logged "cannot read the backlog" on a busy host whose
	// Redis was fine (tests/topology's TLS case under -race in CI).
	timeout := max(every, 2*time.Second)
	failing := false
	var registered time.Time
	// Redis is silent when no tick came back within a period and a
	// timeout; a second more lets a tick overrun its deadline a little.
	e.health.start(every+timeout+time.Second, every)
	defer e.health.stop()
	for {
		if time.Since(registered) >= registryEvery {
			// Its own deadline: the registry's key may be on a Cluster
			// master out of reach, and the reads below must not wait
			// out the tick's time behind it.
			registered = time.Now()
			rctx, rcancel := context.WithTimeout(context.Background(), timeout)
			e.register(rctx, false)
			rcancel()
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		// Shards out of reach (a Cluster master that does not answer) are
		// left out, as the scheduler leaves them out of its reads: each
		// read of them would wait out the timeout, and the gauges of the
		// others would go stale meanwhile.
		away := e.away.shardList()
		read := time.Now()
		due, oldest, err := e.idx.Backlog(ctx, away...)
		if errors.Is(err, store.ErrDamaged) || errors.Is(err, store.ErrUnread) {
			err = nil // the other shards' figures; the scheduler reports the damage and the shards out of reach
		}
		if err == nil {
			err = e.syncClock(ctx, away...)
		}
		if err == nil {
			e.checkDeployment(ctx)
		}
		late := ctx.Err()
		if len(away) > 0 {
			// The deployment check may have waited on a master out of
			// reach: that is no silence of Redis's, whose other masters
			// answered the reads.
			late = nil
		}
		cancel()
		// Said once when the gauges stop updating, once when they resume;
		// an ACL refusal once per cause (see refusals).
		refused := store.IsPermission(err)
		switch {
		case refused:
			e.refusals.seen(opBacklog, wholeCall, err)
		case err != nil && !failing:
			e.log.Warn().Err(err).Msg("cannot read the backlog: the due and oldest-wait gauges are stale until redis answers")
		case err == nil && failing:
			e.log.Info().Msg("backlog readable again")
		}
		if err == nil {
			e.refusals.cleared(opBacklog, wholeCall, read)
		}
		failing = err != nil && !refused
		e.noteAnswer(err, late)
		if err == nil {
			e.m.DueBacklog.Store(due)
			age := int64(0)
			if oldest != store.NoDue {
				age = max(e.redisNow()-oldest, 0)
			}
			e.m.OldestDueMs.Store(age)
		}
		select {
		case <-schedDone:
			return
		case <-time.After(every):
		}
	}
}

// noteAnswer reports a monitor tick to the health /readyz reads and to
// syncd_redis_up: err is its reads' error, late its deadline's when it
// passed. The registry write and the deployment check keep their errors
// to themselves, so a tick that waited out its deadline after the reads
// went through was not answered either. An ACL refusal is an answer.
func (e *Engine) noteAnswer(err, late error) {
	silence := err
	switch {
	case store.IsPermission(err):
		silence = nil
	case err == nil:
		silence = late
	}
	e.health.report(silence)
	e.m.RedisUp.Store(int64(b2f(err == nil && late == nil)))
}

// takeIDs takes n free worker numbers; giveID returns one.
func (e *Engine) takeIDs(n int) []int {
	e.idsMu.Lock()
	defer e.idsMu.Unlock()
	out := append([]int(nil), e.ids[len(e.ids)-n:]...)
	e.ids = e.ids[:len(e.ids)-n]
	return out
}

func (e *Engine) giveID(w int) {
	e.idsMu.Lock()
	e.ids = append(e.ids, w)
	e.idsMu.Unlock()
}
