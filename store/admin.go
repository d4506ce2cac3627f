package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// byShard groups ids by shard, after check accepts each.
func (s *Store) byShard(ids []string, check func(string) error) (map[int][]any, error) {
	g := map[int][]any{}
	for _, id := range ids {
		if err := check(id); err != nil {
			return nil, err
		}
		sh := s.keys.Shard(id)
		g[sh] = append(g[sh], id)
	}
	return g, nil
}

// MaxRemoveIDLen bounds the ids Remove accepts: any id at all up to
// 1 MiB, so that an item planted in Redis under an id that ValidateID
// refuses (empty, control characters, 200 KB long) can still be removed.
const MaxRemoveIDLen = 1 << 20

// removable is Remove's check: an id of at most MaxRemoveIDLen bytes.
func removable(id string) error {
	if len(id) > MaxRemoveIDLen {
		return &IDError{ID: id[:64] + "...", Reason: fmt.Sprintf("%d bytes long, the limit for removal is %d", len(id), MaxRemoveIDLen)}
	}
	return nil
}

// eachShard runs a script over ids grouped by shard, after check accepts
// each, and sums the integer replies.
func (s *Store) eachShard(ctx context.Context, what string, sc *redis.Script, ids []string, check func(string) error,
	keys func(sh int, chunk []any) []string) (int, error) {
	g, err := s.byShard(ids, check)
	if err != nil {
		return 0, err
	}
	total := 0
	for sh, args := range g {
		n, err := s.inChunks(ctx, what, sc, sh, args, keys)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// inChunks runs a script over args of shard sh, 1000 a call, and sums
// the integer replies.
func (s *Store) inChunks(ctx context.Context, what string, sc *redis.Script, sh int, args []any,
	keys func(sh int, chunk []any) []string) (int, error) {
	total := 0
	for len(args) > 0 {
		chunk := args[:min(len(args), 1000)]
		args = args[len(chunk):]
		v, err := s.runScript(ctx, s.rdb, sc, keys(sh, chunk), chunk...)
		if err != nil {
			return total, fmt.Errorf("store: %s: %w", what, err)
		}
		n, _ := v.(int64)
		total += int(n)
	}
	return total, nil
}

// Add adds items; each new one is due at once. It returns how many were
// new. Invalid IDs are refused before anything is written.
func (s *Store) Add(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "add", scriptAdd, ids, ValidateID, func(sh int, _ []any) []string { return []string{s.keys.Due(sh)} })
}

// Remove removes items and returns how many were present. It takes any
// id up to MaxRemoveIDLen bytes, valid or not: an operator must be able
// to clean up an item planted under an id syncd would refuse to add
// (claims quarantine such items).
func (s *Store) Remove(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "remove", scriptRemove, ids, removable, s.removeKeys)
}

// WrongShard says that an item is in shard, where its id is not (its
// own shard is home), and how to remove it: the error a claim
// quarantines such a copy with, and the API's note on it. It is short
// enough to show whole in status's LAST ERROR column.
func WrongShard(shard, home int) string {
	return fmt.Sprintf("in shard %d, not its own (%d): syncd items remove --shard %d", shard, home, shard)
}

// RemoveInShard removes items from shard whatever shard their ids are
// of, as Remove does, and returns how many were present there: an item
// planted in another shard than its id's (which claims quarantine) is
// out of Remove's reach.
func (s *Store) RemoveInShard(ctx context.Context, shard int, ids ...string) (int, error) {
	if shard < 0 || shard >= s.keys.Shards() {
		return 0, fmt.Errorf("store: remove: no shard %d (the shards are 0 to %d)", shard, s.keys.Shards()-1)
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		if err := removable(id); err != nil {
			return 0, err
		}
		args[i] = id
	}
	return s.inChunks(ctx, "remove", scriptRemove, shard, args, s.removeKeys)
}

// removeKeys are remove.lua's keys for chunk, of shard sh.
func (s *Store) removeKeys(sh int, chunk []any) []string {
	keys := append(s.stateKeys(sh, nil), s.keys.Manual(sh), s.keys.Triggers(sh), s.keys.Again(sh))
	for _, id := range chunk {
		keys = append(keys, s.keys.ErrLog(sh, id.(string)))
	}
	return keys
}

// AddByHand adds items as Add does and marks them manual: a reconcile
// never removes them (Remove does). It returns how many were new.
func (s *Store) AddByHand(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "add", scriptAddManual, ids, ValidateID, func(sh int, _ []any) []string {
		return []string{s.keys.Due(sh), s.keys.Manual(sh)}
	})
}

// Requeue makes items due now and clears their failures, which brings
// quarantined items back. It returns how many exist.
func (s *Store) Requeue(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "requeue", scriptRequeue, ids, ValidateID, s.stateKeys)
}

func (s *Store) stateKeys(sh int, _ []any) []string {
	return []string{s.keys.Due(sh), s.keys.Meta(sh), s.keys.Errors(sh)}
}

// ErrUnknownItem reports an ID that is not in the item set.
var ErrUnknownItem = errors.New("store: unknown item")

// ForceRelease deletes an item's claim whoever holds it and raises its
// fence, so the old owner's late writes are rejected by fenced sinks. It
// reports whether a claim was held and the new fence. An item whose
// fence is at or past MaxFence is left as it is, with an error wrapping
// ErrFenceLimit that says how to fix it: a raise that cannot be made
// exactly is never reported.
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
	switch r[0] {
	case 0:
		return false, 0, fmt.Errorf("%w: %q", ErrUnknownItem, id)
	case -1:
		meta := s.keys.Meta(sh)
		f, _, _ := ParseMeta(s.rdb.HGet(ctx, meta, id).Val())
		return false, 0, fmt.Errorf("%w: item %q has fence %d in %s (planted or corrupt): nothing was changed. "+
			"Fix: HDEL %s %s (fences start again from Redis TIME in microseconds; reset a fenced target that "+
			"stored a higher fence for the item), then syncd requeue %s", ErrFenceLimit, id, f, meta, meta, id, id)
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
