// Package bench measures syncd against the Redis limit and its peers
// (bsm/redislock, go-redsync, a hand-rolled lock, asynq) and writes
// BENCHMARKS.md. cmd/benchall is its command; see README.md.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/syncd/syncd/engine"
)

// Sections, in run order.
var Sections = []string{"redis", "locks", "batch", "e2e", "cluster", "settle", "scale", "fairness", "scripts", "profile", "reconcile", "api"}

// Options configure a run.
type Options struct {
	// Quick is a smoke run of about a minute: one repetition, short
	// windows, small pools, no 1M schedule.
	Quick bool
	// Reps overrides the repetitions (default 3, quick 1).
	Reps int
	// Only limits the run to these sections (nil: all).
	Only map[string]bool
	// ProfDir keeps the pprof files there; empty: a temporary directory,
	// removed at the end.
	ProfDir string
	// RepoDir is the syncd checkout, for git describe.
	RepoDir string
	// Command is the command line shown in the report.
	Command string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// settings are the sizes and windows of a run.
type settings struct {
	reps                              int
	limitScale                        float64
	lockWarm, lockDur                 time.Duration
	batchPerShard                     int
	batchWarm, batchDur               time.Duration
	e2eWarm, e2eDur                   time.Duration
	enginePool, settlePool, asynqPool int
	settleItems                       int
	settleWarm, settleDur             time.Duration
	scaleSizes                        []int
	scaleReps                         int
	scaleDur                          time.Duration
	fairScenarios                     []FairScenario
	fairReps                          int
	profDur                           time.Duration
	allocCycles                       int
	scriptCalls                       int
	reconcileIDs                      int
	apiItems, apiCalls                int
}

func (o Options) settings() settings {
	s := settings{
		reps: 3, limitScale: 0.6,
		lockWarm: 200 * time.Millisecond, lockDur: 900 * time.Millisecond,
		batchPerShard: 4096, batchWarm: 200 * time.Millisecond, batchDur: 600 * time.Millisecond,
		e2eWarm: 500 * time.Millisecond, e2eDur: time.Second,
		enginePool: 150_000, settlePool: 150_000, asynqPool: 25_000,
		settleItems: 4_000, settleWarm: 1500 * time.Millisecond, settleDur: 5 * time.Second,
		scaleSizes: []int{10_000, 100_000, 1_000_000}, scaleReps: 3, scaleDur: time.Second,
		fairScenarios: FairScenarios, fairReps: 3,
		profDur: 2 * time.Second, allocCycles: 3000, scriptCalls: 5000,
		reconcileIDs: 1_000_000,
		apiItems:     1_000_000, apiCalls: 200,
	}
	if o.Quick {
		s = settings{
			reps: 1, limitScale: 0.2,
			lockWarm: 100 * time.Millisecond, lockDur: 400 * time.Millisecond,
			batchPerShard: 1024, batchWarm: 100 * time.Millisecond, batchDur: 300 * time.Millisecond,
			e2eWarm: 300 * time.Millisecond, e2eDur: 700 * time.Millisecond,
			enginePool: 50_000, settlePool: 50_000, asynqPool: 10_000,
			settleItems: 1_000, settleWarm: 1500 * time.Millisecond, settleDur: 3 * time.Second,
			scaleSizes: []int{10_000, 100_000}, scaleReps: 1, scaleDur: 300 * time.Millisecond,
			fairScenarios: FairScenarios[:1], fairReps: 1,
			profDur: time.Second, allocCycles: 1000, scriptCalls: 1000,
			reconcileIDs: 100_000,
			apiItems:     100_000, apiCalls: 50,
		}
	}
	if o.Reps > 0 {
		s.reps, s.scaleReps, s.fairReps = o.Reps, o.Reps, o.Reps
	}
	return s
}

// Results are everything one run measured.
type Results struct {
	Env      Env
	Command  string
	Quick    bool
	Started  time.Time
	Took     time.Duration
	Settings settings
	Limits   *LimitResults
	Locks    *LockResults
	Batches  *BatchResults
	E2E      *E2EResults
	Cluster  *ClusterResults
	Settle   *SettleResults
	Scale    *ScaleResults
	Fairness *FairResults
	Scripts  []ScriptCost
	// ScriptSrc is the product's Lua as it was when the run started, by
	// file name, for the findings to say what the scripts do.
	ScriptSrc map[string]string
	Profiles  *Profiles
	Reconcile *ReconcileResults
	API       *APIResults
}

// Profiles are the profiling runs.
type Profiles struct {
	Dir                 string
	Kept                bool
	CPUOurs, CPUHand    *CPUProfile
	CPUEngine           *CPUProfile
	AllocOurs, AllocMgr *AllocProfile
	EngineRun           E2ERun
}

// Run runs the selected sections against a redis-server it starts and
// stops itself.
func Run(ctx context.Context, o Options) (*Results, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	want := func(s string) bool { return o.Only == nil || o.Only[s] }
	set := o.settings()
	res := &Results{Command: o.Command, Quick: o.Quick, Started: time.Now(), Settings: set}
	srv, err := StartServer(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	o.Logf("redis-server on %s", srv.Addr())
	res.Env = ReadEnv(ctx, srv, o.RepoDir)
	setScriptNames()
	res.ScriptSrc = map[string]string{}
	if files, err := filepath.Glob(filepath.Join(o.RepoDir, "store", "scripts", "*.lua")); err == nil {
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				res.ScriptSrc[filepath.Base(f)] = string(b)
			}
		}
	}
	logf := o.Logf
	// Each section starts with what the earlier ones left in this
	// process: goroutines still running and the live heap take CPU and
	// GC time from every window after them.
	section := func(name string) bool {
		if !want(name) {
			return false
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		logf("section %s: %d goroutines, %.0f MB heap in use", name, runtime.NumGoroutine(), float64(ms.HeapInuse)/(1<<20))
		return true
	}

	if section("redis") {
		if res.Limits, err = RunLimits(ctx, srv, LimitCases(set.limitScale), set.reps, logf); err != nil {
			return nil, err
		}
	}
	if section("locks") {
		if res.Locks, err = RunLocks(ctx, srv, set.reps, set.lockWarm, set.lockDur, logf); err != nil {
			return nil, err
		}
	}
	if section("batch") {
		if res.Batches, err = RunBatches(ctx, srv, set.reps, set.batchPerShard, set.batchWarm, set.batchDur, logf); err != nil {
			return nil, err
		}
	}
	if section("e2e") {
		if res.E2E, err = RunE2E(ctx, srv, set.reps, set.enginePool, set.settlePool, set.asynqPool, set.e2eWarm, set.e2eDur, logf); err != nil {
			return nil, err
		}
	}
	if section("cluster") {
		if res.Cluster, err = RunCluster(ctx, srv, set.reps, set.enginePool, set.e2eWarm, set.e2eDur, logf); err != nil {
			return nil, err
		}
	}
	if section("settle") {
		if res.Settle, err = RunSettle(ctx, srv, set.reps, set.settleItems, set.settleWarm, set.settleDur, logf); err != nil {
			return nil, err
		}
	}
	if section("scale") {
		// A redis-server of its own, as a deployment's Redis runs only
		// syncd: after the sections before it, the same claim rounds ran
		// with a p50 about 30% higher (0.90-1.02 ms at 1M against
		// 0.70-0.81 ms on a fresh server, minutes apart on one machine).
		ssrv, err := StartServer(ctx)
		if err != nil {
			return nil, err
		}
		res.Scale, err = RunScale(ctx, ssrv, set.scaleSizes, set.scaleReps, set.scaleDur, logf)
		ssrv.Close()
		if err != nil {
			return nil, err
		}
	}
	if section("fairness") {
		if res.Fairness, err = RunFairness(ctx, srv, set.fairScenarios, set.fairReps, logf); err != nil {
			return nil, err
		}
	}
	if section("scripts") {
		if res.Scripts, err = RunScriptCosts(ctx, srv, o.RepoDir, set.scriptCalls, set.reps, logf); err != nil {
			return nil, err
		}
	}
	if section("profile") {
		if res.Profiles, err = runProfiles(ctx, srv, o, set); err != nil {
			return nil, err
		}
	}
	if section("reconcile") {
		if res.Reconcile, err = RunReconcile(ctx, srv, set.reconcileIDs, set.reps, logf); err != nil {
			return nil, err
		}
	}
	if section("api") {
		if res.API, err = RunAPI(ctx, srv, set.apiItems, set.apiCalls, logf); err != nil {
			return nil, err
		}
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

func runProfiles(ctx context.Context, srv *Server, o Options, set settings) (*Profiles, error) {
	p := &Profiles{Dir: o.ProfDir, Kept: o.ProfDir != ""}
	if p.Dir == "" {
		d, err := os.MkdirTemp("", "benchall-prof-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		p.Dir = d
	} else if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, err
	}
	sc := LockScenarios[2] // 64 goroutines, distinct keys
	var err error
	profLock := func(kind, file string) (*CPUProfile, error) {
		var runErr error
		prof, err := ProfileCPU(filepath.Join(p.Dir, file), func() int64 {
			r, err := runLock(ctx, srv, lockKindByName(kind), sc, "prof"+kind, set.lockWarm, set.profDur)
			runErr = err
			return r.OK
		})
		if runErr != nil {
			return nil, runErr
		}
		return prof, err
	}
	if p.CPUOurs, err = profLock("ours", "cpu-ours-64g.pb.gz"); err != nil {
		return nil, err
	}
	o.Logf("profile: CPU of the syncd Locker, 64 goroutines: %s", p.CPUOurs.Path)
	if p.CPUHand, err = profLock("handrolled", "cpu-handrolled-64g.pb.gz"); err != nil {
		return nil, err
	}
	var runErr error
	p.CPUEngine, err = ProfileCPU(filepath.Join(p.Dir, "cpu-engine-64w.pb.gz"), func() int64 {
		r, err := runEngine(ctx, srv, 64, 0, engine.TargetConfig{}, set.enginePool, set.e2eWarm, set.profDur)
		runErr = err
		p.EngineRun = r
		return r.Done
	})
	if runErr != nil {
		return nil, runErr
	}
	if err != nil {
		return nil, err
	}
	o.Logf("profile: CPU of the engine, 64 workers: %s", p.CPUEngine.Path)
	allocRun := func(kind string) (*AllocProfile, error) {
		impl, err := lockKindByName(kind).setup(ctx, srv.Addr(), "alloc"+kind, []string{"a"}, 1)
		if err != nil {
			return nil, err
		}
		defer impl.Close()
		cycle := impl.Worker(0)
		for range 200 { // warm the pool and caches
			cycle(ctx, "a")
		}
		var cycErr error
		path := ""
		if p.Kept {
			path = filepath.Join(p.Dir, "allocs-"+kind+"-1g.pb.gz")
		}
		prof, err := ProfileAllocs(path, func() int64 {
			n := int64(0)
			for range set.allocCycles {
				ok, err := cycle(ctx, "a")
				if err != nil && cycErr == nil {
					cycErr = err
				}
				if ok {
					n++
				}
			}
			return n
		})
		if cycErr != nil {
			return nil, cycErr
		}
		return prof, err
	}
	if p.AllocOurs, err = allocRun("ours"); err != nil {
		return nil, err
	}
	if p.AllocMgr, err = allocRun("engine"); err != nil {
		return nil, err
	}
	srv.FlushAll(ctx)
	return p, nil
}

// ParseOnly turns "a,b" into a section set, checking the names.
func ParseOnly(s string) (map[string]bool, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]bool{}
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		ok := false
		for _, s := range Sections {
			ok = ok || s == x
		}
		if !ok {
			return nil, fmt.Errorf("unknown section %q (have %s)", x, strings.Join(Sections, ", "))
		}
		m[x] = true
	}
	return m, nil
}
