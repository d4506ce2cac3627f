package bench

import (
	"context"
	"maps"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// Counter is a go-redis hook that counts round trips (one per command or
// pipeline sent) and commands by name, client side. Attach one per client.
// It does not allocate: names are counted in fixed slots.
type Counter struct {
	roundTrips atomic.Int64
	commands   atomic.Int64
	byName     [len(counterNames)]atomic.Int64
	byScript   [maxScripts]atomic.Int64 // EVALSHA by product script
}

// The product's scripts by SHA1, so that EVALSHAs are counted per script
// ("release.lua"); set once by setScriptNames before any counting.
const maxScripts = 32

var (
	scriptIndex map[string]int
	scriptNames []string
)

// setScriptNames names the product's scripts by the SHA1 they are loaded
// as (store.ScriptSHAs: each carries only the prelude helpers it calls,
// so the SHA cannot be computed from the files alone).
func setScriptNames() {
	shas := store.ScriptSHAs()
	idx := map[string]int{}
	var names []string
	for _, name := range slices.Sorted(maps.Keys(shas)) {
		if len(names) == maxScripts {
			break
		}
		idx[shas[name]] = len(names)
		names = append(names, name)
	}
	scriptIndex, scriptNames = idx, names
}

func (c *Counter) countScript(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	if sha, ok := args[1].(string); ok {
		if i, ok := scriptIndex[sha]; ok {
			c.byScript[i].Add(1)
		}
	}
}

// counterNames are the commands counted by name; the rest count as other.
var counterNames = [...]string{"evalsha", "eval", "set", "get", "del", "zrange", "zrangebyscore", "time",
	"ping", "info", "script", "hset", "hget", "zadd", "zcount", "zrem", "lpush", "rpush", "other"}

// Attach adds c to a go-redis client and returns c.
func (c *Counter) Attach(rdb redis.UniversalClient) *Counter {
	rdb.AddHook(c)
	return c
}

func (c *Counter) count(cmd redis.Cmder) {
	name := cmd.Name()
	if name == "evalsha" {
		c.countScript(cmd)
	}
	c.countName(name)
}

func (c *Counter) countName(name string) {
	for i, n := range counterNames[:len(counterNames)-1] {
		if n == name {
			c.byName[i].Add(1)
			return
		}
	}
	c.byName[len(counterNames)-1].Add(1)
}

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.roundTrips.Add(1)
		c.commands.Add(1)
		c.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.roundTrips.Add(1)
		c.commands.Add(int64(len(cmds)))
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

type counts struct {
	roundTrips, commands int64
	byName               map[string]int64
}

func (c *Counter) snapshot() counts {
	out := counts{roundTrips: c.roundTrips.Load(), commands: c.commands.Load(), byName: map[string]int64{}}
	for i, n := range counterNames {
		if v := c.byName[i].Load(); v > 0 {
			out.byName[n] = v
		}
	}
	for i, n := range scriptNames {
		if v := c.byScript[i].Load(); v > 0 {
			out.byName[n] = v // "claim_pick.lua": never a command name
		}
	}
	return out
}

// Window is what happened between begin and end of one measurement.
type Window struct {
	Wall       time.Duration
	Mallocs    uint64 // heap objects allocated by this process
	Bytes      uint64 // heap bytes allocated by this process
	CPU        time.Duration
	RedisCPU   time.Duration   // summed over the Redis processes
	RedisCPUs  []time.Duration // per process (a Cluster's masters, in order)
	RoundTrips int64           // client side, summed over the attached counters
	Commands   int64
	ByName     map[string]int64   // client-side commands by name
	Redis      map[string]CmdStat // INFO commandstats over the window
	// Host is the whole machine's CPU over the window (/proc/stat);
	// Foreign is its busy time not spent by this process or Redis.
	HostBusy, HostIdle, HostSteal time.Duration
}

// Foreign is CPU the machine spent on other processes during the window.
func (w Window) Foreign() time.Duration { return max(w.HostBusy-w.CPU-w.RedisCPU, 0) }

// redisTarget is what a measurement window needs of the Redis it
// measures: the one Server, or a local Cluster's masters. Stats and CPU
// are summed over the processes; CPUs has them one by one.
type redisTarget interface {
	ResetStats(ctx context.Context) error
	CommandStats(ctx context.Context) (map[string]CmdStat, error)
	CPUs() []time.Duration
}

type window struct {
	srv      redisTarget
	counters []*Counter
	t0       time.Time
	m0       runtime.MemStats
	cpu0     time.Duration
	rcpu0    []time.Duration
	c0       []counts
	h0       hostCPU
}

// beginWindow resets Redis's command stats and snapshots the counters.
func beginWindow(ctx context.Context, srv redisTarget, counters ...*Counter) *window {
	w := &window{srv: srv, counters: counters}
	srv.ResetStats(ctx)
	for _, c := range counters {
		w.c0 = append(w.c0, c.snapshot())
	}
	runtime.ReadMemStats(&w.m0)
	w.cpu0, w.rcpu0, w.h0 = selfCPU(), srv.CPUs(), readHostCPU()
	w.t0 = time.Now()
	return w
}

// stop takes the end snapshot of everything but Redis's command stats.
func (w *window) stop() Window {
	var r Window
	r.Wall = time.Since(w.t0)
	r.CPU = selfCPU() - w.cpu0
	for i, c := range w.srv.CPUs() {
		d := c - w.rcpu0[i]
		r.RedisCPUs = append(r.RedisCPUs, d)
		r.RedisCPU += d
	}
	h := readHostCPU()
	r.HostBusy, r.HostIdle, r.HostSteal = h.busy-w.h0.busy, h.idle-w.h0.idle, h.steal-w.h0.steal
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	r.Mallocs, r.Bytes = m1.Mallocs-w.m0.Mallocs, m1.TotalAlloc-w.m0.TotalAlloc
	r.ByName = map[string]int64{}
	for i, c := range w.counters {
		s := c.snapshot()
		r.RoundTrips += s.roundTrips - w.c0[i].roundTrips
		r.Commands += s.commands - w.c0[i].commands
		for k, v := range s.byName {
			if d := v - w.c0[i].byName[k]; d > 0 {
				r.ByName[k] += d
			}
		}
	}
	return r
}

// redisStats reads Redis's command stats into r (after stop, once the
// load has ended).
func (w *window) redisStats(ctx context.Context, r *Window) {
	r.Redis, _ = w.srv.CommandStats(ctx)
}

// end is stop followed by redisStats.
func (w *window) end(ctx context.Context) Window {
	r := w.stop()
	w.redisStats(ctx, &r)
	return r
}

// opFunc is one operation of a closed loop: it reports whether it
// succeeded (a lock was taken and released), failed (the lock was busy) or
// erred.
type opFunc func(ctx context.Context) (ok bool, err error)

// LoopResult is the outcome of one closed-loop run.
type LoopResult struct {
	OK, Fail, Errs int64
	FirstErr       error
	Lat            []time.Duration // of successful ops, sorted (a sample)
	W              Window
}

// Rate is successful ops per second.
func (r LoopResult) Rate() float64 { return float64(r.OK) / r.W.Wall.Seconds() }

// FailRate is failed ops per second.
func (r LoopResult) FailRate() float64 { return float64(r.Fail) / r.W.Wall.Seconds() }

// P returns a latency percentile.
func (r LoopResult) P(p float64) time.Duration { return percentile(r.Lat, p) }

// PerOK divides a count by the successful ops.
func (r LoopResult) PerOK(v float64) float64 { return v / float64(max(r.OK, 1)) }

// runLoop runs g goroutines, each calling its op in a closed loop: warm
// first, then a measured window of dur. Latencies are kept in a
// preallocated ring per goroutine so that measuring does not allocate.
func runLoop(ctx context.Context, srv *Server, counters []*Counter, g int, warm, dur time.Duration, newOp func(g int) opFunc) LoopResult {
	const (
		warming = iota
		measuring
		stopping
	)
	var phase atomic.Int32
	type state struct {
		ok, fail, errs int64
		first          error
		lat            []time.Duration
		n              int
		_              [64]byte
	}
	capPer := max(1024, (1<<18)/g)
	states := make([]*state, g)
	ops := make([]opFunc, g)
	for i := range g {
		states[i] = &state{lat: make([]time.Duration, capPer)}
		ops[i] = newOp(i)
	}
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, op := states[i], ops[i]
			for {
				if phase.Load() == stopping {
					return
				}
				t := time.Now()
				ok, err := op(ctx)
				el := time.Since(t)
				// An op counts in the window it completes in: ops in flight
				// at the start then balance those in flight at the end, so
				// per-op figures (round trips, CPU) are not biased.
				if phase.Load() != measuring {
					if err != nil {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				switch {
				case err != nil:
					st.errs++
					if st.first == nil {
						st.first = err
					}
					time.Sleep(time.Millisecond)
				case ok:
					st.ok++
					st.lat[st.n%capPer] = el
					st.n++
				default:
					st.fail++
				}
			}
		}()
	}
	time.Sleep(warm)
	w := beginWindow(ctx, srv, counters...)
	phase.Store(measuring)
	time.Sleep(dur)
	win := w.stop()
	phase.Store(stopping)
	wg.Wait()
	w.redisStats(ctx, &win)
	res := LoopResult{W: win}
	for _, st := range states {
		res.OK += st.ok
		res.Fail += st.fail
		res.Errs += st.errs
		if res.FirstErr == nil {
			res.FirstErr = st.first
		}
		res.Lat = append(res.Lat, st.lat[:min(st.n, capPer)]...)
	}
	slices.Sort(res.Lat)
	return res
}
