package engine

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// damageProbe is how often a damaged shard is tried again: one claim of
// it every few seconds, instead of one every poll.
const damageProbe = 5 * time.Second

// damage tracks the shards whose keys are damaged (store.ErrDamaged: a
// key of another type, put there by hand or by another program). The
// scheduler leaves such a shard alone, trying it again every
// damageProbe, while every other shard goes on. A shard's damage is
// logged when it is found and when the shard works again, counted in
// the syncd_shards_damaged gauge and reported by Engine.Damaged (for
// /readyz).
type damage struct {
	log zerolog.Logger
	n   *atomic.Int64 // shards damaged now: the gauge, and a lock-free "none"

	mu     sync.Mutex
	shards map[int]*damagedShard
}

type damagedShard struct {
	err   error
	probe time.Time // when to try the shard again
}

func newDamage(log zerolog.Logger, gauge *atomic.Int64) *damage {
	return &damage{log: log, n: gauge, shards: map[int]*damagedShard{}}
}

// mark records that shard is damaged, as err says; the next try is
// damageProbe away. Logged once, when the damage is found.
func (d *damage) mark(shard int, err error) {
	d.mu.Lock()
	ds, known := d.shards[shard]
	if !known {
		ds = &damagedShard{}
		d.shards[shard] = ds
		d.n.Add(1)
	}
	ds.err, ds.probe = err, time.Now().Add(damageProbe)
	d.mu.Unlock()
	if !known {
		d.log.Error().Err(err).Int("shard", shard).Int64("retry_every_ms", damageProbe.Milliseconds()).
			Msg("shard damaged: its items wait, every other shard goes on; fix or delete the key named")
	}
}

// clear records that shard works (a claim of it succeeded); logged once
// if it was damaged.
func (d *damage) clear(shard int) {
	if d.n.Load() == 0 {
		return // the common case, without the lock
	}
	d.mu.Lock()
	_, known := d.shards[shard]
	if known {
		delete(d.shards, shard)
		d.n.Add(-1)
	}
	d.mu.Unlock()
	if known {
		d.log.Info().Int("shard", shard).Msg("shard works again")
	}
}

// check says how the scheduler treats shard now: skip (damaged, not yet
// time to try it again) or probe (damaged, time to try it: claim from it
// even if its head is unknown). A probe moves the next one damageProbe
// on, so only one claim loop tries.
func (d *damage) check(shard int) (skip, probe bool) {
	if d.n.Load() == 0 {
		return false, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ds := d.shards[shard]
	switch {
	case ds == nil:
		return false, false
	case time.Now().Before(ds.probe):
		return true, false
	}
	ds.probe = time.Now().Add(damageProbe)
	return false, true
}

// list returns the error of each damaged shard, by shard.
func (d *damage) list() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	shards := slices.Sorted(maps.Keys(d.shards))
	out := make([]error, len(shards))
	for i, sh := range shards {
		out[i] = d.shards[sh].err
	}
	return out
}
