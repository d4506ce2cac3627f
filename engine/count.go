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
	if err == nil || errors.Is(err, store.ErrDamaged) {
		e.m.items.Store(&c)
		e.m.RedisUp.Store(1)
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
