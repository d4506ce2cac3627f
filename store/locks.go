package store

import (
	"context"
	"fmt"
	"time"
)

// LockResult is the outcome of one lock attempt.
type LockResult struct {
	Acquired bool
	Fence    uint64
	// Wait is how long the current holder's lease has left, when not
	// acquired.
	Wait time.Duration
}

// Lock tries once to take a standalone lock.
func (s *Store) Lock(ctx context.Context, name string, rec *Record, ttl time.Duration) (LockResult, error) {
	key := s.keys.Lock(name)
	v, err := s.runScript(ctx, s.rdb, scriptLock, []string{key, key + lockFenceSuffix},
		ttl.Milliseconds(), MarshalRecord(rec))
	if err != nil {
		return LockResult{}, fmt.Errorf("store: lock %q: %w", name, err)
	}
	r, err := ints(v, 2)
	if err != nil {
		return LockResult{}, err
	}
	if r[0] == 1 {
		return LockResult{Acquired: true, Fence: uint64(r[1])}, nil
	}
	return LockResult{Wait: time.Duration(max(r[1], 0)) * time.Millisecond}, nil
}

// Unlock compare-and-deletes a standalone lock.
func (s *Store) Unlock(ctx context.Context, name string, tok Token) (ReleaseCode, error) {
	v, err := s.runScript(ctx, s.rdb, scriptUnlock, []string{s.keys.Lock(name)}, string(tok[:]))
	if err != nil {
		return NotHeld, fmt.Errorf("store: unlock %q: %w", name, err)
	}
	n, _ := v.(int64)
	return ReleaseCode(n), nil
}
