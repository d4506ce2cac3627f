package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ItemState is everything the store knows about one item.
type ItemState struct {
	ID    string
	Shard int
	// Due is when the item is due (ms, Redis clock); for an item in
	// flight, when its lease would expire. Quarantined items have none.
	Due         int64
	Quarantined bool
	Fence       uint64
	LastSync    time.Time
	Attempts    int    // consecutive failures
	Error       string // last error while failing
	// Manual: added by hand (AddByHand); a reconcile never removes it.
	Manual bool
	// Record is the owner/state record while the item is claimed; nil
	// when it is not. RecordErr is set when the bytes are not a record.
	Record    *Record
	RecordErr error
	// State is one of the Item* states, set by ListPage and Item (see
	// StateAt); List leaves it empty.
	State string
}

// List returns one page of a shard's items in due order (longest waiting
// first) and the offset of the next page, -1 at the end. It takes two
// round trips whatever the page size. A shard whose due index or meta
// is damaged gives a *DamageError; a damaged err hash reads as no last
// errors (Counts and ListPage name it).
func (s *Store) List(ctx context.Context, shard, offset, count int) ([]ItemState, int, error) {
	z, err := s.rdb.ZRangeWithScores(ctx, s.keys.Due(shard), int64(offset), int64(offset+count-1)).Result()
	if err != nil {
		return nil, -1, s.listErr(ctx, shard, err)
	}
	next := -1
	if len(z) == count {
		next = offset + count
	}
	if len(z) == 0 {
		return nil, next, nil
	}
	ids := make([]string, len(z))
	for i, m := range z {
		ids[i], _ = m.Member.(string)
	}
	var reads *itemReads
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		reads = s.queueItemReads(ctx, p, shard, ids)
		return nil
	})
	if err := shardCmdsErr(reads.cmds()); err != nil {
		return nil, -1, s.listErr(ctx, shard, err)
	}
	out := make([]ItemState, len(ids))
	for i, id := range ids {
		st, err := reads.item(i, id, shard, z[i].Score)
		if err != nil {
			return nil, -1, err
		}
		out[i] = st
	}
	return out, next, nil
}

func (s *Store) listErr(ctx context.Context, shard int, err error) error {
	if err := s.shardErr(ctx, shard, err); errors.Is(err, ErrDamaged) {
		return err
	}
	return fmt.Errorf("store: list shard %d: %w", shard, err)
}
