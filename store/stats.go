package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnread marks, in a Cluster, a shard that Backlog could not read
// because its master did not answer while another master did: the
// figures returned are the other shards'.
var ErrUnread = errors.New("store: shard not read")

// Backlog counts, per shard in one round trip, the items that are due
// now, and returns the total and the oldest due time (ms, Redis clock;
// NoDue when nothing is due), leaving out the shards in skip (as Oldest
// does). A shard whose due index is damaged is left out: the error then
// wraps ErrDamaged (a *DamageError per such shard) and due and oldest
// count the other shards. In a Cluster, so is a shard whose master did
// not answer while another did, with an error wrapping ErrUnread; the
// call fails as a whole only when no shard could be read.
func (s *Store) Backlog(ctx context.Context, skip ...int) (due int64, oldest int64, err error) {
	now, err := s.Now(ctx, skip...)
	if err != nil {
		return 0, NoDue, err
	}
	n := s.keys.Shards()
	skipped := skipSet(n, skip)
	counts := make([]*redis.IntCmd, n)
	heads := make([]*redis.ZSliceCmd, n)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		max := strconv.FormatInt(now, 10)
		for i := range n {
			if !skipped[i] {
				counts[i] = p.ZCount(ctx, s.keys.Due(i), "-inf", max)
				heads[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.Due(i), Start: 0, Stop: 0})
			}
		}
		return nil
	})
	oldest = NoDue
	var partial []error
	var firstErr error
	read, failed := 0, 0
	for i := range n {
		if counts[i] == nil {
			continue // skipped
		}
		read++
		if err := cmp.Or(counts[i].Err(), heads[i].Err()); err != nil {
			if isDamageReply(err) {
				partial = append(partial, s.dueDamage(i, err))
			} else {
				failed++
				firstErr = cmp.Or(firstErr, err)
				partial = append(partial, fmt.Errorf("store: backlog of shard %d: %w: %w", i, ErrUnread, err))
			}
			continue
		}
		due += counts[i].Val()
		if z := heads[i].Val(); len(z) > 0 && z[0].Score <= float64(now) {
			oldest = min(oldest, dueOf(z[0].Score))
		}
	}
	if s.failsWhole(failed, read) {
		return 0, NoDue, fmt.Errorf("store: backlog: %w", firstErr)
	}
	return due, oldest, errors.Join(partial...)
}

// failsWhole reports whether failed reads of shards (not replies
// naming damage), of read, fail a call over every shard as a whole: with
// one server, which holds every shard, any failed read does; in a
// Cluster only when no master answered, for one master out of reach must
// not hold up the shards of the others.
func (s *Store) failsWhole(failed, read int) bool {
	return failed > 0 && (!s.cfg.Cluster || failed == read)
}

// skipSet marks the shards in skip, of n.
func skipSet(n int, skip []int) []bool {
	out := make([]bool, n)
	for _, sh := range skip {
		if sh >= 0 && sh < n {
			out[sh] = true
		}
	}
	return out
}

// Count returns the number of items in the set and up to max
// quarantined IDs, in one round trip. A shard whose due index is
// damaged is left out, as in Backlog: the error then wraps ErrDamaged
// and the counts are the other shards'. With max 0 it reads no IDs.
func (s *Store) Count(ctx context.Context, max int) (int, []string, error) {
	n := s.keys.Shards()
	cards := make([]*redis.IntCmd, n)
	quar := make([]*redis.StringSliceCmd, n)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cards[i] = p.ZCard(ctx, s.keys.Due(i))
			quar[i] = redis.NewStringSliceCmd(ctx) // none read: no error, no IDs
			if max > 0 {
				// go-redis sends no LIMIT for a Count of 0: every
				// quarantined ID would come back.
				quar[i] = p.ZRangeByScore(ctx, s.keys.Due(i), &redis.ZRangeBy{Min: "+inf", Max: "+inf", Count: int64(max)})
			}
		}
		return nil
	})
	total := 0
	var ids []string
	var damaged []error
	for i := range n {
		if err := cmp.Or(cards[i].Err(), quar[i].Err()); err != nil {
			if !isDamageReply(err) {
				return 0, nil, fmt.Errorf("store: count: %w", err)
			}
			damaged = append(damaged, s.dueDamage(i, err))
			continue
		}
		total += int(cards[i].Val())
		for _, id := range quar[i].Val() {
			if len(ids) < max {
				ids = append(ids, id)
			}
		}
	}
	return total, ids, errors.Join(damaged...)
}

// ShardItem is an item's id and the shard it was read from.
type ShardItem struct {
	ID    string `json:"id"`
	Shard int    `json:"shard"`
}

// QuarantineList is what Quarantined found.
type QuarantineList struct {
	// Own lists up to max quarantined items in their id's own shard.
	Own []string
	// Wrong lists up to max quarantined copies planted in another shard
	// than their id's (valid ids whose claims quarantine them, see
	// WrongShard), each with the shard it is in; WrongN counts them all.
	Wrong  []ShardItem
	WrongN int
}

// quarantinePage is how many quarantined members of a shard one read of
// Quarantined takes.
const quarantinePage = 1000

// Quarantined lists quarantined items in their id's own shard and
// copies planted in another shard than their id's, up to max of each,
// and counts every copy. The two must not be confused: the real item of
// a copy's id, in its own shard, syncs on. It reads every quarantined
// member of each shard (the first page of every shard in one round trip,
// then a round trip per further page), so a copy past the first max of
// its shard is still counted. A shard whose due index is damaged is left
// out, as in Count.
func (s *Store) Quarantined(ctx context.Context, max int) (QuarantineList, error) {
	var q QuarantineList
	n := s.keys.Shards()
	page := func(p redis.Cmdable, shard, off int) *redis.StringSliceCmd {
		return p.ZRangeByScore(ctx, s.keys.Due(shard), &redis.ZRangeBy{Min: "+inf", Max: "+inf", Offset: int64(off), Count: quarantinePage})
	}
	first := make([]*redis.StringSliceCmd, n)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			first[i] = page(p, i, 0)
		}
		return nil
	})
	var damaged []error
	for i, c := range first {
		for off := 0; ; {
			if err := c.Err(); err != nil {
				if !isDamageReply(err) {
					return q, fmt.Errorf("store: quarantined: %w", err)
				}
				damaged = append(damaged, s.dueDamage(i, err))
				break
			}
			for _, id := range c.Val() {
				switch {
				case s.wrongShard(id, i):
					q.WrongN++
					if len(q.Wrong) < max {
						q.Wrong = append(q.Wrong, ShardItem{ID: id, Shard: i})
					}
				case len(q.Own) < max:
					q.Own = append(q.Own, id)
				}
			}
			if len(c.Val()) < quarantinePage {
				break
			}
			off += quarantinePage
			c = page(s.rdb, i, off)
		}
	}
	return q, errors.Join(damaged...)
}

// wrongShard reports whether id, read from shard, is a copy planted
// there of an item of another shard: a valid id whose own shard is not
// shard (an invalid id is no item's copy, but a damaged one of its own).
func (s *Store) wrongShard(id string, shard int) bool {
	return ValidateID(id) == nil && s.keys.Shard(id) != shard
}

// WrongShardScanBudget is how many quarantined members CountWrongShard
// reads at most, spread over the shards.
const WrongShardScanBudget = ListScanBudget

// WrongShardCount is what CountWrongShard found.
type WrongShardCount struct {
	// N counts the quarantined copies planted in another shard than
	// their id's among the members read.
	N int
	// Partial says that a shard held more quarantined members than its
	// part of the budget: more copies may be there.
	Partial bool
}

// CountWrongShard counts the quarantined copies planted in another
// shard than their id's (see Quarantined), leaving out the shards in
// skip, in one round trip whatever the set's size: it reads at most
// WrongShardScanBudget quarantined members, an equal part (at least one)
// from each shard, and says Partial when a shard held more. Status and
// the API's summary read it at each refresh, so unlike Quarantined it
// must not read every quarantined member: a target outage can
// quarantine the whole set. A shard whose due index is damaged is left
// out, with a *DamageError, as in Count.
func (s *Store) CountWrongShard(ctx context.Context, skip ...int) (WrongShardCount, error) {
	n := s.keys.Shards()
	skipped := skipSet(n, skip)
	per := max(WrongShardScanBudget/n, 1)
	pages := make([]*redis.StringSliceCmd, n)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			if !skipped[i] {
				// One more than the part: read, it says there are more.
				pages[i] = p.ZRangeByScore(ctx, s.keys.Due(i), &redis.ZRangeBy{Min: "+inf", Max: "+inf", Count: int64(per + 1)})
			}
		}
		return nil
	})
	var w WrongShardCount
	var damaged []error
	for i, c := range pages {
		if c == nil {
			continue // skipped
		}
		if err := c.Err(); err != nil {
			if !isDamageReply(err) {
				return WrongShardCount{}, fmt.Errorf("store: count wrong shard: %w", err)
			}
			damaged = append(damaged, s.dueDamage(i, err))
			continue
		}
		ids := c.Val()
		if len(ids) > per {
			ids, w.Partial = ids[:per], true
		}
		for _, id := range ids {
			if s.wrongShard(id, i) {
				w.N++
			}
		}
	}
	return w, errors.Join(damaged...)
}

// ShardSize returns how many items a shard holds, 0 when its due index
// is damaged (a *DamageError).
func (s *Store) ShardSize(ctx context.Context, shard int) (int, error) {
	n, err := s.rdb.ZCard(ctx, s.keys.Due(shard)).Result()
	if err != nil {
		return 0, s.shardErr(ctx, shard, err)
	}
	return int(n), nil
}

// Now returns Redis's clock, in ms: the one clock of the fleet. In a
// Cluster with shards in skip, it asks the master of a shard not skipped.
func (s *Store) Now(ctx context.Context, skip ...int) (int64, error) {
	var t time.Time
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok && len(skip) > 0 {
		// TIME has no key: go-redis sends it to any master, the skipped
		// ones too. Ask the master of the first shard not skipped.
		skipped := skipSet(s.keys.Shards(), skip)
		sh := slices.Index(skipped, false)
		if sh < 0 {
			return 0, errors.New("store: TIME: every shard skipped")
		}
		var m *redis.Client
		if m, err = cc.MasterForKey(ctx, s.keys.Due(sh)); err == nil {
			t, err = m.Time(ctx).Result()
		}
	} else {
		t, err = s.rdb.Time(ctx).Result()
	}
	if err != nil {
		return 0, fmt.Errorf("store: TIME: %w", err)
	}
	return t.UnixMilli(), nil
}

// ShardHead is what Oldest read of one shard.
type ShardHead struct {
	// Due is the lowest due score of the shard (ms, Redis clock, clamped
	// to ±MaxDue; in the future when nothing is due yet), NoDue when the
	// shard has nothing claimable or was not read.
	Due int64
	// Err is a *DamageError when the shard's due index is damaged, and in
	// a Cluster the read's own error when the shard's master did not
	// answer while others did; Due is then NoDue.
	Err error
}

// Oldest returns the lowest due score of each shard, in one round trip
// (one per master in a Cluster), but for the shards in skip, which it
// does not read (their Due is NoDue). A shard whose due index is damaged
// has its own error, in its ShardHead, and so has, in a Cluster, a shard
// whose master did not answer while another master did: one master out
// of reach must not hold up the shards of the others. The error returned
// is for a call that failed as a whole (Redis, or every master read,
// unreachable).
func (s *Store) Oldest(ctx context.Context, skip ...int) ([]ShardHead, error) {
	n := s.keys.Shards()
	out := make([]ShardHead, n)
	for i := range out {
		out[i].Due = NoDue
	}
	cmds := make([]*redis.ZSliceCmd, n)
	skipped := skipSet(n, skip)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			if !skipped[i] {
				cmds[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.Due(i), Start: 0, Stop: 0})
			}
		}
		return nil
	})
	var failed, read int
	var firstErr error
	for i, c := range cmds {
		if c == nil {
			continue // skipped: not read
		}
		read++
		switch z, err := c.Result(); {
		case isDamageReply(err):
			out[i].Err = s.dueDamage(i, err)
		case err != nil:
			failed++
			firstErr = cmp.Or(firstErr, err)
			out[i].Err = fmt.Errorf("store: oldest of shard %d: %w", i, err)
		case len(z) > 0:
			out[i].Due = dueOf(z[0].Score)
		}
	}
	if s.failsWhole(failed, read) {
		return nil, fmt.Errorf("store: oldest: %w", firstErr)
	}
	return out, nil
}
