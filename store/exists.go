package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Unknown returns the ids, of those given, that are not in the item set,
// in the order given and each once. It takes any id up to MaxRemoveIDLen
// bytes, as Remove does, and changes nothing: an admin command calls it
// to name the ids that Requeue or Remove will find missing. It sends
// ZSCORE, one round trip per 1000 ids: ZMSCORE would take fewer but is
// not in the least-privilege ACL the README documents.
func (s *Store) Unknown(ctx context.Context, ids ...string) ([]string, error) {
	return s.unknown(ctx, -1, ids)
}

// UnknownInShard is Unknown for the ids in shard, whatever shard they
// are of (as RemoveInShard takes them).
func (s *Store) UnknownInShard(ctx context.Context, shard int, ids ...string) ([]string, error) {
	if shard < 0 || shard >= s.keys.Shards() {
		return nil, fmt.Errorf("store: no shard %d (the shards are 0 to %d)", shard, s.keys.Shards()-1)
	}
	return s.unknown(ctx, shard, ids)
}

// unknown is Unknown in shard, or in each id's own shard for -1.
func (s *Store) unknown(ctx context.Context, shard int, ids []string) ([]string, error) {
	for _, id := range ids {
		if err := removable(id); err != nil {
			return nil, err
		}
	}
	var unknown []string
	seen := map[string]bool{}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		cmds := make([]*redis.FloatCmd, len(chunk))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range chunk {
				sh := shard
				if sh < 0 {
					sh = s.keys.Shard(id)
				}
				cmds[i] = p.ZScore(ctx, s.keys.Due(sh), id)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("store: look up ids: %w", err)
		}
		for i, id := range chunk {
			switch err := cmds[i].Err(); {
			case errors.Is(err, redis.Nil):
				if !seen[id] {
					unknown = append(unknown, id)
				}
			case err != nil: // a damaged due index: WRONGTYPE
				return nil, fmt.Errorf("store: look up ids: %w", err)
			}
			seen[id] = true
		}
	}
	return unknown, nil
}

// ShardsOf returns the shards whose due index holds id, in order, in one
// round trip: its own shard and any other that a copy was planted in by
// hand (ownership quarantines such a copy; RemoveInShard removes it). A
// shard whose due index is damaged is left out, as not holding it.
func (s *Store) ShardsOf(ctx context.Context, id string) ([]int, error) {
	if err := removable(id); err != nil {
		return nil, err
	}
	cmds := make([]*redis.FloatCmd, s.keys.Shards())
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { // each command's error is read below
		for sh := range cmds {
			cmds[sh] = p.ZScore(ctx, s.keys.Due(sh), id)
		}
		return nil
	})
	var out []int
	for sh, c := range cmds {
		switch err := c.Err(); {
		case err == nil:
			out = append(out, sh)
		case errors.Is(err, redis.Nil), isDamageReply(err):
		default:
			return nil, fmt.Errorf("store: shards of %q: %w", id, err)
		}
	}
	return out, nil
}
