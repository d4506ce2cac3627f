package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// CountsScanMax is how many members of each of a shard's two scanned
// ranges (due now; leased, up to one ttl ahead) Counts looks at, item by
// item. Past it the figures are estimates and Counts.Partial is set.
const CountsScanMax = 1000

// Counts is how many items are in each state, as `syncd status` names
// them: an item with an owner record is in flight; otherwise a
// quarantined one is quarantined, one whose due time has come is due,
// one that failed since its last success is backing off, and the rest
// are idle (synced, waiting for their interval).
type Counts struct {
	All, Due, InFlight, BackingOff, Quarantined int64
	// Partial is set when a shard had more than CountsScanMax items in a
	// scanned range: the split between due, in flight and backing off
	// is then estimated from the first CountsScanMax (All and
	// Quarantined stay exact).
	Partial bool
}

// Idle is how many items are in none of the other states.
func (c Counts) Idle() int64 {
	return max(c.All-c.Due-c.InFlight-c.BackingOff-c.Quarantined, 0)
}

func (c *Counts) add(o Counts) {
	c.All += o.All
	c.Due += o.Due
	c.InFlight += o.InFlight
	c.BackingOff += o.BackingOff
	c.Quarantined += o.Quarantined
	c.Partial = c.Partial || o.Partial
}

// shardCount is what the first round trip of Counts read of one shard.
type shardCount struct {
	all, quar, due, failing *redis.IntCmd
	dueIDs, leased          *redis.StringSliceCmd
	// The second round trip: a record (in flight) and an err entry
	// (failing) per ID of dueIDs, then of leased.
	rec  []*redis.IntCmd
	errs []*redis.BoolCmd
}

// Counts counts the items of every shard by state, with a bounded cost
// whatever the set's size: three round trips, and per shard five
// commands (ZCARD, two ZCOUNTs and a ZRANGEBYSCORE each capped at
// CountsScanMax on the due index; HLEN of the err hash) plus two per
// scanned member. ttl is the lease TTL: a claim moves its item's due
// score to its lease expiry, at most ttl ahead, so every item in flight
// is due now or within ttl, and only those ranges are read item by item.
// Failing items are those with an err entry (release.lua keeps one
// exactly while attempts > 0). A shard whose keys are damaged is left
// out: the error then wraps ErrDamaged and the counts are the other
// shards'.
func (s *Store) Counts(ctx context.Context, ttl time.Duration) (Counts, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return Counts{}, err
	}
	n := s.keys.Shards()
	sc := make([]shardCount, n)
	nowS, aheadS := strconv.FormatInt(now, 10), strconv.FormatInt(now+ttl.Milliseconds(), 10)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			due := s.keys.Due(i)
			sc[i].all = p.ZCard(ctx, due)
			sc[i].quar = p.ZCount(ctx, due, "+inf", "+inf")
			sc[i].due = p.ZCount(ctx, due, "-inf", nowS)
			sc[i].failing = p.HLen(ctx, s.keys.Errors(i))
			sc[i].dueIDs = p.ZRangeByScore(ctx, due, &redis.ZRangeBy{Min: "-inf", Max: nowS, Count: CountsScanMax})
			sc[i].leased = p.ZRangeByScore(ctx, due, &redis.ZRangeBy{Min: "(" + nowS, Max: aheadS, Count: CountsScanMax})
		}
		return nil
	})
	var damaged []error
	ok := make([]bool, n)
	for i := range n {
		c := &sc[i]
		err := cmp.Or(c.all.Err(), c.quar.Err(), c.due.Err(), c.failing.Err(), c.dueIDs.Err(), c.leased.Err())
		switch {
		case err == nil:
			ok[i] = true
		case isDamageReply(err):
			damaged = append(damaged, s.shardErr(ctx, i, err))
		default:
			return Counts{}, fmt.Errorf("store: counts: %w", err)
		}
	}
	if err := s.countMembers(ctx, sc, ok); err != nil {
		return Counts{}, err
	}
	var total Counts
	for i := range n {
		if ok[i] {
			total.add(sc[i].counts())
		}
	}
	return total, errors.Join(damaged...)
}

// countMembers asks, for every scanned member of the shards marked ok,
// whether it has a record and an err entry, in one round trip.
func (s *Store) countMembers(ctx context.Context, sc []shardCount, ok []bool) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range sc {
			if !ok[i] {
				continue
			}
			c := &sc[i]
			for _, id := range append(c.dueIDs.Val(), c.leased.Val()...) {
				c.rec = append(c.rec, p.Exists(ctx, s.keys.Record(i, id)))
				c.errs = append(c.errs, p.HExists(ctx, s.keys.Errors(i), id))
			}
		}
		return nil
	})
	if err != nil && !isDamageReply(err) {
		return fmt.Errorf("store: counts: %w", err)
	}
	return nil
}

// counts turns what was read of one shard into its Counts.
func (c *shardCount) counts() Counts {
	out := Counts{All: c.all.Val(), Quarantined: c.quar.Val(), Due: c.due.Val()}
	nDue := len(c.dueIDs.Val())
	out.Partial = nDue == CountsScanMax || len(c.leased.Val()) == CountsScanMax
	failingElsewhere := int64(0) // failing items that are in flight or due, not backing off
	for j := range c.rec {
		held, failing := c.rec[j].Val() > 0, c.errs[j].Val()
		if held {
			out.InFlight++
			if j < nDue {
				out.Due-- // due by its score, but its owner runs over
			}
		}
		if failing && (held || j < nDue) {
			failingElsewhere++
		}
	}
	out.BackingOff = max(c.failing.Val()-out.Quarantined-failingElsewhere, 0)
	return out
}
