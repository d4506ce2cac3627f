package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// LockTTL is the lease every lock implementation asks for.
const LockTTL = 30 * time.Second

// LockImpl is one way to take and release a lock, set up for one run.
type LockImpl struct {
	// Name is a short identifier, Label the row title in the report.
	Name, Label string
	// Counters count the implementation's client round trips.
	Counters []*Counter
	// Worker returns goroutine g's cycle: one attempt to take key and, if
	// taken, release it. ok is false when the lock was busy.
	Worker func(g int) func(ctx context.Context, key string) (ok bool, err error)
	// Close releases the run's resources.
	Close func()
}

// lockKind builds a LockImpl for a run on keys (the distinct or hot key
// names of that run; setup may pre-register them).
type lockKind struct {
	name, label string
	setup       func(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error)
}

// lockKinds are the implementations compared, in report order.
var lockKinds = []lockKind{
	{"ours", "syncd Locker (one shared, non-reentrant)", setupOurs(false, false)},
	{"ours-per-g", "syncd Locker (one per goroutine)", setupOurs(true, false)},
	{"engine", "syncd Manager Claim+Release (engine path)", setupManager(false)},
	{"ours-ap", "syncd Locker (one shared), auto-pipelined", setupOurs(false, true)},
	{"ours-per-g-ap", "syncd Locker (one per goroutine), auto-pipelined", setupOurs(true, true)},
	{"engine-ap", "syncd Manager Claim+Release, auto-pipelined", setupManager(true)},
	{"handrolled", "hand-rolled SET NX PX + EVALSHA delete", setupHandRolled},
	{"floor", "fenced floor: TIME + SET NX PX in one script, EVALSHA delete", setupFloor},
	{"redislock", "bsm/redislock", setupRedislock},
	{"redsync", "go-redsync/redsync/v4 (one goredis pool)", setupRedsync},
}

func lockKindByName(name string) lockKind {
	for _, k := range lockKinds {
		if k.name == name {
			return k
		}
	}
	panic("bench: no lock kind " + name)
}

// openStore opens a syncd store on addr with a counter attached and marks
// every shard's epoch, as a deployment does once: without the marker the
// first claim on a fresh Redis is held off for the TTL.
func openStore(ctx context.Context, addr, prefix string, cfg *store.Config) (*store.Store, *Counter, error) {
	c := store.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Addrs = []string{addr}
	return openStoreConfig(ctx, c, prefix)
}

// openStoreConfig is openStore with the addresses (and Cluster) in c.
func openStoreConfig(ctx context.Context, c store.Config, prefix string) (*store.Store, *Counter, error) {
	c.KeyPrefix = prefix
	st, err := store.Open(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	for sh := range st.Keys().Shards() {
		if _, err := st.MarkEpoch(ctx, sh, 0); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	cnt := new(Counter).Attach(st.Client())
	return st, cnt, nil
}

// autoPipelined reports whether a lock kind runs with
// store.Config.AutoPipeline on.
func autoPipelined(kind string) bool { return strings.HasSuffix(kind, "-ap") }

func setupOurs(perGoroutine, pipe bool) func(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
	return func(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
		st, cnt, err := openStore(ctx, addr, prefix, &store.Config{AutoPipeline: pipe})
		if err != nil {
			return nil, err
		}
		cfg := ownership.LockerConfig{Config: ownership.Config{TTL: LockTTL}}
		n := 1
		if perGoroutine {
			n = g
		}
		lockers := make([]*ownership.Locker, n)
		for i := range lockers {
			if lockers[i], err = ownership.NewLocker(cfg, st); err != nil {
				return nil, err
			}
		}
		return &LockImpl{
			Counters: []*Counter{cnt},
			Worker: func(g int) func(ctx context.Context, key string) (bool, error) {
				lk := lockers[g%n]
				return func(ctx context.Context, key string) (bool, error) {
					l, err := lk.TryLock(ctx, key)
					if errors.Is(err, ownership.ErrNotObtained) {
						return false, nil
					}
					if err != nil {
						return false, err
					}
					code, err := l.Unlock(ctx)
					if err != nil {
						return true, err
					}
					if code != store.Released {
						return true, fmt.Errorf("unlock %s: %v", key, code)
					}
					return true, nil
				}
			},
			Close: func() {
				for _, lk := range lockers {
					lk.Close()
				}
				st.Close()
			},
		}, nil
	}
}

func setupManager(pipe bool) func(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
	return func(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
		return managerImpl(ctx, addr, prefix, keys, &store.Config{AutoPipeline: pipe})
	}
}

func managerImpl(ctx context.Context, addr, prefix string, keys []string, cfg *store.Config) (*LockImpl, error) {
	st, cnt, err := openStore(ctx, addr, prefix, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := st.Add(ctx, keys...); err != nil {
		st.Close()
		return nil, err
	}
	m, err := ownership.New(st, ownership.Config{TTL: LockTTL})
	if err != nil {
		st.Close()
		return nil, err
	}
	shard := map[string]int{}
	for _, k := range keys {
		shard[k] = st.Keys().Shard(k)
	}
	return &LockImpl{
		Counters: []*Counter{cnt},
		Worker: func(int) func(ctx context.Context, key string) (bool, error) {
			out := []ownership.Outcome{{Kind: store.ReleaseSynced}}
			return func(ctx context.Context, key string) (bool, error) {
				leases, err := m.ClaimIDs(ctx, ownership.ClaimIDsParams{Shard: shard[key], IDs: []string{key}})
				if err != nil {
					return false, err
				}
				if len(leases) == 0 {
					return false, nil
				}
				res := m.Release(ctx, leases, out)
				if res[0].Err != nil {
					return true, res[0].Err
				}
				if res[0].Code != store.Released {
					return true, fmt.Errorf("release %s: %v", key, res[0].Code)
				}
				return true, nil
			}
		},
		Close: func() { m.Close(); st.Close() },
	}, nil
}

// handRolledDelete is the classic compare-and-delete.
var handRolledDelete = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func setupHandRolled(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := handRolledDelete.Load(ctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	cnt := new(Counter).Attach(rdb)
	ttl := LockTTL.Milliseconds()
	return &LockImpl{
		Counters: []*Counter{cnt},
		Worker: func(int) func(ctx context.Context, key string) (bool, error) {
			return func(ctx context.Context, key string) (bool, error) {
				var b [16]byte
				rand.Read(b[:])
				tok := string(b[:])
				k := prefix + ":" + key
				err := rdb.Do(ctx, "set", k, tok, "nx", "px", ttl).Err()
				if errors.Is(err, redis.Nil) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				n, err := handRolledDelete.Run(ctx, rdb, []string{k}, tok).Int()
				if err != nil {
					return true, err
				}
				if n != 1 {
					return true, fmt.Errorf("delete %s: %d", k, n)
				}
				return true, nil
			}
		},
		Close: func() { rdb.Close() },
	}, nil
}

// FloorLock and FloorUnlock are the least a lock with a fence from Redis
// can run: one script that reads Redis's clock and takes the lock with
// the fence in its value (the time in µs), and the classic
// compare-and-delete. Not a safe lock: with no fence counter a clock that
// steps back (a failover, NTP) repeats fences, nothing holds a name off
// after Redis lost its data, and an unlock re-sent after a dropped
// connection reports the lock as not held. It measures what the target
// "no slower than bsm/redislock" leaves for those guarantees.
var (
	FloorLock = redis.NewScript(`local t = redis.call('TIME')
local f = t[1] * 1000000 + t[2]
if redis.call('SET', KEYS[1], ARGV[1] .. string.format('%.0f', f), 'NX', 'PX', ARGV[2]) then return f end
return 0`)
	FloorUnlock = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 16) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// FloorCycle is one floor lock cycle on key: ok is false when the lock
// was held.
func FloorCycle(ctx context.Context, rdb redis.Scripter, key string) (ok bool, err error) {
	var b [16]byte
	rand.Read(b[:])
	tok := string(b[:])
	f, err := FloorLock.Run(ctx, rdb, []string{key}, tok, LockTTL.Milliseconds()).Int64()
	if err != nil || f == 0 {
		return false, err
	}
	n, err := FloorUnlock.Run(ctx, rdb, []string{key}, tok).Int()
	if err == nil && n != 1 {
		err = fmt.Errorf("floor delete %s: %d", key, n)
	}
	return true, err
}

func setupFloor(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	cnt := new(Counter).Attach(rdb)
	return &LockImpl{
		Counters: []*Counter{cnt},
		Worker: func(int) func(ctx context.Context, key string) (bool, error) {
			return func(ctx context.Context, key string) (bool, error) { return FloorCycle(ctx, rdb, prefix+":"+key) }
		},
		Close: func() { rdb.Close() },
	}, nil
}

func setupRedislock(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	cnt := new(Counter).Attach(rdb)
	cl := redislock.New(rdb)
	return &LockImpl{
		Counters: []*Counter{cnt},
		Worker: func(int) func(ctx context.Context, key string) (bool, error) {
			return func(ctx context.Context, key string) (bool, error) {
				l, err := cl.Obtain(ctx, prefix+":"+key, LockTTL, nil)
				if errors.Is(err, redislock.ErrNotObtained) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				return true, l.Release(ctx)
			}
		},
		Close: func() { rdb.Close() },
	}, nil
}

func setupRedsync(ctx context.Context, addr, prefix string, keys []string, g int) (*LockImpl, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	cnt := new(Counter).Attach(rdb)
	rs := redsync.New(redsyncgoredis.NewPool(rdb))
	return &LockImpl{
		Counters: []*Counter{cnt},
		Worker: func(int) func(ctx context.Context, key string) (bool, error) {
			// One Mutex per name, reused, as redsync's docs do.
			mus := map[string]*redsync.Mutex{}
			return func(ctx context.Context, key string) (bool, error) {
				mu := mus[key]
				if mu == nil {
					mu = rs.NewMutex(prefix+":"+key, redsync.WithExpiry(LockTTL), redsync.WithTries(1))
					mus[key] = mu
				}
				err := mu.TryLockContext(ctx)
				var taken *redsync.ErrTaken
				if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				ok, err := mu.UnlockContext(ctx)
				if err == nil && !ok {
					err = fmt.Errorf("unlock %s: not released", key)
				}
				return true, err
			}
		},
		Close: func() { rdb.Close() },
	}, nil
}
