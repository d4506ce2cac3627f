package engine

import (
	"context"
	"errors"
	"time"

	"github.com/syncd/syncd/store"
)

// countLoop counts the items by state every CountInterval, the first
// time after first, for Metrics.Items and the syncd_items gauges, until
// stop closes.
func (e *Engine) countLoop(stop <-chan struct{}, first time.Duration) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		e.countOnce()
		t.Reset(e.cfg.CountInterval)
	}
}

// countOnce counts the items by state once. A count that fails keeps the
// last one (the monitor says when Redis is unreachable); one that leaves
// damaged shards out is kept, as the other gauges do.
func (e *Engine) countOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), max(e.cfg.CountInterval, 2*time.Second))
	defer cancel()
	c, err := e.st.Counts(ctx)
	if err == nil && e.cfg.Target.configured() {
		e.countTarget(ctx)
	}
	if err != nil && !errors.Is(err, store.ErrDamaged) && len(e.away.shardList()) > 0 {
		// A Cluster master out of reach, which the count does not
		// leave out: the other masters answer, as the monitor, which
		// leaves it out, says; the gauges keep the last count.
		e.log.Debug().Err(err).Msg("cannot count the items while shards are out of reach: the syncd_items gauges are stale until they answer")
		return
	}
	// syncd_redis_up and /readyz say alike whether Redis answers: a
	// damaged shard or an ACL refusal is an answer.
	switch {
	case err == nil || errors.Is(err, store.ErrDamaged) || store.IsPermission(err):
		e.health.report(nil)
	default:
		e.health.report(err)
	}
	if err == nil || errors.Is(err, store.ErrDamaged) {
		e.m.items.Store(&c)
		e.m.RedisUp.Store(1)
		e.noteErrorsLost(err)
		e.noteDamaged(err)
	} else {
		e.m.RedisUp.Store(0)
		e.log.Debug().Err(err).Msg("cannot count the items: the syncd_items gauges are stale until redis answers")
	}
}

// countTarget reads the target's fleet-wide state for the syncd_target_*
// gauges; a failure keeps the last.
func (e *Engine) countTarget(ctx context.Context) {
	ts, err := e.st.TargetState(ctx)
	if err != nil {
		e.log.Debug().Err(err).Msg("cannot read the target's state: the syncd_target gauges are stale until redis answers")
		return
	}
	e.m.target.Store(&ts)
}

// noteErrorsLost logs, once each, the shards whose err hash alone is
// damaged (store.DamageError.ErrorsLost), as the count found them, and
// once again when one is fixed: their items sync, so neither the
// scheduler nor /readyz sees it, and every failure there loses its
// message (an outside trial saw only status say so). Called by the
// count loop alone.
func (e *Engine) noteErrorsLost(err error) {
	now := map[int]bool{}
	for _, err := range store.Damages(err) {
		var d *store.DamageError
		if errors.As(err, &d) && d.ErrorsLost {
			now[d.Shard] = true
			if !e.errorsLost[d.Shard] {
				e.log.Error().Err(err).Int("shard", d.Shard).
					Msg("shard's err hash damaged: its items sync, but their failures lose their messages; delete the key named")
			}
		}
	}
	for sh := range e.errorsLost {
		if !now[sh] {
			e.log.Info().Int("shard", sh).Msg("shard's err hash works again")
		}
	}
	e.errorsLost = now
}

// noteDamaged hands the damage the count found (but the err hash's,
// noteErrorsLost's) to e.damage, which logs it, counts it in the
// syncd_shards_damaged gauge and names it in /readyz until a count
// finds it fixed: on a shard with no items no claim ever meets it (see
// damage for why a claim's success does not clear it).
func (e *Engine) noteDamaged(err error) {
	found := map[int]error{}
	for _, err := range store.Damages(err) {
		var d *store.DamageError
		if errors.As(err, &d) && !d.ErrorsLost {
			found[d.Shard] = err
		}
	}
	e.damage.counted(found)
}
