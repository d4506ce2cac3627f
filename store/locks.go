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
//
// With Config.AutoPipeline, outside Cluster, concurrent Lock and Unlock
// calls of one Store go to Redis together: one lock.lua call for the
// locks and one unlock_batch.lua call for the unlocks, in one round trip
// (see coalescer and lockOps). Each is still granted or refused on its
// own.
//
// Its errors do not name the lock: the caller does, once (a quorum
// Locker joins the errors of several stores, and named the lock once
// per store over again).
func (s *Store) Lock(ctx context.Context, name string, rec *Record, ttl time.Duration) (LockResult, error) {
	r, err := s.lockOp(ctx, lockOp{name: name, rec: MarshalRecord(rec), ttl: ttl.Milliseconds()})
	if err == nil {
		err = r.err
	}
	if err != nil {
		return LockResult{}, err
	}
	return r.lock, nil
}

// lockReleasedKeep is how long a lock remembers the tokens of its last
// unlocks (Keys.LockReleased), and a Store the names and tokens its last
// calls of unlock_batch.lua released (Keys.LockReceipt), for an unlock
// re-sent after a dropped connection: longer than go-redis's retries can
// take (3 retries, each bounded by the dial, write and read timeouts,
// 5+3+3 s by default).
const lockReleasedKeep = 60 * time.Second

// Unlock compare-and-deletes a standalone lock. An unlock that go-redis
// re-sent after a dropped connection reports Released when its first
// send released the lock (unlock.lua, unlock_batch.lua). Concurrent
// calls go together as Lock's do. Its errors do not name the lock, as
// Lock's do not.
func (s *Store) Unlock(ctx context.Context, name string, tok Token) (ReleaseCode, error) {
	r, err := s.lockOp(ctx, lockOp{unlock: true, name: name, tok: tok})
	if err != nil {
		return NotHeld, err
	}
	return r.code, nil
}

// lockBatchMax and lockBatchFlight size the coalescer of lock and unlock
// calls: calls per round trip (128 keep a script call well under a
// millisecond of Redis), and round trips in flight at once. Of those,
// at most one carries unlocks (the coalescer's exclusive rule): the
// Store's unlock receipt (unlock_batch.lua) keeps what its last 4 calls
// that released a lock released, for such a call re-sent after a dropped
// connection, and calls of unlocks running meanwhile, through go-redis's
// retries, would push that out. Two in flight let Redis run one
// batch while the client reads the other's replies and gathers the next.
const (
	lockBatchMax    = 128
	lockBatchFlight = 2
)

// lockOp is one Lock or Unlock call.
type lockOp struct {
	unlock bool
	name   string
	rec    []byte // Lock: the record template
	ttl    int64  // Lock: ms
	tok    Token  // Unlock
}

// lockOpReply is one call's result: lock or code, or err when a lock's
// fence counter was refused.
type lockOpReply struct {
	lock LockResult
	code ReleaseCode
	err  error
}

// lockOp runs op through the coalescer, or alone.
func (s *Store) lockOp(ctx context.Context, op lockOp) (lockOpReply, error) {
	if s.lockB != nil {
		return s.lockB.do(ctx, op)
	}
	r, err := s.lockOps(ctx, []lockOp{op})
	if err != nil {
		return lockOpReply{}, err
	}
	return r[0], nil
}

// lockOps runs a batch of lock and unlock calls in one round trip: an
// unlock_batch.lua call for the unlocks (unlock.lua for a call that goes
// alone, outside the coalescer), then a lock.lua call for the locks (so
// a name unlocked and locked in one batch is free for the lock).
func (s *Store) lockOps(ctx context.Context, ops []lockOp) ([]lockOpReply, error) {
	type call struct {
		sc   *redis.Script
		n    int // ops in it
		keys []string
		args []any
		v    any
		err  error
	}
	unlock := call{sc: scriptUnlock}
	lock := call{sc: scriptLock}
	for _, op := range ops {
		if op.unlock {
			unlock.n++
		} else {
			lock.n++
		}
	}
	if unlock.n > 1 && s.lockB == nil {
		// unlock.lua serves one unlock per call, and only the
		// coalescer's exclusive rule makes the Store's receipt safe.
		return nil, fmt.Errorf("store: %d unlocks in one call without the coalescer", unlock.n)
	}
	var calls [2]*call
	n := 0
	if unlock.n > 0 {
		if s.lockB != nil {
			// Gathered by the coalescer, which sends one batch with
			// unlocks at a time: the Store's receipt serves a re-send.
			unlock.sc = scriptUnlockB
			unlock.keys = make([]string, 1, 1+unlock.n)
			unlock.keys[0] = s.lockRcpt
			toks := make([]byte, 0, len(Token{})*unlock.n)
			for _, op := range ops {
				if op.unlock {
					unlock.keys = append(unlock.keys, s.keys.Lock(op.name))
					toks = append(toks, op.tok[:]...)
				}
			}
			unlock.args = []any{lockReleasedKeep.Milliseconds(), toks}
		} else {
			for _, op := range ops { // the one unlock (see above)
				if op.unlock {
					key := s.keys.Lock(op.name)
					unlock.keys = []string{key, key + lockReleasedSuffix}
					unlock.args = []any{lockReleasedKeep.Milliseconds(), string(op.tok[:])}
				}
			}
		}
		calls[n] = &unlock
		n++
	}
	if lock.n > 0 {
		embedded, stride := 0, 3
		switch {
		case s.mini != nil:
			embedded, stride = 1, 2
		case s.cfg.Cluster:
			stride = 2
		}
		lock.keys = make([]string, 0, stride*lock.n)
		lock.args = make([]any, 0, 2+2*lock.n)
		lock.args = append(lock.args, embedded, stride)
		for _, op := range ops {
			if op.unlock {
				continue
			}
			key := s.keys.Lock(op.name)
			lock.keys = append(lock.keys, key, key+lockFenceSuffix)
			if stride == 3 {
				lock.keys = append(lock.keys, s.keys.Epoch(s.keys.Shard(op.name)))
			}
			lock.args = append(lock.args, op.ttl, op.rec)
		}
		calls[n] = &lock
		n++
	}
	switch {
	case n == 1 && s.lockB == nil:
		// Not coalesced (Cluster, or no auto-pipelining): the call
		// shares round trips through the auto-pipeliner, if any.
		c := calls[0]
		c.v, c.err = s.runHot(ctx, c.sc, c.keys, c.args...)
	case n == 1:
		// The coalescer's own round trip: straight to the client (the
		// auto-pipeliner's hand-offs between goroutines cost more than
		// they share here).
		c := calls[0]
		c.v, c.err = c.sc.Run(ctx, s.rdb, c.keys, c.args...).Result()
	default:
		var cmds [2]*redis.Cmd
		s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range calls {
				cmds[i] = c.sc.EvalSha(ctx, p, c.keys, c.args...)
			}
			return nil
		})
		for i, c := range calls {
			if isNoScript(cmds[i].Err()) {
				// The server lost its script cache (a restart, a
				// failover): EVALSHA, then EVAL, on the client.
				cmds[i] = c.sc.Run(ctx, s.rdb, c.keys, c.args...)
			}
			c.v, c.err = cmds[i].Result()
		}
	}
	var codes []int64
	var locks []any
	for _, c := range calls[:n] {
		v, err := c.v, c.err
		if err != nil {
			return nil, err
		}
		if c == &unlock {
			if code, ok := v.(int64); ok && unlock.n == 1 {
				codes = []int64{code} // one unlock: its code alone
			} else if codes, err = ints(v, unlock.n); err != nil {
				return nil, err
			}
			continue
		}
		if one, ok := v.(int64); ok && lock.n == 1 {
			// One lock acquired or held: one integer (lock.lua's end).
			if one == 0 {
				return nil, errors.New("store: lock.lua replied 0 for a lock")
			}
			code, n := int64(1), one
			if one < 0 {
				code, n = 0, -1-one
			}
			locks = []any{code, n}
			continue
		}
		arr, ok := v.([]any)
		if !ok || len(arr) != 2*lock.n {
			return nil, fmt.Errorf("store: lock.lua replied %T of %d values for %d locks", v, len(arr), lock.n)
		}
		locks = arr
	}
	out := make([]lockOpReply, len(ops))
	for i, op := range ops {
		if op.unlock {
			out[i].code, codes = ReleaseCode(codes[0]), codes[1:]
		} else {
			out[i].lock, out[i].err = lockResult(locks[0], locks[1])
			locks = locks[2:]
		}
	}
	return out, nil
}

// lockResult reads one lock's two values in lock.lua's reply.
func lockResult(code, v any) (LockResult, error) {
	c, _ := code.(int64)
	n, isNum := v.(int64)
	switch {
	case c == -3:
		why, _ := v.(string)
		return LockResult{}, errors.New(why)
	case !isNum:
		return LockResult{}, fmt.Errorf("store: lock.lua replied %T for a lock", v)
	case c == 1:
		return LockResult{Acquired: true, Fence: uint64(n)}, nil
	case c == -2:
		return LockResult{Wait: time.Duration(max(n, 0)) * time.Millisecond, HeldOff: true}, nil
	}
	return LockResult{Wait: time.Duration(max(n, 0)) * time.Millisecond}, nil
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
