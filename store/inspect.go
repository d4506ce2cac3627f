package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The states of an item, as Counts, ListPage and Item report them. An
// item is in exactly one: in flight while a claim record exists, else
// quarantined, due (its due time passed), backing off (waiting for a
// retry after failures) or waiting (for its next sync).
const (
	ItemInFlight    = "in_flight"
	ItemQuarantined = "quarantined"
	ItemDue         = "due"
	ItemBackingOff  = "backing_off"
	ItemWaiting     = "waiting"
)

// StateAt returns the item's state at now (ms, Redis clock).
func (it ItemState) StateAt(now int64) string {
	switch {
	case it.Record != nil || it.RecordErr != nil:
		return ItemInFlight
	case it.Quarantined:
		return ItemQuarantined
	case it.Due <= now:
		return ItemDue
	case it.Attempts > 0:
		return ItemBackingOff
	}
	return ItemWaiting
}

// Counts is the item set at a glance (see Store.Counts).
type Counts struct {
	Now         int64 // Redis's clock at the read, ms
	Items       int64
	Due         int64 // due now, not claimed
	InFlight    int64 // claimed by a live daemon, from the registry
	BackingOff  int64 // failing and not quarantined (see Store.Counts)
	Quarantined int64
	// OldestDue is the due time of the longest-waiting due item, NoDue
	// when none is due.
	OldestDue int64
	// Daemons and Workers count the live daemons in the registry and
	// their workers.
	Daemons, Workers int
	// HeldOff counts the shards whose claims are held off after Redis
	// lost its data, or on a new deployment (see MarkEpoch), and
	// HeldUntil is when the last of them may be claimed again (ms,
	// Redis clock; 0 when none is held off).
	HeldOff   int
	HeldUntil int64
}

// OldestDueAge is how long the longest-waiting due item has waited, ms;
// 0 when none is due.
func (c Counts) OldestDueAge() int64 {
	if c.OldestDue == NoDue {
		return 0
	}
	return max(c.Now-c.OldestDue, 0)
}

// Counts counts the items by state in three round trips whatever the
// set's size: the daemon registry (two), then per shard ZCARD, ZCOUNT
// and HLEN of its indexes, pipelined. InFlight is the sum of the live
// daemons' in-flight items. BackingOff counts the items whose last
// attempt failed and that are not quarantined (the shard's err HASH,
// less the quarantined): those waiting out a backoff and, for a moment,
// those due for their retry or being retried. A shard whose keys are
// damaged is left out: the error then wraps ErrDamaged (a *DamageError
// per such shard) and the counts are the other shards'. A shard whose
// err hash alone is damaged is counted, without BackingOff, and named
// the same way (DamageError.ErrorsLost).
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	daemons, now, err := s.Daemons(ctx)
	if err != nil {
		return Counts{}, err
	}
	c := Counts{Now: now, OldestDue: NoDue, Daemons: len(daemons)}
	for _, d := range daemons {
		c.Workers += d.Workers
		c.InFlight += int64(d.InFlightCount)
	}
	n := s.keys.Shards()
	cmds := make([][7]redis.Cmder, n)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		max := strconv.FormatInt(now, 10)
		for i := range n {
			due := s.keys.Due(i)
			cmds[i] = [7]redis.Cmder{p.ZCard(ctx, due), p.ZCount(ctx, due, "-inf", max), p.ZCount(ctx, due, "+inf", "+inf"),
				p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: due, Start: 0, Stop: 0}),
				p.HLen(ctx, s.keys.Meta(i)), p.HLen(ctx, s.keys.Errors(i)), p.Get(ctx, s.keys.Epoch(i))}
		}
		return nil
	})
	var damaged []error
	for i := range n {
		// Not the marker's GET (the last): a marker of another type,
		// made by hand, reads as none, as the claims read it before they
		// rewrite it; it must not leave the shard's items uncounted.
		//
		// Nor the err hash's HLEN when that key is of another type: the
		// shard's items are counted, without BackingOff (ErrorsLost).
		check := cmds[i][:6]
		lost := cmds[i][5].Err()
		if isDamageReply(lost) {
			check = cmds[i][:5]
		}
		if err := shardCmdsErr(check); err != nil {
			if !isDamageReply(err) {
				return Counts{}, fmt.Errorf("store: counts: %w", err)
			}
			damaged = append(damaged, s.shardErr(ctx, i, err))
			continue
		}
		if isDamageReply(lost) {
			damaged = append(damaged, s.errorsLost(ctx, i, lost))
		}
		c.add(now, cmds[i])
	}
	return c, errors.Join(damaged...)
}

// add counts one shard's replies (see Counts).
func (c *Counts) add(now int64, r [7]redis.Cmder) {
	// The epoch marker: the time the shard is held off until (a value
	// not syncd's, planted by hand, reads as none: claims rewrite it).
	if at, err := strconv.ParseInt(r[6].(*redis.StringCmd).Val(), 10, 64); err == nil && at > now {
		c.HeldOff++
		c.HeldUntil = max(c.HeldUntil, at)
	}
	quar := r[2].(*redis.IntCmd).Val()
	c.Items += r[0].(*redis.IntCmd).Val()
	c.Due += r[1].(*redis.IntCmd).Val()
	c.Quarantined += quar
	c.BackingOff += max(r[5].(*redis.IntCmd).Val()-quar, 0)
	if z := r[3].(*redis.ZSliceCmd).Val(); len(z) > 0 && z[0].Score <= float64(now) {
		c.OldestDue = min(c.OldestDue, dueOf(z[0].Score))
	}
}

// shardCmdsErr is the first error of a shard's commands, nil if none.
func shardCmdsErr(cmds []redis.Cmder) error {
	var err error
	for _, c := range cmds {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
			err = cmp.Or(err, e)
		}
	}
	return err
}
