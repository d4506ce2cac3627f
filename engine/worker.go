package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// work runs one sync under its lease and writes the outcome back. permit
// is the target permit the sync holds ("" without max_in_flight); probe
// says the sync is the breaker's probe; claim is the span of the claim
// that won l, which the sync's span links to.
func (e *Engine) work(l *ownership.Lease, permit string, probe bool, claim trace.SpanContext) {
	w := l.Owner().Worker
	freed := false
	free := func() {
		if !freed {
			freed = true
			e.giveID(w)
			if e.ahead != nil {
				e.ahead.slots.Add(-1) // the dispatcher took it
			}
			e.sem.Release(1)
			if e.ahead != nil {
				// A free worker raises the budget's limit (ahead.limit):
				// wake a claim loop waiting for it. Without this, a loop
				// that looked while this worker was still busy (after
				// observe woke it) waited for a wake-up that, with one
				// worker and nothing queued, never came.
				e.ahead.give(0)
			}
		}
	}
	defer func() {
		free()
		e.workers.Done()
	}()
	ctx, cancel := context.WithCancelCause(l.Context())
	e.mu.Lock()
	e.inflight[l] = cancel
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.inflight, l)
		e.mu.Unlock()
		cancel(nil)
	}()

	item := sinks.Item{ID: l.ID(), Fence: l.Fence(), Owner: l.Owner().String(), Attempt: l.Attempt(), LastSync: l.LastSync()}
	e.m.InFlight.Add(1)
	sctx, span := e.startSync(ctx, l, claim, probe)
	sctx = sinks.WithLeaseExpiry(sctx, l.Expiry)
	start := time.Now()
	err := e.syncSafely(sctx, item)
	took := time.Since(start)
	e.m.InFlight.Add(-1)
	e.m.observe(took)
	e.ahead.observe(took)
	e.tgt.done(permit)

	out, what := e.outcome(ctx, l, err, probe)
	// The sync is over: its worker slot goes to the next claim while the
	// outcome is written (group commit batches it with others). Workers
	// bounds concurrent syncs, not bookkeeping; Stop still waits for this
	// goroutine, release included. A resource error keeps its slot (see
	// below).
	if what != outcomeResource {
		free()
	}
	released := time.Now()
	res := e.rel.release(l, out)
	if res.Err == nil {
		e.refusals.cleared(opRelease, l.Shard(), released)
	}

	e.account(ctx, l, what, out, res, err, took)
	endSync(ctx, span, what, res.Recorded, err)
	if b := e.currentBatch(); b != nil {
		b.record(l.ID(), what, res.Recorded, took)
	}
}

// account counts and logs how a sync ended: what the sink did (what, err)
// and what its release wrote (res).
func (e *Engine) account(ctx context.Context, l *ownership.Lease, what outcomeKind, out ownership.Outcome,
	res ownership.ReleaseResult, err error, took time.Duration) {
	refused := store.IsPermission(res.Err)
	if what == outcomeSynced && res.Recorded && res.Err == nil {
		// The common case logs at debug level only: the item's fields
		// cost allocations and a float's formatting, per sync.
		e.m.SyncsOK.Add(1)
		if e.log.Debug().Enabled() {
			log := e.itemLog(l, took)
			log.Debug().Msg("synced")
		}
		return
	}
	log := e.itemLog(l, took)
	switch {
	case refused:
		// Redis's ACL refuses every release alike: logged once per
		// cause, not once per item (an outside trial saw a line for each).
		e.refusals.seen(opRelease, l.Shard(), res.Err)
	case res.Err != nil:
		log.Warn().Err(res.Err).Msg("release failed; the claim expires by itself")
	}
	recorded := res.Recorded
	switch what {
	case outcomeSynced:
		if recorded { // with a release error (not seen so far)
			e.m.SyncsOK.Add(1)
			break
		}
		// The sink finished, but ownership could not be trusted any more,
		// or the outcome could not be written: that attempt is not
		// recorded and the item syncs again.
		e.m.SyncsUnrecorded.Add(1)
		switch {
		case refused: // the refusal's line says so
			log.Debug().Msg("synced, but redis refused the release (ACL): not recorded")
		case res.Err != nil:
			log.Warn().Msg("synced, but the outcome could not be written: not recorded; the item syncs again once its claim expires")
		default:
			log.Warn().Str("release", res.Code.String()).Msg("synced, but the lease ended first: not recorded")
		}
	case outcomeFailed, outcomeQuarantined:
		e.failed(log, what, out, res, err)
	case outcomeResource:
		// syncd itself is short of descriptors or memory: the item is not
		// to blame. Hand it back (its place in line kept), and keep this
		// worker's slot for a backoff, so a daemon out of descriptors
		// does not spin claiming items it cannot sync.
		e.m.SyncsResource.Add(1)
		log.Error().Err(err).Int64("pause_ms", e.cfg.BackoffMin.Milliseconds()).Msg("sync failed for lack of a resource of syncd's own: handed back, not counted against the item")
		e.sleep(e.cfg.BackoffMin)
	case outcomeLost:
		e.m.SyncsLost.Add(1)
		if cause := context.Cause(ctx); cause != nil {
			log.Warn().Err(cause).Msg("lease lost during sync: cancelled, not recorded")
			break
		}
		log.Warn().Err(err).Msg("the sink stopped at the lease's end: handed back, not counted against the item")
	case outcomeStale:
		e.m.StaleFences.Add(1)
		if !recorded {
			log.Warn().Err(err).Msg("sink rejected the fence: a newer claim wrote first")
			break
		}
		kind := outcomeFailed
		if out.Kind == ownership.OutcomeQuarantine {
			kind = outcomeQuarantined
		}
		e.failed(log, kind, out, res, out.Err)
	case outcomeShutdown:
		e.m.HandedBack.Add(1)
		log.Info().Msg("handed back at shutdown")
	case outcomeUnavailable:
		e.m.SyncsUnavailable.Add(1)
		log.Debug().Err(err).Int64("back_in_ms", out.Delay.Milliseconds()).Msg("target unavailable: handed back, not counted against the item")
	}
}

// itemLog is the engine's logger with the fields of one sync.
func (e *Engine) itemLog(l *ownership.Lease, took time.Duration) zerolog.Logger {
	return e.log.With().Str("id", l.ID()).Uint64("fence", l.Fence()).Int("attempt", l.Attempt()).
		Int("worker", l.Owner().Worker).Float64("took_ms", ms(took)).Logger()
}

type outcomeKind int

const (
	outcomeSynced outcomeKind = iota
	outcomeFailed
	outcomeQuarantined
	outcomeLost
	outcomeStale
	outcomeShutdown
	outcomeResource
	outcomeUnavailable
)

// outcome decides what the release records, and tells the target's
// breaker how the sync ended (see TargetConfig), which says whose fault
// a failure is (see target.report). A failure put down to
// the target is handed back, not counted: in its place in line, or, for
// the breaker's probe, at the back of the line, so that the next probe
// tries another item (a poison item must not keep the breaker open).
func (e *Engine) outcome(ctx context.Context, l *ownership.Lease, err error, probe bool) (ownership.Outcome, outcomeKind) {
	handBack := ownership.Outcome{Kind: ownership.OutcomeHandBack}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrShutdown):
			return handBack, outcomeShutdown
		case errors.Is(cause, ownership.ErrLeaseLost):
			return handBack, outcomeLost
		}
	}
	if errors.Is(err, sinks.ErrLeaseEnded) {
		// The sink stopped at the lease's end (the exec sink's
		// supervisor, by itself), though this process's lease may live
		// on: a heartbeat moved the end too late to reach it. The item
		// did not fail; hand it back uncounted, as a lost lease.
		return handBack, outcomeLost
	}
	class, after := sinks.Classify(err)
	switch {
	case class == sinks.ClassNone:
		e.tgt.report(l.ID(), class, 0, nil, false)
		return ownership.Outcome{Kind: ownership.OutcomeSynced, Delay: e.cfg.Interval}, outcomeSynced
	case class == sinks.ClassStale:
		// A newer claim wrote first, so this lease is gone: the release
		// finds the record taken (or expired) and records nothing, and
		// the attempt is dropped. When it finds this claim still current,
		// the fence the target holds came from elsewhere (another
		// deployment, a counter that went back): that is the item's
		// failure, counted and backed off, so a target that keeps
		// refusing ends in quarantine, not in a loop of instant retries
		// (an API user's trial saw 777 syncs of one item in 10 s).
		stale := fmt.Errorf("the target refused fence %d as stale, though this claim was still current: %w", l.Fence(), err)
		if l.Attempt() >= e.cfg.MaxAttempts {
			return ownership.Outcome{Kind: ownership.OutcomeQuarantine, Err: stale}, outcomeStale
		}
		return ownership.Outcome{Kind: ownership.OutcomeFailed, Delay: e.backoff(l.Attempt()), Err: stale}, outcomeStale
	case isResourceErr(err):
		return handBack, outcomeResource
	}
	switch e.tgt.report(l.ID(), class, after, err, l.Attempt() > 1) {
	case blameTarget:
		switch {
		case probe:
			handBack.Delay = time.Millisecond
		case e.tgt == nil || e.tgt.cfg.Breaker.Disabled:
			// No breaker to hold the fleet back: retry later, uncounted.
			handBack.Delay = max(after, e.backoff(l.Attempt()))
		}
		return handBack, outcomeUnavailable
	case blameOwn:
		return ownership.Outcome{Kind: ownership.OutcomeQuarantine, Err: err}, outcomeQuarantined
	}
	// An item failure, or a permanent one that the breaker cannot yet
	// tell from the target's: the first of an expired token's 401s looks
	// like one customer's 404. Counted and backed off; the item's next
	// permanent failure quarantines it if another item succeeded between
	// or none failed.
	if l.Attempt() >= e.cfg.MaxAttempts {
		return ownership.Outcome{Kind: ownership.OutcomeQuarantine, Err: err}, outcomeQuarantined
	}
	return ownership.Outcome{Kind: ownership.OutcomeFailed, Delay: e.backoff(l.Attempt()), Err: err}, outcomeFailed
}

// failed logs and counts a failed sync. Only a failure whose release
// was recorded counts: when the lease ended first (or the release could
// not be written), the attempt is not counted in Redis, so the item is
// neither failing nor quarantined.
func (e *Engine) failed(log zerolog.Logger, what outcomeKind, out ownership.Outcome, res ownership.ReleaseResult, err error) {
	switch {
	case !res.Recorded && store.IsPermission(res.Err): // the refusal's line says so
		e.m.SyncsUnrecorded.Add(1)
		log.Debug().Err(err).Msg("sync failed, and redis refused the release (ACL): not recorded")
	case !res.Recorded:
		e.m.SyncsUnrecorded.Add(1)
		log.Warn().Err(err).Str("release", res.Code.String()).Msg("sync failed, but the lease ended first: not recorded")
	case what == outcomeQuarantined:
		e.m.SyncsFailed.Add(1)
		e.m.Quarantined.Add(1)
		log.Error().Err(err).Msg("sync failed; item quarantined until requeued")
	default:
		e.m.SyncsFailed.Add(1)
		log.Warn().Err(err).Int64("retry_in_ms", out.Delay.Milliseconds()).Msg("sync failed")
	}
}

// isResourceErr reports an error that is syncd's own, not the item's or
// the target's: the process ran out of file descriptors or memory (an
// audit saw items quarantined after idle connections exhausted the
// daemon's descriptors).
//
// Out of descriptors also reads as EBADF from fork/exec: the child moves
// a descriptor to one above the highest it is handed (syscall's
// forkAndExecInChild), and when that one is the last RLIMIT_NOFILE
// allows, dup3 says EBADF (an outside trial: 16 exec workers under
// ulimit -n 40, one start in ~600). A fork/exec EBADF says nothing of
// the item (its data is argv and env, whose faults are E2BIG, ENOENT and
// the like), so it is syncd's own. EBADF from anything else (a read, a
// write) is left an ordinary error: what it says is not known here.
func isResourceErr(err error) bool {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM) {
		return true
	}
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Op == "fork/exec" && errors.Is(pe.Err, syscall.EBADF)
}

// backoff is BackoffMin doubled per failed attempt, capped at BackoffMax,
// with jitter up to the next doubling, [d, min(2d, BackoffMax)], so
// failing items do not retry in lockstep and no delay leaves the bounds
// the config promises (the jitter was [d/2, d], which went below
// BackoffMin).
func (e *Engine) backoff(attempt int) time.Duration {
	d := e.cfg.BackoffMin
	for i := 1; i < attempt && d < e.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, e.cfg.BackoffMax)
	return d + rand.N(min(2*d, e.cfg.BackoffMax)-d+1)
}

// syncSafely calls the sink and turns a panic into an error, so one bad
// item cannot take the daemon down. That covers the error the sink
// returns: the engine reads its text and class later, and a nil pointer
// returned as an error (not a nil error, in Go) whose Error method
// dereferences it panicked there, in a worker, outside any recover (an
// API user's trial: one item's return value ended the process). Its
// methods run here first, and such an error is replaced by one that says
// what happened.
func (e *Engine) syncSafely(ctx context.Context, item sinks.Item) (err error) {
	returned := false
	defer func() {
		r := recover()
		switch {
		case r == nil:
		case returned:
			e.log.Error().Str("id", item.ID).Str("type", fmt.Sprintf("%T", err)).Interface("panic", r).
				Msg("the sink's error panicked when read: a nil pointer returned as an error is not a nil error")
			err = fmt.Errorf("engine: the sink returned a %T error that panicked when read (%v): a nil pointer returned as an error is not a nil error", err, r)
		default:
			e.log.Error().Str("id", item.ID).Interface("panic", r).Bytes("stack", debug.Stack()).Msg("sink panicked")
			err = fmt.Errorf("engine: sink panicked: %v", r)
		}
	}()
	err = e.sink.Sync(ctx, item)
	returned = true
	if err != nil {
		_ = err.Error()
		sinks.Classify(err)
	}
	return err
}

// ms is d in milliseconds, to the microsecond, for the took_ms log
// fields: a sync may take less than one.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
