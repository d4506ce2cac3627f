package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Backlog counts, per shard in one round trip, the items that are due
// now, and returns the total and the oldest due time (ms, Redis clock; 0
// when nothing is due).
func (s *Store) Backlog(ctx context.Context) (due int64, oldest int64, err error) {
	now, err := s.Now(ctx)
	if err != nil {
		return 0, 0, err
	}
	n := s.keys.Shards()
	counts := make([]*redis.IntCmd, n)
	heads := make([]*redis.ZSliceCmd, n)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			max := strconv.FormatInt(now, 10)
			counts[i] = p.ZCount(ctx, s.keys.Due(i), "-inf", max)
			heads[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.Due(i), Start: 0, Stop: 0})
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("store: backlog: %w", err)
	}
	for i := range n {
		due += counts[i].Val()
		if z := heads[i].Val(); len(z) > 0 && z[0].Score <= float64(now) && (oldest == 0 || int64(z[0].Score) < oldest) {
			oldest = int64(z[0].Score)
		}
	}
	return due, oldest, nil
}

// Count returns the number of items in the set and up to max
// quarantined IDs, in one round trip.
func (s *Store) Count(ctx context.Context, max int) (int, []string, error) {
	n := s.keys.Shards()
	cards := make([]*redis.IntCmd, n)
	quar := make([]*redis.StringSliceCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cards[i] = p.ZCard(ctx, s.keys.Due(i))
			quar[i] = p.ZRangeByScore(ctx, s.keys.Due(i), &redis.ZRangeBy{Min: "+inf", Max: "+inf", Count: int64(max)})
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("store: count: %w", err)
	}
	total := 0
	var ids []string
	for i := range n {
		total += int(cards[i].Val())
		for _, id := range quar[i].Val() {
			if len(ids) < max {
				ids = append(ids, id)
			}
		}
	}
	return total, ids, nil
}

// Now returns Redis's clock, in ms: the one clock of the fleet.
func (s *Store) Now(ctx context.Context) (int64, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("store: TIME: %w", err)
	}
	return t.UnixMilli(), nil
}

// Oldest returns the lowest due score of each shard (ms, Redis clock;
// 0 when the shard has nothing claimable), in one round trip.
func (s *Store) Oldest(ctx context.Context) ([]int64, error) {
	n := s.keys.Shards()
	cmds := make([]*redis.ZSliceCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cmds[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.Due(i), Start: 0, Stop: 0})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: oldest: %w", err)
	}
	out := make([]int64, n)
	for i, c := range cmds {
		if z := c.Val(); len(z) > 0 && z[0].Score < 1e300 {
			out[i] = int64(z[0].Score)
		}
	}
	return out, nil
}
