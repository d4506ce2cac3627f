package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

func (s *Store) byShard(ids []string) (map[int][]any, error) {
	g := map[int][]any{}
	for _, id := range ids {
		if err := ValidateID(id); err != nil {
			return nil, err
		}
		sh := s.keys.Shard(id)
		g[sh] = append(g[sh], id)
	}
	return g, nil
}

// eachShard runs a script over ids grouped by shard and sums the integer
// replies.
func (s *Store) eachShard(ctx context.Context, what string, sc *redis.Script, ids []string, keys func(int) []string) (int, error) {
	g, err := s.byShard(ids)
	if err != nil {
		return 0, err
	}
	total := 0
	for sh, args := range g {
		for len(args) > 0 {
			chunk := args[:min(len(args), 1000)]
			args = args[len(chunk):]
			v, err := s.runScript(ctx, s.rdb, sc, keys(sh), chunk...)
			if err != nil {
				return total, fmt.Errorf("store: %s: %w", what, err)
			}
			n, _ := v.(int64)
			total += int(n)
		}
	}
	return total, nil
}

// Add adds items; each new one is due at once. It returns how many were
// new. Invalid IDs are refused before anything is written.
func (s *Store) Add(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "add", scriptAdd, ids, func(sh int) []string { return []string{s.keys.Due(sh)} })
}

// Remove removes items and returns how many were present.
func (s *Store) Remove(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "remove", scriptRemove, ids, s.stateKeys)
}

// Requeue makes items due now and clears their failures, which brings
// quarantined items back. It returns how many exist.
func (s *Store) Requeue(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "requeue", scriptRequeue, ids, s.stateKeys)
}

func (s *Store) stateKeys(sh int) []string {
	return []string{s.keys.Due(sh), s.keys.Meta(sh), s.keys.Errors(sh)}
}

// ErrUnknownItem reports an ID that is not in the item set.
var ErrUnknownItem = errors.New("store: unknown item")

// ForceRelease deletes an item's claim whoever holds it and raises its
// fence, so the old owner's late writes are rejected by fenced sinks. It
// reports whether a claim was held and the new fence.
func (s *Store) ForceRelease(ctx context.Context, id string) (held bool, fence uint64, err error) {
	if err := ValidateID(id); err != nil {
		return false, 0, err
	}
	sh := s.keys.Shard(id)
	v, err := s.runScript(ctx, s.rdb, scriptForce, []string{s.keys.Due(sh), s.keys.Meta(sh), s.keys.Record(sh, id)}, id)
	if err != nil {
		return false, 0, fmt.Errorf("store: force release %q: %w", id, err)
	}
	r, err := ints(v, 3)
	if err != nil {
		return false, 0, err
	}
	if r[0] == 0 {
		return false, 0, fmt.Errorf("%w: %q", ErrUnknownItem, id)
	}
	return r[1] == 1, uint64(r[2]), nil
}

// ReadRecord returns the record under key, nil when there is none, or an
// error wrapping ErrBadRecord for bytes that are not a record.
func (s *Store) ReadRecord(ctx context.Context, key string) (*Record, error) {
	b, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", key, err)
	}
	return UnmarshalRecord(b)
}
