package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// ErrReconcileFenced reports a reconcile write refused because a reconcile
// with a higher lock fence wrote to the shard first: this reconciler's
// lock was lost (it was paused, say) and another took over.
var ErrReconcileFenced = errors.New("store: reconcile fenced out by a newer reconciler")

// reconcileChunk bounds the IDs of one script call.
const reconcileChunk = 1000

// Members returns every item ID of a shard (in flight and quarantined
// included), in one reply.
func (s *Store) Members(ctx context.Context, shard int) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.keys.Due(shard), 0, -1).Result()
	if err != nil {
		if isDamageReply(err) {
			return nil, s.dueDamage(shard, err)
		}
		return nil, fmt.Errorf("store: members of shard %d: %w", shard, err)
	}
	return ids, nil
}

// Manual returns which of a shard's items were added by hand.
func (s *Store) Manual(ctx context.Context, shard int) (map[string]bool, error) {
	ids, err := s.rdb.SMembers(ctx, s.keys.Manual(shard)).Result()
	if err != nil && !isDamageReply(err) && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: manual items of shard %d: %w", shard, err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// Reconcile adds (add) or removes (!add) the IDs of one shard under a
// reconciler's lock fence, in chunks of one script call each; removal
// spares items added by hand. Each chunk checks the fence: the first
// refused returns ErrReconcileFenced, with the count of what changed
// before it. IDs are not validated here (the caller's sources were).
func (s *Store) Reconcile(ctx context.Context, shard int, fence uint64, add bool, ids []string) (int, error) {
	op := "remove"
	if add {
		op = "add"
	}
	base := []string{s.keys.Due(shard), s.keys.Meta(shard), s.keys.Errors(shard), s.keys.Manual(shard),
		s.keys.ReconcileFence(shard)}
	total := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), reconcileChunk)]
		ids = ids[len(chunk):]
		args := make([]any, 0, 2+len(chunk))
		args = append(args, fence, op)
		keys := base
		if !add {
			keys = append(slices.Clip(base), make([]string, 0, len(chunk))...)
		}
		for _, id := range chunk {
			args = append(args, id)
			if !add {
				keys = append(keys, s.keys.ErrLog(shard, id))
			}
		}
		v, err := s.runScript(ctx, s.rdb, scriptReconcile, keys, args...)
		if err != nil {
			return total, fmt.Errorf("store: reconcile shard %d: %w", shard, err)
		}
		r, err := ints(v, 2)
		if err != nil {
			return total, err
		}
		if r[0] == 0 {
			return total, ErrReconcileFenced
		}
		total += int(r[1])
	}
	return total, nil
}
