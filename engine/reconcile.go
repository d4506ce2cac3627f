package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// Defaults of ItemsConfig.
const (
	RefreshDefault    = 5 * time.Minute
	MaxRemovalDefault = 10 // percent
)

// ItemsConfig says where the item set comes from. Its sources of truth
// are read by Source; one daemon at a time, elected with a Locker,
// reconciles the set with them every Refresh (or when Changed says so):
// new IDs are added, IDs gone from every source are removed, but for
// items added by hand (store.AddByHand). After Redis lost the
// deployment's data, Source restores the set.
type ItemsConfig struct {
	// Source returns the desired item set, the union of the sources. An
	// error says a source failed: what it returns is still added, but
	// nothing is removed. Nil: no reconcile, no restore.
	Source func(ctx context.Context) ([]string, error)
	// Changed, if set, reports whether a source changed since it was
	// last called (a file's modification time); it is polled every few
	// seconds and brings the next reconcile forward.
	Changed func() bool
	// Refresh is how often the set is reconciled. Default
	// RefreshDefault (5m); negative: never (only restores).
	Refresh time.Duration
	// MaxRemoval is the most a reconcile may remove, in percent of the
	// set: a source that would remove more removes nothing (the guard
	// against a source gone wrong). Default MaxRemovalDefault (10).
	MaxRemoval int
}

// ReconcileResult is what one reconcile did.
type ReconcileResult struct {
	Desired, Current  int
	Added, Removed    int
	KeptManual        int   // gone from every source, kept: added by hand
	Refused           error // why nothing was removed (the guard), nil when removal went ahead
	Elapsed           time.Duration
	Fence             uint64
	InvalidFromSource int
	SourceErr         error // a source failed: what the others gave was added, nothing removed
}

// ErrNotLeader reports a reconcile skipped because another process holds
// the reconciler's lock.
var ErrNotLeader = errors.New("engine: another process is reconciling")

// ErrReconcileGuard is wrapped by ReconcileResult.Refused.
var ErrReconcileGuard = errors.New("engine: reconcile removed nothing")

// ReconcileOptions tune Reconcile.
type ReconcileOptions struct {
	// MaxRemoval is ItemsConfig.MaxRemoval; Force removes past it, and
	// when a source failed or gave nothing.
	MaxRemoval int
	Force      bool
	// TTL is the reconciler lock's lease (default ownership's). After
	// Redis lost its data the lock is held off for up to one TTL.
	TTL    time.Duration
	Logger zerolog.Logger
}

// Reconcile brings the item set of st in line with what source returns,
// the union of the sources (an error: one failed), as the elected
// reconciler: it takes the "reconcile" lock, then reads the sources (so
// a fleet runs an items command once per round, not once per daemon),
// and writes under the lock's fence, so a paused ex-leader's late writes
// are refused (store.ErrReconcileFenced). Removal is refused
// (Result.Refused) when a source failed, the sources are empty, or more
// than MaxRemoval percent would go, unless Force.
func Reconcile(ctx context.Context, st *store.Store, source func(context.Context) ([]string, error),
	o ReconcileOptions) (ReconcileResult, error) {
	start := time.Now()
	var res ReconcileResult
	lk, err := ownership.NewLocker(ownership.LockerConfig{Config: ownership.Config{TTL: o.TTL, Logger: o.Logger}}, st)
	if err != nil {
		return res, err
	}
	defer lk.Close()
	l, err := lk.TryLock(ctx, "reconcile", ownership.WithMetadata("reconcile"))
	if err != nil {
		switch {
		case errors.Is(err, ownership.ErrHeldOff):
			// Nobody holds it: it waits out the hold-off (an operator
			// read "another process is reconciling" here, with none).
			return res, fmt.Errorf("engine: the reconcile lock waits until no lease from before can be trusted (Redis lost its data, or the deployment is new): %w", err)
		case errors.Is(err, ownership.ErrNotObtained):
			return res, fmt.Errorf("%w (%w)", ErrNotLeader, err)
		}
		return res, err
	}
	defer l.Unlock(context.Background())
	res.Fence = l.Fence()
	lctx := l.Context()
	ids, srcErr := source(lctx)
	res.SourceErr = srcErr
	p, err := plan(lctx, st, ids, &res)
	if err != nil {
		return res, err
	}
	if res.InvalidFromSource > 0 && srcErr == nil {
		srcErr = fmt.Errorf("%d invalid ids from the sources", res.InvalidFromSource)
	}
	if !o.Force {
		res.Refused = guard(res, p.gone(), srcErr, o.MaxRemoval)
	}
	for sh := range st.Keys().Shards() {
		n, err := st.Reconcile(lctx, sh, res.Fence, true, p.adds[sh])
		res.Added += n
		if err != nil {
			return res, err
		}
		if res.Refused != nil {
			continue
		}
		n, err = st.Reconcile(lctx, sh, res.Fence, false, p.removes[sh])
		res.Removed += n
		if err != nil {
			return res, err
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// reconcilePlan is what a reconcile writes, by shard.
type reconcilePlan struct {
	adds, removes [][]string
}

func (p reconcilePlan) gone() int {
	n := 0
	for _, r := range p.removes {
		n += len(r)
	}
	return n
}

// plan reads each shard's items and those added by hand, and returns
// what to add and what to remove to match ids; it counts into res.
func plan(ctx context.Context, st *store.Store, ids []string, res *ReconcileResult) (reconcilePlan, error) {
	keys := st.Keys()
	desired := make([]map[string]bool, keys.Shards())
	for i := range desired {
		desired[i] = make(map[string]bool, len(ids)/len(desired)+1)
	}
	for _, id := range ids {
		if store.ValidateID(id) != nil {
			res.InvalidFromSource++
			continue
		}
		if sh := keys.Shard(id); !desired[sh][id] {
			desired[sh][id] = true
			res.Desired++
		}
	}
	p := reconcilePlan{adds: make([][]string, keys.Shards()), removes: make([][]string, keys.Shards())}
	for sh := range keys.Shards() {
		cur, err := st.Members(ctx, sh)
		if err != nil {
			return p, err
		}
		manual, err := st.Manual(ctx, sh)
		if err != nil {
			return p, err
		}
		res.Current += len(cur)
		// What is desired and found is crossed off; what is left of the
		// desired set is to add.
		want := desired[sh]
		for _, id := range cur {
			switch {
			case want[id]:
				delete(want, id)
			case manual[id]:
				res.KeptManual++
			default:
				p.removes[sh] = append(p.removes[sh], id)
			}
		}
		for id := range want {
			p.adds[sh] = append(p.adds[sh], id)
		}
	}
	return p, nil
}

// guard returns why nothing may be removed, nil when removal may go
// ahead: a source failed, the sources gave nothing, or more than
// maxRemoval percent of the set would go. A failed source is reported
// even when nothing would go: an operator's trial saw an items.command
// that failed every round go unlogged, with the refusing gauge at 0,
// while the set held what the command would have removed anyway.
func guard(res ReconcileResult, gone int, srcErr error, maxRemoval int) error {
	switch {
	case srcErr != nil:
		return fmt.Errorf("%w: a source failed: %w", ErrReconcileGuard, srcErr)
	case gone == 0:
		return nil
	case res.Desired == 0:
		return fmt.Errorf("%w: the sources gave no ids; %d would go", ErrReconcileGuard, gone)
	case gone*100 > maxRemoval*res.Current:
		return fmt.Errorf("%w: %d of %d items (%.1f%%) would go, more than the %d%% allowed (items.max_removal); `syncd items reconcile --force` removes them",
			ErrReconcileGuard, gone, res.Current, float64(gone)*100/float64(max(res.Current, 1)), maxRemoval)
	}
	return nil
}

// reconcileLoop reconciles every Refresh (and when a source changed),
// until stop closes. Every daemon runs it; the lock elects one per round.
// A round that failed, or found the lock held off after Redis lost its
// data (a fresh Redis included: up to a TTL), is tried again after
// reconcileRetry, doubling to reconcileRetryMax, not a whole Refresh
// later: with a refresh of an hour, a new deployment whose first round
// came inside the hold had no items for an hour. A round skipped because
// another process holds the lock waits for the next: that process is
// reconciling.
func (e *Engine) reconcileLoop(stop <-chan struct{}) {
	ic := e.cfg.Items
	if ic.Source == nil || ic.Refresh < 0 || e.st == nil {
		return
	}
	// The first round comes soon, spread over the fleet.
	next := time.Now().Add(time.Second + rand.N(2*time.Second))
	retry := reconcileRetry
	for {
		select {
		case <-stop:
			return
		case <-time.After(2 * time.Second):
		}
		if ic.Changed != nil && ic.Changed() {
			next = time.Now()
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(ic.Refresh)
		ctx, cancel := context.WithTimeout(context.Background(), ic.Refresh)
		again := e.reconcileOnce(ctx)
		cancel()
		if again {
			next = time.Now().Add(min(retry, ic.Refresh))
			retry = min(2*retry, reconcileRetryMax)
		} else {
			retry = reconcileRetry
		}
	}
}

// reconcileRetry and reconcileRetryMax bound how soon a failed or held
// off round is tried again (see reconcileLoop).
const (
	reconcileRetry    = 2 * time.Second
	reconcileRetryMax = time.Minute
)

// reconcileOnce runs one reconcile and logs and counts what it did; it
// reports whether to try again soon: the round failed, or the lock was
// held off after Redis lost its data.
func (e *Engine) reconcileOnce(ctx context.Context) bool {
	started := time.Now()
	res, err := Reconcile(ctx, e.st, e.cfg.Items.Source, ReconcileOptions{MaxRemoval: e.cfg.Items.MaxRemoval,
		TTL: e.own.Config().TTL, Logger: e.log})
	switch {
	case errors.Is(err, ownership.ErrHeldOff):
		e.log.Info().Err(err).Msg("reconcile waits: the reconcile lock is held off after redis lost its data (or is new)")
		return true
	case errors.Is(err, ErrNotLeader):
		e.log.Debug().Msg("reconcile skipped: another process is reconciling")
		return false
	case store.IsPermission(err):
		// Logged once per cause, not at each retry (see refusals).
		e.m.ReconcileFailed.Add(1)
		e.refusals.seen(opReconcile, wholeCall, err)
		return true
	case err != nil:
		e.m.ReconcileFailed.Add(1)
		e.log.Error().Err(err).Int("added", res.Added).Int("removed", res.Removed).Msg("reconcile failed")
		return true
	case res.Refused != nil:
		e.m.ReconcileGuarded.Add(1)
		e.m.ReconcileRefusing.Store(1)
		e.log.Error().Err(res.Refused).Int("added", res.Added).Int("desired", res.Desired).Int("current", res.Current).
			Msg("reconcile removed nothing")
		return false
	}
	e.refusals.cleared(opReconcile, wholeCall, started)
	e.m.ReconcileOK.Add(1)
	e.m.ReconcileRefusing.Store(0)
	ev := e.log.Debug()
	if res.Added > 0 || res.Removed > 0 {
		ev = e.log.Info()
	}
	ev.Int("added", res.Added).Int("removed", res.Removed).Int("kept_manual", res.KeptManual).Int("items", res.Desired).
		Int64("took_ms", res.Elapsed.Milliseconds()).Uint64("fence", res.Fence).Msg("item set reconciled with its sources")
	return false
}
