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
//
// Two readers find damage, and each clears only what it found, so that
// neither undoes the other's finding (one source of truth per finding):
//
//   - the claims (and the scheduler's read of the shards' heads): mark
//     and clear. Claim-found damage makes the scheduler skip the shard
//     but for a probe, whose success clears it.
//   - the count loop (Counts, every CountInterval): counted, with every
//     shard the count found damaged. Count-found damage stays until a
//     count finds it fixed, and does not change scheduling.
//
// The count is what names a damaged meta or due key on a shard with no
// items, where no claim fails: before, such damage was named by status
// alone. Were the count to mark it as a claim does, the probe's claim,
// which succeeds on an empty shard, would clear it, and the next count
// mark it again: logged as found and fixed every CountInterval. A shard
// is damaged while either finding holds; it is logged once when the
// first is made and once when the last is undone.
type damage struct {
	log zerolog.Logger
	n   *atomic.Int64 // shards damaged now: the gauge, and a lock-free "none"

	mu     sync.Mutex
	shards map[int]*damagedShard
}

type damagedShard struct {
	err   error
	probe time.Time // when to try the shard again
	// byClaim and byCount: who found the damage and holds it (see damage).
	byClaim, byCount bool
}

func newDamage(log zerolog.Logger, gauge *atomic.Int64) *damage {
	return &damage{log: log, n: gauge, shards: map[int]*damagedShard{}}
}

// mark records that a claim found shard damaged, as err says; the next
// try is damageProbe away. Logged once, when the damage is found.
func (d *damage) mark(shard int, err error) {
	d.mu.Lock()
	ds, known := d.add(shard)
	ds.err, ds.probe, ds.byClaim = err, time.Now().Add(damageProbe), true
	d.mu.Unlock()
	if !known {
		d.logFound(shard, err, "claim")
	}
}

// clear records that a claim of shard succeeded: the damage a claim
// found is undone, logged once if that was the last finding.
func (d *damage) clear(shard int) {
	if d.n.Load() == 0 {
		return // the common case, without the lock
	}
	d.mu.Lock()
	ds := d.shards[shard]
	fixed := ds != nil && ds.byClaim && d.undo(shard, func() { ds.byClaim = false })
	d.mu.Unlock()
	if fixed {
		d.log.Info().Int("shard", shard).Msg("shard works again")
	}
}

// counted records the shards a count found damaged (found, by shard,
// the count's *store.DamageError each) and undoes the count's earlier
// findings that it did not make again; each change logged as mark's
// and clear's are.
func (d *damage) counted(found map[int]error) {
	var added, fixed []int
	d.mu.Lock()
	for sh, err := range found {
		ds, known := d.add(sh)
		if !ds.byClaim || ds.err == nil {
			ds.err = err // a claim's own finding is kept
		}
		ds.byCount = true
		if !known {
			added = append(added, sh)
		}
	}
	for sh, ds := range d.shards {
		if _, again := found[sh]; !again && ds.byCount && d.undo(sh, func() { ds.byCount = false }) {
			fixed = append(fixed, sh)
		}
	}
	d.mu.Unlock()
	for _, sh := range added {
		d.logFound(sh, found[sh], "count")
	}
	for _, sh := range fixed {
		d.log.Info().Int("shard", sh).Msg("shard works again")
	}
}

// add returns shard's entry, made if it was not damaged (known false).
// d.mu is held.
func (d *damage) add(shard int) (ds *damagedShard, known bool) {
	ds, known = d.shards[shard]
	if !known {
		ds = &damagedShard{}
		d.shards[shard] = ds
		d.n.Add(1)
	}
	return ds, known
}

// undo runs drop, which undoes one finding of shard, and removes the
// shard when no finding is left, reporting whether it did. d.mu is
// held.
func (d *damage) undo(shard int, drop func()) bool {
	drop()
	if ds := d.shards[shard]; ds.byClaim || ds.byCount {
		return false
	}
	delete(d.shards, shard)
	d.n.Add(-1)
	return true
}

func (d *damage) logFound(shard int, err error, by string) {
	ev := d.log.Error().Err(err).Int("shard", shard).Str("found_by", by)
	if by == "count" {
		// Found by the count (a shard no claim meets, such as one with
		// no items): nothing waits yet.
		ev.Msg("shard damaged: its items would wait, every other shard goes on; fix or delete the key named")
		return
	}
	ev.Int64("retry_every_ms", damageProbe.Milliseconds()).
		Msg("shard damaged: its items wait, every other shard goes on; fix or delete the key named")
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
	case ds == nil || !ds.byClaim: // the count's finding: claims go on
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
