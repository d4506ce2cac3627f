package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// PendingPage is one page of Pending.
type PendingPage struct {
	IDs         []string // not quarantined, lastSync before the run
	Quarantined int      // quarantined items on this page
	BackingOff  int      // of IDs, those failing and not due yet
	Next        int      // offset of the next page, -1 at the end
}

// Pending returns one page of a shard's items that a batch run started at
// since (ms, Redis clock) still has to sync, walking the due index from
// offset. A shard whose due index or meta hash is damaged gives a
// *DamageError.
func (s *Store) Pending(ctx context.Context, shard int, since int64, offset, count int) (*PendingPage, error) {
	v, err := s.runScript(ctx, s.rdb, scriptPending, []string{s.keys.Due(shard), s.keys.Meta(shard)}, since, offset, count)
	if err != nil {
		if err := s.shardErr(ctx, shard, err); errors.Is(err, ErrDamaged) {
			return nil, err
		}
		return nil, fmt.Errorf("store: pending of shard %d: %w", shard, err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 3 {
		return nil, fmt.Errorf("store: unexpected pending reply %T", v)
	}
	p := &PendingPage{}
	next, _ := arr[0].(int64)
	q, _ := arr[1].(int64)
	b, _ := arr[2].(int64)
	p.Next, p.Quarantined, p.BackingOff = int(next), int(q), int(b)
	for _, x := range arr[3:] {
		if id, ok := x.(string); ok {
			p.IDs = append(p.IDs, id)
		}
	}
	return p, nil
}

// JoinBatch returns the start of the current batch run (ms, Redis clock),
// starting one if there is none, and keeps the run's marker alive for
// keep; call it again within keep while the run goes on.
func (s *Store) JoinBatch(ctx context.Context, keep time.Duration) (int64, error) {
	v, err := s.runScript(ctx, s.rdb, scriptBatch, []string{s.keys.Batch()}, "join", keep.Milliseconds(), "")
	if err != nil {
		return 0, fmt.Errorf("store: join batch run: %w", err)
	}
	since, _ := v.(int64)
	return since, nil
}

// EndBatch ends the batch run that started at since, unless a new run
// has replaced it.
func (s *Store) EndBatch(ctx context.Context, since int64) error {
	_, err := s.runScript(ctx, s.rdb, scriptBatch, []string{s.keys.Batch()}, "end", 0, strconv.FormatInt(since, 10))
	if err != nil {
		return fmt.Errorf("store: end batch run: %w", err)
	}
	return nil
}
