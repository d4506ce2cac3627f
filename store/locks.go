package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// LockResult is the outcome of one lock attempt.
type LockResult struct {
	Acquired bool
	Fence    uint64
	// Wait is how long the current holder's lease has left, when not
	// acquired: Redis's PTTL, rounded down, so 0 means it ends within a
	// millisecond. When HeldOff, it is the hold-off left.
	Wait time.Duration
	// HeldOff reports a name held off after Redis lost its data: its
	// fence counter was gone and Redis has been up for less than ttl,
	// so a lock granted before the loss may still be trusted by its
	// holder (see lock.lua).
	HeldOff bool
}

// Lock tries once to take a standalone lock. A name whose fence counter
// is missing (not locked for a week, or lost with Redis's data) is held
// off until Redis has been up for ttl, unless the epoch marker of the
// name's shard shows that no data was lost (Cluster: that marker is in
// another slot, so only the uptime counts); see MarkEpoch.
func (s *Store) Lock(ctx context.Context, name string, rec *Record, ttl time.Duration) (LockResult, error) {
	key := s.keys.Lock(name)
	keys := make([]string, 2, 3)
	keys[0], keys[1] = key, key+lockFenceSuffix
	embedded := 0
	switch {
	case s.mini != nil:
		embedded = 1
	case !s.cfg.Cluster:
		keys = append(keys, s.keys.Epoch(s.keys.Shard(name)))
	}
	v, err := s.runHot(ctx, scriptLock, keys, ttl.Milliseconds(), MarshalRecord(rec), embedded)
	if err != nil {
		return LockResult{}, fmt.Errorf("store: lock %q: %w", name, err)
	}
	r, err := ints(v, 2)
	if err != nil {
		return LockResult{}, err
	}
	switch r[0] {
	case 1:
		return LockResult{Acquired: true, Fence: uint64(r[1])}, nil
	case -2:
		return LockResult{Wait: time.Duration(max(r[1], 0)) * time.Millisecond, HeldOff: true}, nil
	}
	return LockResult{Wait: time.Duration(max(r[1], 0)) * time.Millisecond}, nil
}

// lockReleasedKeep is how long a lock remembers the tokens of its last
// unlocks (Keys.LockReleased), for an unlock re-sent after a dropped
// connection: longer than go-redis's retries can take (3 retries, each
// bounded by the dial, write and read timeouts, 5+3+3 s by default).
const lockReleasedKeep = 60 * time.Second

// Unlock compare-and-deletes a standalone lock. An unlock that go-redis
// re-sent after a dropped connection reports Released when its first
// send released the lock (unlock.lua).
func (s *Store) Unlock(ctx context.Context, name string, tok Token) (ReleaseCode, error) {
	key := s.keys.Lock(name)
	v, err := s.runHot(ctx, scriptUnlock, []string{key, key + lockReleasedSuffix}, string(tok[:]), lockReleasedKeep.Milliseconds())
	if err != nil {
		return NotHeld, fmt.Errorf("store: unlock %q: %w", name, err)
	}
	n, _ := v.(int64)
	return ReleaseCode(n), nil
}

// ReadLock reads a standalone lock: its record and how long Redis keeps
// it (PTTL; negative when the key has no expiry). It returns a nil record
// when nobody holds the lock, and an error wrapping ErrBadRecord when
// the key holds something syncd did not write.
//
// One round trip of GET, PTTL, GET: the two reads must show the same
// token, so the PTTL is that holder's (tokens never repeat).
func (s *Store) ReadLock(ctx context.Context, name string) (*Record, time.Duration, error) {
	key := s.keys.Lock(name)
	for range 3 {
		var get1, get2 *redis.StringCmd
		var pttl *redis.DurationCmd
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			get1 = p.Get(ctx, key)
			pttl = p.PTTL(ctx, key)
			get2 = p.Get(ctx, key)
			return nil
		})
		if errors.Is(err, redis.Nil) && errors.Is(get1.Err(), redis.Nil) && errors.Is(get2.Err(), redis.Nil) {
			return nil, 0, nil
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, 0, fmt.Errorf("store: read lock %q: %w", name, err)
		}
		b1, b2 := []byte(get1.Val()), []byte(get2.Val())
		t1, ok1 := RecordToken(b1)
		t2, ok2 := RecordToken(b2)
		if get1.Err() != nil || get2.Err() != nil || ok1 != ok2 || t1 != t2 {
			continue // it changed hands between the reads
		}
		rec, err := UnmarshalRecord(b2)
		if err != nil {
			return nil, 0, fmt.Errorf("store: read lock %q: %w", name, err)
		}
		return rec, pttl.Val(), nil
	}
	return nil, 0, fmt.Errorf("store: read lock %q: it kept changing hands", name)
}
