package bench

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/syncd/syncd/store"
)

type md struct{ strings.Builder }

// p writes a paragraph line. The format goes to Fprintf as it is, so
// that go vet checks every call's verbs against its arguments.
func (b *md) p(format string, args ...any) {
	fmt.Fprintf(&b.Builder, format, args...)
	b.WriteString("\n")
}
func (b *md) nl() { b.WriteString("\n") }

func (b *md) table(head []string, rows [][]string) {
	b.p("| %s |", strings.Join(head, " | "))
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
		if i > 0 {
			sep[i] = "---:"
		}
	}
	b.p("| %s |", strings.Join(sep, " | "))
	for _, r := range rows {
		b.p("| %s |", strings.Join(r, " | "))
	}
	b.nl()
}

func metMissed(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

// Target is one goal the report checks.
type Target struct {
	What     string
	Measured string
	Met      bool
	Known    bool // false when the section did not run
}

// Issue 13's lock targets at 64 goroutines, for the auto-pipelined Locker.
const (
	lockGoalRedislock = 2.0
	lockGoalRedsync   = 2.5
)

// Targets evaluates the goals of issue 5.
func (r *Results) Targets() []Target {
	var ts []Target
	sc := LockScenarios[2].Name
	if l := r.Locks; l != nil {
		// Issue 13's targets, for the auto-pipelined Locker; the
		// unpipelined one is shown beside it.
		for _, t := range []struct {
			peer, sc string
			min      float64
			what     string
		}{
			{"redislock", sc, lockGoalRedislock, fmt.Sprintf("standalone lock, 64 goroutines: ≥ %.1fx bsm/redislock", lockGoalRedislock)},
			{"redsync", sc, lockGoalRedsync, fmt.Sprintf("standalone lock, 64 goroutines: ≥ %.1fx go-redsync", lockGoalRedsync)},
			{"redislock", LockScenarios[0].Name, 1.0, "standalone lock, 1 goroutine: no slower than bsm/redislock (≥ 1.0x)"},
		} {
			s := l.ratio("ours-ap", t.peer, t.sc)
			s2 := l.ratio("ours", t.peer, t.sc)
			ts = append(ts, Target{What: t.what, Known: true, Met: s.Med >= t.min,
				Measured: fmt.Sprintf("%s auto-pipelined (shared Locker); %s unpipelined; %s vs %s cycles/s",
					ratioSpread(s), ratioSpread(s2), fmtRate(l.spread("ours-ap", t.sc, LoopResult.Rate).Med),
					fmtRate(l.spread(t.peer, t.sc, LoopResult.Rate).Med))})
		}
	} else {
		ts = append(ts, Target{What: "standalone lock targets (section not run)"})
	}
	if e := r.E2E; e != nil {
		var parts []string
		all := true
		for _, w := range E2EWorkers {
			s := e.ratio(w)
			parts = append(parts, fmt.Sprintf("%d workers %s (goal %gx)", w, ratioSpread(s), E2EGoal(w)))
			all = all && s.Med >= E2EGoal(w)
		}
		ts = append(ts, Target{What: "end to end, no-op sink, settle 0, vs asynq at the same concurrency: ≥ 2x at 1 worker, ≥ 4x at 8 and 16, ≥ 4.5x at 64", Known: true, Met: all,
			Measured: strings.Join(parts, "; ")})
	} else {
		ts = append(ts, Target{What: "end-to-end target (section not run)"})
	}
	if e := r.E2E; e != nil && len(e.TargetRows) > 0 {
		c, a := e.targetRatio("limits", "breaker-off"), e.targetRatio("default", "breaker-off")
		fb, _ := e.targetFigures("breaker-off")
		fc, _ := e.targetFigures("limits")
		ts = append(ts, Target{What: fmt.Sprintf("target limiter and breaker, %d workers, limits far above the fleet's rate: (c) ≥ %.2fx (b), the breaker off", E2ETargetWorkers, TargetGoal),
			Known: true, Met: c.Med >= TargetGoal,
			Measured: fmt.Sprintf("(c)/(b) %s, %s vs %s items/s; the default (a)/(b) %s", ratioSpread(c), fmtRate(fc.rate), fmtRate(fb.rate), ratioSpread(a))})
	}
	if s := r.Scale; s != nil && len(s.Runs[1_000_000]) > 0 {
		runs := s.Runs[1_000_000]
		mem := spreadOf(mapRuns(builds(runs), func(x ScaleRun) float64 { return float64(x.MemSynced) / float64(x.Items) }))
		memAdd := spreadOf(mapRuns(builds(runs), func(x ScaleRun) float64 { return float64(x.MemAdded) / float64(x.Items) }))
		ts = append(ts, Target{What: "≤ 200 bytes of Redis memory per scheduled item at 1M", Known: true, Met: mem.Med <= 200,
			Measured: fmt.Sprintf("%s B/item once every item has synced (due index + state hash); %s B/item right after Add (due index only)",
				numSpread(mem, "%.0f"), numSpread(memAdd, "%.0f"))})
		p99 := spreadOf(mapRuns(runs, func(x ScaleRun) float64 { return ms(percentile(x.Round1, 99)) }))
		ts = append(ts, Target{What: "claim round (pick claim of 32 + release) p99 < 2 ms at 1M", Known: true, Met: p99.Med < 2,
			Measured: msSpread(p99) + " ms"})
	} else {
		ts = append(ts, Target{What: "1M-item targets (not run: -quick or -only)"})
	}
	ts = append(ts, r.settleTarget(), r.reconcileTarget(), r.apiTarget())
	return ts
}

// ReconcileGoal is the most one 1M reconcile (add all; 1% changed) may
// take, in seconds: "1M IDs must reconcile in seconds, not minutes".
const ReconcileGoal = 10.0

func (r *Results) reconcileTarget() Target {
	what := fmt.Sprintf("1M reconcile (add all, and 1%% changed) in seconds: < %.0f s each", ReconcileGoal)
	rc := r.Reconcile
	if rc == nil {
		return Target{What: what + " (section not run)"}
	}
	add, chg := rc.spread(RecAddAll, recSeconds), rc.spread(RecChanged, recSeconds)
	m := fmt.Sprintf("add all %s s, 1%% changed %s s (no change: %s s)", numSpread(add, "%.2f"), numSpread(chg, "%.2f"),
		numSpread(rc.spread(RecNoop, recSeconds), "%.2f"))
	if rc.N < 1_000_000 {
		return Target{What: what + " (not run at 1M: -quick)", Measured: "at " + humanCount(rc.N) + ": " + m}
	}
	return Target{What: what, Known: true, Met: add.Med < ReconcileGoal && chg.Med < ReconcileGoal, Measured: m}
}

func recSeconds(x ReconcileRun) float64 { return x.W.Wall.Seconds() }

// spread summarises f over the repetitions of a phase.
func (rc *ReconcileResults) spread(phase string, f func(ReconcileRun) float64) Spread {
	return spreadOf(mapRuns(rc.Runs[phase], f))
}

// builds keeps the runs that measured memory (one per build).
func builds(runs []ScaleRun) []ScaleRun {
	var out []ScaleRun
	for _, x := range runs {
		if x.Rebuilt {
			out = append(out, x)
		}
	}
	return out
}

func mapRuns[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// ratio is syncd (settle 0) over asynq at w workers, per repetition.
func (e *E2EResults) ratio(w int) Spread {
	a, b := e.row("syncd", w, 0), e.row("asynq", w, 0)
	if a == nil || b == nil {
		return spreadOf(nil)
	}
	var vs []float64
	for i := range min(len(a.Runs), len(b.Runs)) {
		vs = append(vs, a.Runs[i].Rate()/b.Runs[i].Rate())
	}
	return spreadOf(vs)
}

// Report renders BENCHMARKS.md.
func Report(r *Results) string {
	var b md
	set := r.Settings
	b.p("# Benchmarks")
	b.nl()
	b.p("Generated by `benchall` on %s in %v. Do not edit by hand: rerun", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second))
	b.nl()
	b.p("    %s", r.Command)
	b.nl()
	if r.Quick {
		b.p("> **Quick smoke run** (`-quick`): one repetition, short windows, no 1M schedule. Use the full run for numbers.")
		b.nl()
	}
	b.p("Each figure is the median of %d runs, with the range (min–max) in brackets. Ratios are taken within a repetition and then summarised: the lock implementations are measured in %d interleaved short windows each per repetition (the order rotates every window), the other comparisons run back to back, the end-to-end rows in reverse order every other repetition (ABBA), so that drift over the run falls on syncd and asynq alike. Every run talks to a redis-server that `benchall` started on a free loopback port (no persistence, `maxmemory-policy noeviction`); the benchmark process and Redis share the machine's %d cores, so client CPU and Redis CPU compete, as they would on a small host.", set.reps, LockRounds, r.Env.NumCPU)
	b.nl()

	b.p("## Targets")
	b.nl()
	var rows [][]string
	for _, t := range r.Targets() {
		res := "not measured"
		if t.Known {
			res = metMissed(t.Met)
		}
		rows = append(rows, []string{t.What, t.Measured, res})
	}
	b.table([]string{"target", "measured", "result"}, rows)
	b.p("Why the missed ones miss, with the profiles, is in [What limits the missed targets](#what-limits-the-missed-targets).")
	b.nl()

	headline(&b, r)
	environment(&b, r)
	if r.Limits != nil {
		limits(&b, r.Limits)
	}
	if r.Locks != nil {
		locks(&b, r)
	}
	if r.Batches != nil {
		batches(&b, r.Batches)
	}
	if r.E2E != nil {
		e2e(&b, r.E2E)
	}
	if r.Settle != nil {
		settleSection(&b, r.Settle)
	}
	if r.Cluster != nil {
		clusterSection(&b, r.Cluster, r.Env.NumCPU)
	}
	if r.Scale != nil {
		scale(&b, r.Scale)
		memAlts(&b, r.Scale)
	}
	if r.Fairness != nil {
		fairness(&b, r.Fairness)
	}
	if r.Scripts != nil {
		scriptCosts(&b, r.Scripts)
	}
	if r.Profiles != nil {
		profiles(&b, r)
	}
	if r.Reconcile != nil {
		reconcile(&b, r.Reconcile)
	}
	if r.API != nil {
		apiSection(&b, r.API)
	}
	limitsAnalysis(&b, r)
	return b.String()
}

func headline(b *md, r *Results) {
	b.p("## Headline numbers")
	b.nl()
	if l := r.Limits; l != nil {
		b.p("- Redis limit here: SET %s/s unpipelined, %s/s with `-P 16`; EVALSHA of `return 1` %s/s, %s/s with `-P 16`.",
			fmtRate(l.spread("SET", 1).Med), fmtRate(l.spread("SET", 16).Med),
			fmtRate(l.spread("EVALSHA (return 1)", 1).Med), fmtRate(l.spread("EVALSHA (return 1)", 16).Med))
	}
	if l := r.Locks; l != nil {
		sc := LockScenarios[2].Name
		b.p("- Lock cycles (acquire + release) at 64 goroutines, distinct keys: syncd Locker %s/s, hand-rolled %s/s, bsm/redislock %s/s, go-redsync %s/s; the engine's Claim+Release path %s/s.",
			fmtRate(l.spread("ours", sc, LoopResult.Rate).Med), fmtRate(l.spread("handrolled", sc, LoopResult.Rate).Med),
			fmtRate(l.spread("redislock", sc, LoopResult.Rate).Med), fmtRate(l.spread("redsync", sc, LoopResult.Rate).Med),
			fmtRate(l.spread("engine", sc, LoopResult.Rate).Med))
	}
	if bt := r.Batches; bt != nil {
		for _, row := range bt.Rows {
			if row.Op == "claim" && row.N == 32 {
				b.p("- Batched claims: %s items/s with 32 ids per call (%d goroutines).", fmtRate(spreadOf(mapRuns(row.Runs, BatchRun.Rate)).Med), BatchGoroutines)
			}
			if row.Op == "extend" && row.N == 128 {
				b.p("- Heartbeats: %s leases extended/s with 128 keys per call.", fmtRate(spreadOf(mapRuns(row.Runs, BatchRun.Rate)).Med))
			}
		}
	}
	if e := r.E2E; e != nil {
		var parts []string
		for _, w := range E2EWorkers {
			parts = append(parts, fmt.Sprintf("%d workers %s vs %s", w,
				fmtRate(spreadOf(mapRuns(e.row("syncd", w, 0).Runs, E2ERun.Rate)).Med),
				fmtRate(spreadOf(mapRuns(e.row("asynq", w, 0).Runs, E2ERun.Rate)).Med)))
		}
		b.p("- End to end, no-op sink, items/s, syncd (settle 0) vs asynq: %s.", strings.Join(parts, "; "))
		if len(e.TargetRows) > 0 {
			fa, _ := e.targetFigures("default")
			fb, _ := e.targetFigures("breaker-off")
			fc, _ := e.targetFigures("limits")
			b.p("- The target's limiter and breaker at %d workers, items/s: default %s, breaker off %s, limits far above the fleet's rate %s ((c)/(b) %s).",
				E2ETargetWorkers, fmtRate(fa.rate), fmtRate(fb.rate), fmtRate(fc.rate), ratioSpread(e.targetRatio("limits", "breaker-off")))
		}
	}
	if c := r.Cluster; c != nil {
		clusterHeadline(b, c)
	}
	if s := r.Scale; s != nil {
		for _, n := range s.Sizes {
			runs := s.Runs[n]
			if len(runs) == 0 {
				continue
			}
			b.p("- %s items scheduled: %.0f B of Redis memory per item (after one sync each), claim round p99 %.2f ms.", humanCount(n),
				spreadOf(mapRuns(builds(runs), func(x ScaleRun) float64 { return float64(x.MemSynced) / float64(x.Items) })).Med,
				spreadOf(mapRuns(runs, func(x ScaleRun) float64 { return ms(percentile(x.Round1, 99)) })).Med)
		}
	}
	if rc := r.Reconcile; rc != nil && len(rc.Runs[RecAddAll]) > 0 {
		med := func(ph string, f func(ReconcileRun) float64) float64 { return rc.spread(ph, f).Med }
		b.p("- Reconcile of %s ids (`engine.Reconcile`): add all %.2f s (%s ids/s), 1%% changed %.2f s, no change %.2f s; Redis CPU %.2f / %.2f / %.2f s.",
			humanCount(rc.N), med(RecAddAll, recSeconds), fmtRate(med(RecAddAll, ReconcileRun.Rate)), med(RecChanged, recSeconds), med(RecNoop, recSeconds),
			med(RecAddAll, recRedis), med(RecChanged, recRedis), med(RecNoop, recRedis))
	}
	if f := r.Fairness; f != nil && len(f.Scenarios) > 0 {
		sc := f.Scenarios[0]
		b.p("- Fairness (%s): longest wait past due %s the ideal bound.", sc.Name,
			ratioSpread(spreadOf(mapRuns(f.Runs[sc.Name], FairRun.Ratio))))
	}
	b.nl()
}

func humanCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func environment(b *md, r *Results) {
	e := r.Env
	b.p("## Environment")
	b.nl()
	rows := [][]string{
		{"command", "`" + r.Command + "`"},
		{"date", r.Started.UTC().Format(time.RFC3339)},
		{"machine", fmt.Sprintf("%d CPUs (nproc), %s, %s RAM, Linux %s", e.NumCPU, e.CPUModel, e.MemTotal, e.Kernel)},
		{"Go", fmt.Sprintf("%s %s/%s, GOMAXPROCS %d", e.GoVersion, e.GOOS, e.GOARCH, e.GOMAXPROCS)},
		{"Redis", fmt.Sprintf("redis-server %s (%s), %s", e.RedisVersion, e.RedisMalloc, e.RedisBench)},
		{"syncd", "this checkout (`replace => ../`), " + orDash(e.Commit)},
	}
	for _, l := range e.Libraries {
		f := strings.SplitN(l, " ", 2)
		rows = append(rows, []string{"library", "`" + f[0] + "` " + f[1]})
	}
	b.table([]string{"", ""}, rows)
	s := r.Settings
	b.p("Windows: lock runs %v after %v of warm-up; batch runs %v; end-to-end windows %v after %v; claim-round latency %v per size; %d repetitions of each.",
		s.lockDur, s.lockWarm, s.batchDur, s.e2eDur, s.e2eWarm, s.scaleDur, s.reps)
	b.nl()
	if rows := otherLoad(r); len(rows) > 0 {
		b.p("**The machine is shared.** Other processes on this VM (other people's builds and tests) used CPU during the runs. Each window measured it: the machine's busy time from `/proc/stat` minus this process's, Redis's (and redis-benchmark's). Absolute rates and latencies move with it; ratios between implementations are taken within a repetition, a few seconds apart, to damp it.")
		b.nl()
		b.table([]string{"section", "other processes' CPU, cores (median, min–max over the windows)"}, rows)
	}
}

// otherLoad summarises the foreign CPU per section.
func otherLoad(r *Results) [][]string {
	var rows [][]string
	add := func(name string, vs []float64) {
		if len(vs) > 0 {
			rows = append(rows, []string{name, numSpread(spreadOf(vs), "%.2f")})
		}
	}
	if l := r.Limits; l != nil {
		var vs []float64
		for _, runs := range l.Runs {
			for _, x := range runs {
				vs = append(vs, x.Other)
			}
		}
		add("1. Redis limit", vs)
	}
	if l := r.Locks; l != nil {
		add("2. lock cycles", mapRuns(l.Runs, func(x LockRun) float64 { return cores(x.R.W.Foreign(), x.R.W) }))
	}
	if bt := r.Batches; bt != nil {
		var vs []float64
		for _, row := range bt.Rows {
			vs = append(vs, mapRuns(row.Runs, func(x BatchRun) float64 { return cores(x.W.Foreign(), x.W) })...)
		}
		add("3. batched calls", vs)
	}
	if e := r.E2E; e != nil {
		var vs []float64
		for _, row := range e.Rows {
			vs = append(vs, mapRuns(row.Runs, func(x E2ERun) float64 { return cores(x.W.Foreign(), x.W) })...)
		}
		add("4. end to end", vs)
	}
	if c := r.Cluster; c != nil {
		var vs []float64
		for _, row := range c.Rows {
			vs = append(vs, mapRuns(row.Runs, func(x E2ERun) float64 { return cores(x.W.Foreign(), x.W) })...)
		}
		add("4c. scale-out", vs)
	}
	if sc := r.Scale; sc != nil {
		var vs []float64
		for _, runs := range sc.Runs {
			vs = append(vs, mapRuns(runs, func(x ScaleRun) float64 { return x.Load.Seconds() / x.LoadWall.Seconds() })...)
		}
		add("5. scale (claim-round windows)", vs)
	}
	if f := r.Fairness; f != nil {
		var vs []float64
		for _, runs := range f.Runs {
			vs = append(vs, mapRuns(runs, func(x FairRun) float64 { return x.Other })...)
		}
		add("6. fairness", vs)
	}
	if rc := r.Reconcile; rc != nil {
		var vs []float64
		for _, ph := range RecPhases {
			vs = append(vs, mapRuns(rc.Runs[ph], func(x ReconcileRun) float64 { return cores(x.W.Foreign(), x.W) })...)
		}
		add("9. reconcile", vs)
	}
	return rows
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func (l *LimitResults) spread(name string, p int) Spread {
	return spreadOf(mapRuns(l.Runs[name+" -P "+fmt.Sprint(p)], func(x LimitRun) float64 { return x.RPS }))
}

func limits(b *md, l *LimitResults) {
	b.p("## 1. The Redis limit (redis-benchmark)")
	b.nl()
	b.p("`redis-benchmark -q -c %d`, against the same redis-server as everything else; the script for EVALSHA is `%s`, loaded first.", l.Clients, trivialScript)
	b.nl()
	var rows [][]string
	for _, c := range l.Cases {
		runs := l.Runs[c.key()]
		if len(runs) == 0 {
			continue
		}
		rows = append(rows, []string{c.Name, fmt.Sprint(c.Pipeline), rateSpread(spreadOf(mapRuns(runs, func(x LimitRun) float64 { return x.RPS }))),
			numSpread(spreadOf(mapRuns(runs, func(x LimitRun) float64 { return x.P50ms })), "%.3f"), "`" + runs[0].Args + "`"})
	}
	b.table([]string{"command", "pipeline", "requests/s", "p50 ms", "invocation"}, rows)
	b.p("A lock cycle is at least two round trips (take, then compare-and-delete), so the unpipelined EVALSHA rate halved is a rough ceiling for any two-round-trip lock on this machine; our own client's CPU comes out of the same two cores.")
	b.nl()
}

func locks(b *md, r *Results) {
	l := r.Locks
	b.p("## 2. Lock cycles: acquire + release")
	b.nl()
	b.p("Each goroutine loops: one attempt to take its key (no retry), and if taken, release it; a *cycle* is a successful take + release. TTL 30s for every implementation. Every implementation uses one go-redis v9 client with the default pool (10 per CPU = %d connections).", 10*r.Env.GOMAXPROCS)
	b.nl()
	b.p("- **syncd Locker (one shared, non-reentrant)**: `ownership.NewLocker` over one `store.Store`, `TryLock` + `Lock.Unlock`; one Locker (and one watchdog goroutine) for all goroutines, the way a process uses it. Each lock carries a fence, an owner record and a watchdog lease. On hot keys a shared non-reentrant Locker refuses a name it already holds *locally*, without a round trip.")
	b.p("- **syncd Locker (one per goroutine)**: the same, one Locker (and watchdog) per goroutine, so every attempt goes to Redis like the peers'.")
	b.p("- **syncd Manager Claim+Release (engine path)**: `ownership.Manager.ClaimIDs` of one item + `Manager.Release` with `ownership.OutcomeSynced`, delay 0, Settle 0; items pre-added with `store.Add`, epochs marked first.")
	b.p("- **hand-rolled**: `SET key token NX PX 30000`, then EVALSHA of the classic `if get == token then del`; 16 random bytes of token.")
	b.p("- **fenced floor** (`bench.FloorCycle`, not a product path and not a safe lock): one EVALSHA of TIME + `SET key token..fence NX PX 30000`, the fence being Redis's clock in µs, then the hand-rolled delete. It is the least a lock with a fence from Redis can run, with none of the Locker's other guarantees (fence counter, hold-off after data loss, owner record, unlock receipt), and shows what is left for them in each scenario.")
	b.p("- **bsm/redislock**: `Client.Obtain` (no retry) + `Lock.Release`. **go-redsync**: `redsync.New(goredis.NewPool(client))`, one Mutex per name reused, `WithTries(1)`, `TryLockContext` + `UnlockContext`.")
	b.nl()
	b.p("Allocations and bytes are the process's heap allocations per cycle (`runtime.MemStats` deltas over the window, so they include go-redis and the runtime). Client CPU is this process's user+system time per cycle (getrusage), Redis CPU the server's (/proc, 10 ms ticks); round trips are counted by a go-redis hook.")
	b.nl()
	for _, sc := range LockScenarios {
		b.p("### %s", sc.Name)
		b.nl()
		head := []string{"implementation", "cycles/s", "vs hand-rolled", "p50 ms", "p99 ms", "allocs/cycle", "B/cycle", "client CPU µs/cycle", "Redis CPU µs/cycle", "round trips/cycle"}
		hot := sc.Keys < sc.G
		if hot {
			head = append(head[:3], append([]string{"busy attempts/s"}, head[3:]...)...)
		}
		var rows [][]string
		for _, k := range lockKinds {
			sp := func(f func(LoopResult) float64) Spread { return l.spread(k.name, sc.Name, f) }
			row := []string{k.label, rateSpread(sp(LoopResult.Rate))}
			if k.name == "handrolled" {
				row = append(row, "1")
			} else {
				row = append(row, ratioSpread(l.ratio(k.name, "handrolled", sc.Name)))
			}
			if hot {
				row = append(row, fmtRate(sp(LoopResult.FailRate).Med))
			}
			row = append(row,
				msSpread(sp(func(x LoopResult) float64 { return ms(x.P(50)) })),
				msSpread(sp(func(x LoopResult) float64 { return ms(x.P(99)) })),
				fmt.Sprintf("%.1f", sp(func(x LoopResult) float64 { return x.PerOK(float64(x.W.Mallocs)) }).Med),
				fmt.Sprintf("%.0f", sp(func(x LoopResult) float64 { return x.PerOK(float64(x.W.Bytes)) }).Med),
				fmt.Sprintf("%.1f", sp(func(x LoopResult) float64 { return x.PerOK(us(x.W.CPU)) }).Med),
				fmt.Sprintf("%.1f", sp(func(x LoopResult) float64 { return x.PerOK(us(x.W.RedisCPU)) }).Med),
				fmt.Sprintf("%.2f", sp(func(x LoopResult) float64 { return x.PerOK(float64(x.W.RoundTrips)) }).Med),
			)
			rows = append(rows, row)
		}
		b.table(head, rows)
		if hot {
			b.p("On hot keys, CPU, allocations and round trips per *successful* cycle include the busy attempts in between.")
			b.nl()
		}
	}
	sc := LockScenarios[2].Name
	b.p("### Ratios at 64 goroutines, distinct keys")
	b.nl()
	var rows [][]string
	for _, a := range []string{"ours", "ours-per-g", "engine", "ours-ap", "ours-per-g-ap", "engine-ap"} {
		row := []string{lockKindByName(a).label}
		for _, p := range []string{"handrolled", "redislock", "redsync"} {
			row = append(row, ratioSpread(l.ratio(a, p, sc)))
		}
		rows = append(rows, row)
	}
	b.table([]string{"", "vs hand-rolled", "vs bsm/redislock", "vs go-redsync"}, rows)
	b.p("### Redis commands per cycle at 64 goroutines, distinct keys")
	b.nl()
	b.p("Client side: what crosses the network. Redis side: every command Redis executed per cycle, including those run inside scripts (INFO commandstats counts both; a script's own usec includes its commands'), with µs per call.")
	b.nl()
	rows = nil
	for _, k := range lockKinds {
		runs := l.get(k.name, sc)
		x := runs[len(runs)/2]
		rows = append(rows, []string{k.label, perCycleNames(x.W.ByName, x.OK), perCycleRedis(x.W.Redis, x.OK)})
	}
	b.table([]string{"implementation", "sent per cycle", "executed by Redis per cycle (µs/call)"}, rows)
}

func perCycleNames(m map[string]int64, ops int64) string {
	var cmds, scripts []string
	for _, k := range sortedKeys(m) {
		v := float64(m[k]) / float64(max(ops, 1))
		if v < 0.005 {
			continue
		}
		if strings.HasSuffix(k, ".lua") {
			scripts = append(scripts, fmt.Sprintf("%s %.2f", k, v))
		} else {
			cmds = append(cmds, fmt.Sprintf("%s %.2f", strings.ToUpper(k), v))
		}
	}
	out := strings.Join(cmds, ", ")
	if len(scripts) > 0 {
		out += "; scripts: " + strings.Join(scripts, ", ")
	}
	return out
}

// perScript is how many calls of a product script were sent per op.
func perScript(w Window, ops int64, script string) float64 {
	return float64(w.ByName[script]) / float64(max(ops, 1))
}

func perCycleRedis(m map[string]CmdStat, ops int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		s := m[k]
		if k == "config|resetstat" || k == "info" || k == "config" {
			continue
		}
		v := float64(s.Calls) / float64(max(ops, 1))
		if v >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f (%.2f)", strings.ToUpper(k), v, float64(s.Usec)/float64(max(s.Calls, 1))))
		}
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func batches(b *md, bt *BatchResults) {
	b.p("## 3. Batched claims and heartbeats")
	b.nl()
	b.p("`store.ClaimIDs` with N ids of one shard (one script call; per-item record templates, as the engine sends), every claim a real one: %d items per shard over 16 shards are claimed until the pool or the %v window runs out, then handed back untimed and claimed again. `store.Release` as synced (what the engine's worker does) with N ids of one shard, on a pool claimed untimed in between. `store.Extend` with N record keys of one shard (one script in one pipeline), on claimed items, for %v. %d goroutines at once, each on its own shards. Redis CPU comes from /proc, so unlike commandstats it does not count time Redis spent descheduled.", bt.PerShard, bt.Dur, bt.Dur, BatchGoroutines)
	b.nl()
	var rows [][]string
	for _, row := range bt.Rows {
		rows = append(rows, []string{row.Label,
			rateSpread(spreadOf(mapRuns(row.Runs, BatchRun.Rate))),
			rateSpread(spreadOf(mapRuns(row.Runs, func(x BatchRun) float64 { return float64(x.Calls) / x.W.Wall.Seconds() }))),
			msSpread(spreadOf(mapRuns(row.Runs, func(x BatchRun) float64 { return ms(percentile(x.Lat, 50)) }))),
			msSpread(spreadOf(mapRuns(row.Runs, func(x BatchRun) float64 { return ms(percentile(x.Lat, 99)) }))),
			fmt.Sprintf("%.2f", spreadOf(mapRuns(row.Runs, func(x BatchRun) float64 { return us(x.W.RedisCPU) / float64(max(x.Items, 1)) })).Med),
			fmt.Sprintf("%.2f", spreadOf(mapRuns(row.Runs, func(x BatchRun) float64 { return us(x.W.CPU) / float64(max(x.Items, 1)) })).Med),
		})
	}
	b.table([]string{"call", "items/s", "calls/s", "p50 ms/call", "p99 ms/call", "Redis CPU µs/item", "client CPU µs/item"}, rows)
}

func e2e(b *md, e *E2EResults) {
	b.p("## 4. End to end: items synced per second")
	b.nl()
	b.p("syncd: `engine.New` + `Start` on a fresh deployment with the items pre-added (all due), a no-op `sinks.Func`, interval 1h (each item syncs once), batch 32, TTL 30s; `Metrics().SyncsOK` counted over a %v window after %v of warm-up. asynq: the same number of no-op tasks enqueued first, then a server with `Concurrency` = workers; handler calls counted over the same window. \"exhausted\" marks a run whose work ran out inside the window (its rate is then a lower bound).", e.Dur, e.Warm)
	b.nl()
	var rows [][]string
	for _, w := range E2EWorkers {
		s0, s50, a := e.row("syncd", w, 0), e.row("syncd", w, 50*time.Millisecond), e.row("asynq", w, 0)
		rt := func(row *E2ERow) string {
			return fmt.Sprintf("%.2f", spreadOf(mapRuns(row.Runs, func(x E2ERun) float64 { return float64(x.W.RoundTrips) / float64(max(x.Done, 1)) })).Med)
		}
		rc := func(row *E2ERow) string {
			return fmt.Sprintf("%.1f / %.1f", spreadOf(mapRuns(row.Runs, func(x E2ERun) float64 { return us(x.W.CPU) / float64(max(x.Done, 1)) })).Med,
				spreadOf(mapRuns(row.Runs, func(x E2ERun) float64 { return us(x.W.RedisCPU) / float64(max(x.Done, 1)) })).Med)
		}
		rows = append(rows, []string{fmt.Sprint(w),
			rateSpread(spreadOf(mapRuns(s0.Runs, E2ERun.Rate))) + exhausted(s0),
			rateSpread(spreadOf(mapRuns(s50.Runs, E2ERun.Rate))) + exhausted(s50),
			rateSpread(spreadOf(mapRuns(a.Runs, E2ERun.Rate))) + exhausted(a),
			ratioSpread(e.ratio(w)),
			rt(s0) + " / " + rt(a), rc(s0) + " · " + rc(a),
		})
	}
	b.table([]string{"workers", "syncd, settle 0", "syncd, settle 50ms", "asynq", "syncd (settle 0) / asynq", "round trips/item syncd / asynq", "client / Redis CPU µs/item: syncd · asynq"}, rows)
	rows = nil
	for _, w := range E2EWorkers {
		s0, a := e.row("syncd", w, 0), e.row("asynq", w, 0)
		use := func(row *E2ERow) string {
			f := func(g func(E2ERun) float64) float64 { return spreadOf(mapRuns(row.Runs, g)).Med }
			return fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", f(func(x E2ERun) float64 { return cores(x.W.CPU, x.W) }),
				f(func(x E2ERun) float64 { return cores(x.W.RedisCPU, x.W) }), f(func(x E2ERun) float64 { return cores(x.W.Foreign(), x.W) }),
				f(func(x E2ERun) float64 { return cores(x.W.HostIdle, x.W) }))
		}
		rounds := spreadOf(mapRuns(s0.Runs, E2ERun.Rounds)).Med
		per := spreadOf(mapRuns(s0.Runs, func(x E2ERun) float64 { return float64(x.Done) / (x.Rounds() * x.W.Wall.Seconds()) })).Med
		rows = append(rows, []string{fmt.Sprint(w), fmt.Sprintf("%.0f", rounds), fmt.Sprintf("%.1f", per), fmt.Sprintf("%.2f", 1000/rounds), use(s0), use(a)})
	}
	b.p("Where the time goes (medians). A claim round is one pick claim (`Manager.ClaimPick`: `claim_pick.lua` finds a shard's longest-waiting due items itself and claims them) from one of the engine's two claim loops (`Engine.schedule`); rounds are counted from the `claim_pick.lua` calls. The loops read every shard's head with `Store.Oldest` (16 ZRANGEs, one pipeline) at most every 20 ms and learn each claimed shard's new head from the claim's reply. Cores: this process / Redis / other processes / idle, over the window.")
	b.nl()
	b.table([]string{"workers", "syncd scheduler rounds/s", "items per round", "ms per round", "cores, syncd settle 0", "cores, asynq"}, rows)
	b.p("With settle 50ms a claim round waits 50 ms before its confirm read; see the analysis for what that does to throughput.")
	b.nl()
	e2eTarget(b, e)
}

// targetFigures are one TargetVariant's medians.
type targetFigures struct {
	rate, roundTrips, admit, zrem, state, rounds, perRound, cpu, rcpu, idle float64
}

func (e *E2EResults) targetFigures(name string) (targetFigures, bool) {
	row := e.targetRow(name)
	if row == nil || len(row.Runs) == 0 {
		return targetFigures{}, false
	}
	med := func(f func(E2ERun) float64) float64 { return spreadOf(mapRuns(row.Runs, f)).Med }
	item := func(f func(E2ERun) float64) float64 {
		return med(func(x E2ERun) float64 { return f(x) / float64(max(x.Done, 1)) })
	}
	return targetFigures{
		rate:       med(E2ERun.Rate),
		roundTrips: item(func(x E2ERun) float64 { return float64(x.W.RoundTrips) }),
		admit:      item(func(x E2ERun) float64 { return float64(x.W.ByName["target_admit.lua"]) }),
		zrem:       item(func(x E2ERun) float64 { return float64(x.W.ByName["zrem"]) }),
		state:      med(func(x E2ERun) float64 { return float64(x.W.ByName["target_state.lua"]) / x.W.Wall.Seconds() }),
		rounds:     med(E2ERun.Rounds),
		perRound:   med(func(x E2ERun) float64 { return float64(x.Done) / max(x.Rounds()*x.W.Wall.Seconds(), 1) }),
		cpu:        item(func(x E2ERun) float64 { return us(x.W.CPU) }),
		rcpu:       item(func(x E2ERun) float64 { return us(x.W.RedisCPU) }),
		idle:       med(func(x E2ERun) float64 { return cores(x.W.HostIdle, x.W) }),
	}, true
}

// e2eTarget is the table of the target's limiter and breaker.
func e2eTarget(b *md, e *E2EResults) {
	if len(e.TargetRows) == 0 {
		return
	}
	b.p("### The target's limiter and breaker at %d workers", E2ETargetWorkers)
	b.nl()
	b.p("The same engine run (no-op sink, settle 0, %d workers) with three `engine.Config.Target` settings, run back to back in each repetition (the order rotates): (a) the default, breaker on and no limits, whose only cost is each engine's background read of the breaker (`target_state.lua`, every 200 ms); (b) the breaker off (`Breaker.Disabled`), which is meant to send nothing about the target to Redis; (c) a rate of 1M/s, burst 1M and max_in_flight 100k, far above what the fleet reaches: each sync holds a permit and each start a rate token; a process keeps the permits of ended syncs and takes tokens up to 50 ms ahead, so a claim round asks Redis (`target_admit.lua`) only when what it holds does not cover it, and gives idle permits back (ZREM) once per 200 ms. Ratios are taken within a repetition. Goal: (c) ≥ %.2fx (b).", E2ETargetWorkers, TargetGoal)
	b.nl()
	var rows [][]string
	for _, v := range E2ETargetVariants {
		row := e.targetRow(v.Name)
		f, ok := e.targetFigures(v.Name)
		if !ok {
			continue
		}
		ratio := "1"
		if v.Name != "breaker-off" {
			ratio = ratioSpread(e.targetRatio(v.Name, "breaker-off"))
		}
		rows = append(rows, []string{v.Label, rateSpread(spreadOf(mapRuns(row.Runs, E2ERun.Rate))) + exhausted(row), ratio,
			fmt.Sprintf("%.2f", f.roundTrips), fmt.Sprintf("%.3f / %.2f", f.admit, f.zrem), fmt.Sprintf("%.1f", f.state),
			fmt.Sprintf("%.0f / %.1f", f.rounds, f.perRound), fmt.Sprintf("%.1f / %.1f", f.cpu, f.rcpu), fmt.Sprintf("%.2f", f.idle)})
	}
	b.table([]string{"target config", "items/s", "/ (b)", "round trips/item", "target_admit.lua / ZREM per item", "target_state.lua calls/s",
		"claim rounds/s / items per round", "client / Redis CPU µs/item", "cores idle"}, rows)
	for _, v := range E2ETargetVariants {
		if row := e.targetRow(v.Name); row != nil && len(row.Runs) > 0 {
			x := row.Runs[len(row.Runs)/2]
			b.p("- %s, sent per item (one run): %s.", v.Label, perCycleNames(x.W.ByName, x.Done))
		}
	}
	b.nl()
}

func exhausted(r *E2ERow) string {
	for _, x := range r.Runs {
		if x.Exhausted {
			return " (exhausted)"
		}
	}
	return ""
}

func scale(b *md, s *ScaleResults) {
	b.p("## 5. Scale: memory per item and claim-round latency")
	b.nl()
	idLen := 0
	for _, runs := range s.Runs {
		if len(runs) > 0 {
			idLen = runs[0].IDLen
		}
	}
	b.p("On a redis-server of its own (a deployment's Redis runs only syncd; after the sections before, the same rounds ran about 30%% slower at the median), a fresh deployment (16 shards) gets N items with `store.Add` (ids like `item-0000042`, %d bytes); memory is INFO `used_memory` after minus before. \"After Add\" holds only the due index; \"after one sync\" is after every item was claimed and released as synced once (the due index plus one entry per item in the shard's state hash: fence, lastSync and attempts in 14 bytes, store/meta.go), the steady state of a running deployment. A claim round is what the engine does per shard: `ClaimPick` of 32 (the script finds the 32 longest-waiting due items and claims them) + `Release(32, synced)` on one shard, sequential for %v on an otherwise idle Redis; with more than one shard the engine also calls `Oldest` (16 ZRANGEs in one pipeline) before each round, timed apart. Then 8 goroutines run rounds at once for %v.", idLen, s.Dur, s.Dur)
	b.nl()
	var rows [][]string
	for _, n := range s.Sizes {
		runs := s.Runs[n]
		if len(runs) == 0 {
			rows = append(rows, []string{humanCount(n), "not run", "", "", "", "", "", "", "", "", ""})
			continue
		}
		f := func(g func(ScaleRun) float64) Spread { return spreadOf(mapRuns(runs, g)) }
		fb := func(g func(ScaleRun) float64) Spread { return spreadOf(mapRuns(builds(runs), g)) }
		nb := fmt.Sprintf(" (%d builds)", len(builds(runs)))
		if len(builds(runs)) == 1 {
			nb = " (1 build)"
		}
		rows = append(rows, []string{humanCount(n) + nb,
			numSpread(fb(func(x ScaleRun) float64 { return float64(x.MemAdded) / float64(x.Items) }), "%.0f"),
			numSpread(fb(func(x ScaleRun) float64 { return float64(x.MemSynced) / float64(x.Items) }), "%.0f"),
			fmt.Sprintf("%.0f / %.0f", fb(func(x ScaleRun) float64 { return float64(x.DueBytes) / float64(x.Items) }).Med,
				fb(func(x ScaleRun) float64 { return float64(x.MetaBytes) / float64(x.Items) }).Med),
			fmt.Sprint(runs[0].Keys),
			msSpread(f(func(x ScaleRun) float64 { return ms(percentile(x.Round1, 50)) })),
			msSpread(f(func(x ScaleRun) float64 { return ms(percentile(x.Round1, 99)) })),
			msSpread(f(func(x ScaleRun) float64 { return ms(percentile(x.Oldest1, 99)) })),
			msSpread(f(func(x ScaleRun) float64 { return ms(percentile(x.Round8, 99)) })),
			rateSpread(f(func(x ScaleRun) float64 { return x.Round8Rate })),
			fmt.Sprintf("%.2f", f(func(x ScaleRun) float64 { return us(x.RedisPerItem) }).Med),
		})
	}
	for _, n := range s.Sizes {
		if runs := s.Runs[n]; len(runs) > 0 && runs[0].MetaSample != "" {
			b.p("A state-hash value after one sync, as the scripts write it, in hex: `%x` (%d bytes).", runs[0].MetaSample, len(runs[0].MetaSample))
			b.nl()
			break
		}
	}
	b.table([]string{"items", "B/item after Add", "B/item after one sync", "of which due index / state hash (MEMORY USAGE)", "keys after one sync", "round p50 ms", "round p99 ms", "Oldest p99 ms", "round p99 ms, 8 goroutines", "items/s, 8 goroutines", "Redis CPU µs/item (1 goroutine)"}, rows)
}

func memAlts(b *md, s *ScaleResults) {
	if len(s.MemAlts) == 0 {
		return
	}
	b.p("**State hash layouts** (an experiment, not the product's code path): the state values of %s items after one sync, written with pipelined HSET in three layouts; `used_memory` per item. Small hashes (≤ 128 entries, values ≤ 64 bytes) are kept by Redis as listpacks, without a dict entry and two sds allocations per field.", humanCount(s.MemAltItems))
	b.nl()
	var rows [][]string
	for _, a := range s.MemAlts {
		v := a.ValueExample
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
			v = fmt.Sprintf("%x (hex)", v)
		}
		rows = append(rows, []string{a.Name, "`" + v + "`", fmt.Sprintf("%.0f", a.BytesPerItem)})
	}
	b.table([]string{"layout", "value", "B/item"}, rows)
}

func fairness(b *md, f *FairResults) {
	b.p("## 6. Fairness under load")
	b.nl()
	b.p("Modelled on `engine.TestFairnessLongestWaitingFirst`: %d items on %d shards, %d workers in total, TTL 5s, poll 10ms, until every item has synced twice; syncs of 10–30 ms at random and an interval of %v (short syncs make the engine's own cost per item count). The *longest wait past due* is the largest (sync start − due time) over both cycles (cycle 1 starts with all items due at once); the *ideal bound* is one cycle's sink time spread evenly over all workers plus the longest single sync (30 ms), plus the settle delay where there is one (no sync starts sooner than that after its claim). The engine test allows 1.5x. *Order* is how many places a cycle-2 sync started away from its lastSync rank (the test allows 2 × workers + batch = %d).", FairItems, FairShards, FairWorkers, FairInterval, 2*FairWorkers+32)
	b.nl()
	var rows [][]string
	for _, sc := range f.Scenarios {
		runs := f.Runs[sc.Name]
		d := func(g func(FairRun) time.Duration) string {
			return msSpread(spreadOf(mapRuns(runs, func(x FairRun) float64 { return ms(g(x)) })))
		}
		load := "–"
		if sc.Load > 0 {
			load = fmtRate(spreadOf(mapRuns(runs, func(x FairRun) float64 { return x.LoadRate })).Med) + " cycles/s"
		}
		ratio := spreadOf(mapRuns(runs, FairRun.Ratio))
		rows = append(rows, []string{sc.Name,
			d(func(x FairRun) time.Duration { return x.MaxWait }), d(func(x FairRun) time.Duration { return x.Ideal }),
			ratioSpread(ratio) + " " + map[bool]string{true: "(≤ 1.5x)", false: "(> 1.5x)"}[ratio.Med <= 1.5],
			d(func(x FairRun) time.Duration { return x.WaitFirst }), d(func(x FairRun) time.Duration { return x.WaitSecond }),
			numSpread(spreadOf(mapRuns(runs, func(x FairRun) float64 { return float64(x.Worst) })), "%.0f"),
			load})
	}
	b.table([]string{"scenario", "longest wait ms", "ideal bound ms", "ratio", "cycle 1 longest ms", "cycle 2 longest ms", "order off by (places)", "background load"}, rows)
}

func profiles(b *md, r *Results) {
	p := r.Profiles
	b.p("## 8. Profiles")
	b.nl()
	where := "written to a temporary directory and removed; rerun with `-profdir DIR` to keep them"
	if p.Kept {
		where = "kept in `" + p.Dir + "`"
	}
	b.p("CPU profiles of this process (pprof, %v each, %s).", r.Settings.profDur, where)
	b.nl()
	cpuTable := func(title string, ps ...*CPUProfile) {
		b.p("**%s**", title)
		b.nl()
		for _, cp := range ps {
			if cp == nil {
				continue
			}
			b.p("`%s`: %d operations, %.1f µs of client CPU per operation sampled.", baseName(cp.Path), cp.Ops, us(time.Duration(cp.Total))/float64(max(cp.Ops, 1)))
			b.nl()
			var rows [][]string
			for _, f := range cp.Cum {
				rows = append(rows, []string{"`" + f.Name + "`", fmt.Sprintf("%.1f%%", 100*f.Frac), fmt.Sprintf("%.2f", us(time.Duration(f.Value))/float64(max(cp.Ops, 1)))})
			}
			b.table([]string{"cumulative (product functions and groups)", "share", "µs/op"}, rows)
			rows = nil
			for _, f := range cp.Flat[:min(10, len(cp.Flat))] {
				rows = append(rows, []string{"`" + f.Name + "`", fmt.Sprintf("%.1f%%", 100*f.Frac)})
			}
			b.table([]string{"flat (top 10)", "share"}, rows)
		}
	}
	cpuTable("syncd Locker vs hand-rolled, 64 goroutines, distinct keys", p.CPUOurs, p.CPUHand)
	cpuTable("Engine, 64 workers, settle 0, no-op sink (op = item synced)", p.CPUEngine)
	allocTable := func(title string, a *AllocProfile) {
		if a == nil {
			return
		}
		b.p("**%s**: %.1f allocations and %.0f B per cycle in total (every allocation recorded, `MemProfileRate = 1`, %d cycles, 1 goroutine); %.1f of them with a syncd frame on the stack, attributed to the innermost one:", title,
			float64(a.Objects)/float64(max(a.Ops, 1)), float64(a.Bytes)/float64(max(a.Ops, 1)), a.Ops, float64(a.ProductObjects)/float64(max(a.Ops, 1)))
		b.nl()
		var rows [][]string
		for _, s := range a.Sites {
			rows = append(rows, []string{"`" + s.Site + "`", fmt.Sprintf("%.2f", s.PerOp), fmt.Sprintf("%.0f", s.BytesPer)})
		}
		b.table([]string{"syncd call site", "allocs/cycle", "B/cycle"}, rows)
		rows = nil
		for _, s := range a.Leaves[:min(10, len(a.Leaves))] {
			rows = append(rows, []string{"`" + s.Site + "`", fmt.Sprintf("%.2f", s.PerOp), fmt.Sprintf("%.0f", s.BytesPer)})
		}
		b.table([]string{"allocating function (top 10)", "allocs/cycle", "B/cycle"}, rows)
	}
	allocTable("syncd Locker TryLock + Unlock", p.AllocOurs)
	allocTable("syncd Manager Claim + Release", p.AllocMgr)
}

func scriptCosts(b *md, cs []ScriptCost) {
	b.p("## 7. Redis time per script call")
	b.nl()
	b.p("Redis's own time per call (INFO commandstats `usec / calls` of EVALSHA, or of SET for the native command), the product's scripts called through the `store` API. Calls come from 8 goroutines at once so that Redis stays busy as under load (a lone client lets Redis idle between calls, and every call then pays for cold caches, about 1.5–2x more). The probes isolate parts of the scripts: the shared prelude (its functions are defined on every call), building one owner record in Lua (no Redis calls) in two ways, reading TIME, and building a state value. Each probe runs after the product's prelude and defines what it uses itself.")
	b.nl()
	var rows [][]string
	for _, c := range cs {
		per := "–"
		if c.Items > 1 {
			per = fmt.Sprintf("%.2f", c.PerItem())
		}
		var inner []string
		for _, k := range sortedKeys(c.Inner) {
			if v := c.Inner[k]; v >= 0.01 {
				inner = append(inner, fmt.Sprintf("%s %.2g", strings.ToUpper(k), v))
			}
		}
		rows = append(rows, []string{c.Name, fmt.Sprint(c.Calls), numSpread(Spread{Med: c.UsecPerCall, Min: c.Min, Max: c.Max, N: 2}, "%.2f"), per, strings.Join(inner, ", ")})
	}
	b.table([]string{"script", "calls per run", "µs per call", "µs per item", "Redis commands inside, per call"}, rows)
	if ConcatSame != nil {
		b.p("The two ways build byte-for-byte the same record: %v.", *ConcatSame)
		b.nl()
	}
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// limitsAnalysis explains the missed targets from the measured numbers.
func limitsAnalysis(b *md, r *Results) {
	b.p("## What limits the missed targets")
	b.nl()
	missed, known := false, false
	for _, t := range r.Targets() {
		missed = missed || t.Known && !t.Met
		known = known || t.Known
	}
	switch {
	case !known:
		b.p("No target was measured in this run.")
		b.nl()
	case !missed:
		b.p("Every measured target was met.")
		b.nl()
	}
	ncpu := float64(r.Env.NumCPU)
	if l := r.Locks; l != nil {
		sc := LockScenarios[2].Name
		b.p("### Lock cycles at 64 goroutines: a CPU budget")
		b.nl()
		b.p("Client and Redis share %d cores with whatever else runs on the machine, so a cycle costs (client CPU + Redis CPU) of the cores left over, and Redis alone cannot exceed one core. The bounds below are computed per run from the measured CPU per cycle and the CPU other processes left free in that window (medians over the repetitions); a measured rate near 100%% of the lower bound means the implementation is CPU-bound, and its rate can only rise by spending less CPU per cycle, in the client or in Redis.", int(ncpu))
		b.nl()
		var rows [][]string
		for _, k := range lockKinds {
			sp := func(f func(LoopResult) float64) float64 { return l.spread(k.name, sc, f).Med }
			c := sp(func(x LoopResult) float64 { return x.PerOK(us(x.W.CPU)) })
			rc := sp(func(x LoopResult) float64 { return x.PerOK(us(x.W.RedisCPU)) })
			free := sp(func(x LoopResult) float64 { return ncpu - cores(x.W.Foreign(), x.W) })
			machine := sp(func(x LoopResult) float64 {
				return (ncpu - cores(x.W.Foreign(), x.W)) * 1e6 / (x.PerOK(us(x.W.CPU)) + x.PerOK(us(x.W.RedisCPU)))
			})
			single := sp(func(x LoopResult) float64 { return 1e6 / x.PerOK(us(x.W.RedisCPU)) })
			frac := sp(func(x LoopResult) float64 {
				free := ncpu - cores(x.W.Foreign(), x.W)
				return x.Rate() / math.Min(free*1e6/(x.PerOK(us(x.W.CPU))+x.PerOK(us(x.W.RedisCPU))), 1e6/x.PerOK(us(x.W.RedisCPU)))
			})
			rows = append(rows, []string{k.label, fmtRate(sp(LoopResult.Rate)), fmt.Sprintf("%.1f", c), fmt.Sprintf("%.1f", rc), fmt.Sprintf("%.2f", free),
				fmtRate(machine), fmtRate(single), fmt.Sprintf("%.0f%%", 100*frac)})
		}
		b.table([]string{"implementation", "cycles/s", "client µs/cycle", "Redis µs/cycle", "cores left free", "bound: free cores / (client + Redis)", "bound: 1 core / Redis", "measured / lower bound"}, rows)
	}
	b.WriteString(Findings(r))
}

// scriptCost returns the median µs per call of the script cost whose
// name starts with prefix, NaN when it was not measured.
func (r *Results) scriptCost(prefix string) float64 {
	for _, c := range r.Scripts {
		if strings.HasPrefix(c.Name, prefix) {
			return c.UsecPerCall
		}
	}
	return math.NaN()
}

// recordBuild says how the product's scripts build an owner record now,
// and which probe of section 7 measures that way.
func (r *Results) recordBuild() (desc, probe string) {
	pre, claim := r.ScriptSrc["prelude.lua"], r.ScriptSrc["claim_pick.lua"]
	switch {
	case strings.Contains(pre, "string.char(unpack("):
		return "patched into the template field by field, with a `be()` that fills a Lua table and calls `string.char(unpack(t))`", "prelude + building one record: 4 patches"
	case strings.Contains(pre+claim, "stamp("):
		return "stamped in one concatenation with a table-free `be8`/`be4` (`stamp` in prelude.lua)", "prelude + the same record: one concatenation"
	}
	return "built in Lua", "prelude + the same record: one concatenation"
}

// innerOf lists the Redis commands a script ran per call (section 7).
func (r *Results) innerOf(prefix string) string {
	for _, c := range r.Scripts {
		if strings.HasPrefix(c.Name, prefix) {
			var parts []string
			for _, k := range sortedKeys(c.Inner) {
				if v := c.Inner[k]; v >= 0.05 {
					parts = append(parts, fmt.Sprintf("%s ×%.3g", strings.ToUpper(k), v))
				}
			}
			return strings.Join(parts, ", ")
		}
	}
	return "?"
}

// The Redis commands of a lone lock and unlock call (lock.lua,
// unlock_batch.lua), and Redis instructions per lone cycle as
// bench/cmd/redisinstr counted them (-only lock1,redislock,floor, on Debian's
// redis-server 7.0.15 built with symbols) at lockInstrAt: not measured by
// benchall, which cannot run valgrind in its time budget. Refresh them
// when the scripts change.
const (
	lockCommands       = 3
	unlockCommands     = 3
	lockInstrOurs      = "163k"
	lockInstrRedislock = "55k"
	lockInstrFloor     = "67k"
	lockInstrAt        = "commit 9edc961"
)

// Findings is the interpretation, with the numbers it rests on. Every
// statement about what the product does is derived from this run: the
// commands Redis counted, the scripts' own text, the profiles.
func Findings(r *Results) string {
	var b md
	missedPrefix := func(prefix string) bool {
		for _, t := range r.Targets() {
			if strings.HasPrefix(t.What, prefix) && t.Known && !t.Met {
				return true
			}
		}
		return false
	}
	sc := func(name string) string {
		v := r.scriptCost(name)
		if math.IsNaN(v) {
			return "?"
		}
		return fmt.Sprintf("%.1f", v)
	}
	recDesc, recProbe := r.recordBuild()
	if l := r.Locks; l != nil {
		s64 := LockScenarios[2].Name
		med := func(impl string, f func(LoopResult) float64) float64 { return l.spread(impl, s64, f).Med }
		cpu := func(impl string) float64 {
			return med(impl, func(x LoopResult) float64 { return x.PerOK(us(x.W.CPU)) })
		}
		rcpu := func(impl string) float64 {
			return med(impl, func(x LoopResult) float64 { return x.PerOK(us(x.W.RedisCPU)) })
		}
		allocs := func(impl string) float64 {
			return med(impl, func(x LoopResult) float64 { return x.PerOK(float64(x.W.Mallocs)) })
		}
		total := func(impl string) float64 { return cpu(impl) + rcpu(impl) }
		status := "met"
		if missedPrefix("standalone lock") {
			status = "partly or wholly missed"
		}
		b.p("### Standalone lock (targets %s)", status)
		b.nl()
		b.p("- **CPU per cycle.** All implementations make the same %.2f round trips per cycle unpipelined. The auto-pipelined Locker, whose rate the targets measure, spends %.0f µs per cycle (client %.0f + Redis %.0f); unpipelined %.0f (%.0f + %.0f); the hand-rolled lock %.0f (%.0f + %.0f), bsm/redislock %.0f (%.0f + %.0f), go-redsync %.0f (%.0f + %.0f).",
			med("ours", func(x LoopResult) float64 { return x.PerOK(float64(x.W.RoundTrips)) }),
			total("ours-ap"), cpu("ours-ap"), rcpu("ours-ap"), total("ours"), cpu("ours"), rcpu("ours"),
			total("handrolled"), cpu("handrolled"), rcpu("handrolled"),
			total("redislock"), cpu("redislock"), rcpu("redislock"), total("redsync"), cpu("redsync"), rcpu("redsync"))
		rate := func(impl string) float64 { return l.spread(impl, s64, LoopResult.Rate).Med }
		ncpu := float64(max(r.Env.NumCPU, 1))
		goal := max(lockGoalRedislock*rate("redislock"), lockGoalRedsync*rate("redsync"))
		b.p("- **What the targets ask.** %.1fx bsm/redislock and %.1fx go-redsync are %s cycles/s here: at most %.0f µs of Redis CPU per cycle (Redis runs on one core) and %.0f µs of client and Redis CPU together on %d cores, against the auto-pipelined Locker's %.0f and %.0f. Its CPU alone would allow %s cycles/s; it ran %s, so the rest is waiting. Its Store gathers concurrent Lock and Unlock calls into one `lock.lua` and one `unlock_batch.lua` call per round trip (`store/coalesce.go`; section 7 shows the calls per cycle), two round trips in flight, at most one of them with unlocks (their receipts are one key per Store that keeps what its last 4 batches of unlocks released, which other batches of unlocks would push out while one is re-sent after a dropped connection; tests/fault TestAutoPipelineCutMidBatch fails without the rule). Redis and the client still wait on each other between batches: each batch's write to the socket, the wake-ups of the callers it answers and their next calls come between two batches. Even the hand-rolled lock, with no fence, owner record or watchdog, runs %.2fx bsm/redislock unpipelined.",
			lockGoalRedislock, lockGoalRedsync, fmtRate(goal), 1e6/goal, ncpu*1e6/goal, int(ncpu), rcpu("ours-ap"), total("ours-ap"),
			fmtRate(min(1e6/rcpu("ours-ap"), ncpu*1e6/total("ours-ap"))), fmtRate(rate("ours-ap")), l.ratio("handrolled", "redislock", s64).Med)
		b.p("- **Redis side: %.0f µs more per cycle than hand-rolled, most of it `lock.lua`.** Per call (section 7): `lock.lua` %s µs against %s µs for the native SET NX PX it replaces; `unlock.lua` %s µs against %s µs for the hand-rolled delete. `lock.lua` runs %s. Each command called from Lua costs more than the command itself: a script with the prelude and one `GET` of a missing key takes %s µs, one `SET NX PX` of a new key %s µs, against %s µs for the prelude and `return 1` (and %s for a bare `return 1`); the fence-counter write (`SET ... PX 604800000`, a week) is the second new-key write per lock. Besides the commands: the owner record, %s (%s µs in the probe, prelude included), and the fence formatted with `string.format`.",
			rcpu("ours")-rcpu("handrolled"), sc("lock.lua"), sc("native SET"), sc("unlock.lua"), sc("hand-rolled delete"), r.innerOf("lock.lua"),
			sc("prelude + one redis.call: GET"), sc("prelude + one redis.call: SET"), sc("EVALSHA syncd prelude"), sc("EVALSHA `return 1`"), recDesc, sc(recProbe))
		s1 := LockScenarios[0].Name
		med1 := func(impl string, f func(LoopResult) float64) float64 { return l.spread(impl, s1, f).Med }
		p50 := func(impl string) float64 {
			return med1(impl, func(x LoopResult) float64 { return us(x.P(0.5)) })
		}
		rcpu1 := func(impl string) float64 {
			return med1(impl, func(x LoopResult) float64 { return x.PerOK(us(x.W.RedisCPU)) })
		}
		b.p("- **1 goroutine: the Redis work on the path of every call.** A lone caller waits out two round trips per cycle whatever it does, so what Redis runs per call adds to every cycle: the auto-pipelined Locker's cycle took %.0f µs (p50) against bsm/redislock's %.0f, with %.0f µs of Redis CPU per cycle against %.0f. Its Store sends a lone call at once, alone (no batch to wait for), but a lock runs %d Redis commands (`lock.lua`: TIME, the fence counter's SET ... GET, SET NX ... GET) where bsm/redislock's Obtain runs 1, and an unlock %d (`unlock_batch.lua`: one MGET of the record and the Store's receipt, DEL, SET of the receipt) where its Release runs 2. `bench/cmd/redisinstr`, which counts Redis's instructions under valgrind (no noise from other processes), counted %s per lone cycle against %s for bsm/redislock (%s).",
			p50("ours-ap"), p50("redislock"), rcpu1("ours-ap"), rcpu1("redislock"), lockCommands, unlockCommands,
			lockInstrOurs, lockInstrRedislock, lockInstrAt)
		floor := l.ratio("floor", "redislock", s1)
		// Level: the floor's median within the spread of bsm/redislock's
		// own repetitions (a few per cent) of 1.0x.
		reach := "So even a fence alone misses the target on this machine, and the Locker's gap is that and what it runs beyond the floor,"
		if floor.Med >= 0.97 {
			reach = "So a lock with a fence alone runs level with bsm/redislock, and the Locker's gap is what it runs beyond the floor,"
		}
		b.p("- **What a fenced lock can do at 1 goroutine: the floor.** The \"fenced floor\" row (`bench.FloorCycle`) is the least a lock whose fence comes from Redis can run: one script of TIME and SET NX PX with the fence in the value, and the classic compare-and-delete (%s Redis instructions per cycle). It ran %s bsm/redislock at 1 goroutine in this run, the Locker %s. %s each part a guarantee the floor lacks: the fence counter (fences keep rising when Redis's clock steps back, as after a failover), the hold-off of a name after Redis lost its data, the owner record (who holds the lock, since when), and the unlock receipt (an unlock re-sent after a dropped connection still reports Released). Fewer commands per call for the same guarantees, such as a lock record that keeps its own fence and receipt after release (one key per name instead of three), would narrow that gap but not close it: by our estimate it removes one Redis command of the six per cycle.",
			lockInstrFloor, ratioSpread(floor), ratioSpread(l.ratio("ours-ap", "redislock", s1)), reach)
		var client []string
		if p := r.Profiles; p != nil && p.AllocOurs != nil {
			var lease, leaseB float64
			for _, s := range p.AllocOurs.Sites {
				switch {
				case strings.HasPrefix(s.Site, "store.(*Store).runScript"):
					client = append(client, fmt.Sprintf("go-redis's EVALSHA, which boxes every key and argument into `[]any` (%.1f allocations per cycle under `store.(*Store).runScript`)", s.PerOp))
				case strings.HasPrefix(s.Site, "store.Keys.Lock:"):
					client = append(client, fmt.Sprintf("the lock's key string, built %.0f times per cycle (`store.Keys.Lock`, called for the lease in `Locker.try`, in `Store.Lock`, inside `Keys.LockFence` and in `Store.Unlock`)", s.PerOp))
				case strings.HasPrefix(s.Site, "ownership.newLease:") || strings.HasPrefix(s.Site, "ownership.(*Lease).arm:"):
					lease += s.PerOp
					leaseB += s.BytesPer
				}
			}
			if lease > 0 {
				client = append(client, fmt.Sprintf("a lease per lock, armed and torn down again (`newLease`, `Lease.arm`: `context.WithCancelCause`, `time.AfterFunc`; %.0f allocations, %.0f B)", lease, leaseB))
			}
		}
		detail := ""
		if len(client) > 0 {
			detail = " From the allocation profile: " + strings.Join(client, "; ") + "."
		}
		b.p("- **Client side: %.0f µs more per cycle than hand-rolled; %.0f allocations per cycle against %.0f.**%s",
			cpu("ours")-cpu("handrolled"), allocs("ours"), allocs("handrolled"), detail)
		if p := r.Profiles; p != nil && p.CPUOurs != nil && p.CPUHand != nil {
			b.p("  CPU profile: %.1f µs of client CPU per cycle for the Locker against %.1f µs hand-rolled, most of both in go-redis and socket syscalls (section 8).",
				us(time.Duration(p.CPUOurs.Total))/float64(max(p.CPUOurs.Ops, 1)), us(time.Duration(p.CPUHand.Total))/float64(max(p.CPUHand.Ops, 1)))
		}
		b.nl()
	}
	if e := r.E2E; e != nil {
		row, arow := e.row("syncd", 64, 0), e.row("asynq", 64, 0)
		status := "met"
		if missedPrefix("end to end") {
			status = "missed"
		}
		b.p("### End to end against asynq (target %s)", status)
		b.nl()
		e2eByConcurrency(&b, e)
		if row != nil && arow != nil && len(row.Runs) > 0 && len(arow.Runs) > 0 {
			per := func(rr *E2ERow, f func(E2ERun) float64) float64 { return spreadOf(mapRuns(rr.Runs, f)).Med }
			cs := per(row, func(x E2ERun) float64 { return us(x.W.CPU) / float64(max(x.Done, 1)) })
			rs := per(row, func(x E2ERun) float64 { return us(x.W.RedisCPU) / float64(max(x.Done, 1)) })
			ca := per(arow, func(x E2ERun) float64 { return us(x.W.CPU) / float64(max(x.Done, 1)) })
			ra := per(arow, func(x E2ERun) float64 { return us(x.W.RedisCPU) / float64(max(x.Done, 1)) })
			x := row.Runs[len(row.Runs)/2]
			rounds := per(row, E2ERun.Rounds)
			perRound := per(row, func(x E2ERun) float64 { return float64(x.Done) / (x.Rounds() * x.W.Wall.Seconds()) })
			idle := per(row, func(x E2ERun) float64 { return cores(x.W.HostIdle, x.W) })
			b.p("- **CPU per item.** At 64 workers syncd spends %.0f µs per item (client %.0f + Redis %.0f), asynq %.0f (%.0f + %.0f). %gx asynq would need ≤ %.0f µs per item on this machine, and that only if the engine could keep every free core busy.",
				cs+rs, cs, rs, ca+ra, ca, ra, E2EGoal(64), (ca+ra)/E2EGoal(64))
			other := per(row, func(x E2ERun) float64 { return cores(x.W.Foreign(), x.W) })
			verdict := fmt.Sprintf("with %.2f cores idle, this loop, not CPU, is what held the engine back", idle)
			if idle < 0.2 {
				verdict = fmt.Sprintf("in this run the CPU ran out as well (other processes took %.2f cores, %.2f were idle), so both limits were close", other, idle)
			}
			b.p("- **Claims come from two claim loops.** With settle 0, each of the engine's two `Engine.schedule` loops waits for its pick claim (`claim_pick.lua` on up to 32 items, queued in Redis behind the other traffic) before its next round. At 64 workers they ran %.0f rounds per second together, of %.1f items: at most %s items/s at 32 per round, against %s measured; %s.",
				rounds, perRound, fmtRate(32*rounds), fmtRate(per(row, E2ERun.Rate)), verdict)
			if rel := perScript(x.W, x.Done, "release.lua"); rel > 0 {
				relRow := func(n int) string {
					if r.Batches == nil {
						return "(not measured: section 3 did not run)"
					}
					for _, row := range r.Batches.Rows {
						if row.Op == "release" && row.N == n {
							return fmt.Sprintf("%.1f µs of Redis CPU and %.1f µs of client CPU per item",
								spreadOf(mapRuns(row.Runs, func(x BatchRun) float64 { return us(x.W.RedisCPU) / float64(max(x.Items, 1)) })).Med,
								spreadOf(mapRuns(row.Runs, func(x BatchRun) float64 { return us(x.W.CPU) / float64(max(x.Items, 1)) })).Med)
						}
					}
					return "?"
				}
				if rel >= 0.8 {
					b.p("- **One release per item.** The engine sent %.2f `release.lua` calls per item synced: each worker releases its own lease. Section 3 measures what batching saves: one item per call costs %s, 32 per call %s.", rel, relRow(1), relRow(32))
				} else {
					b.p("- **Releases are batched**: %.2f `release.lua` calls per item synced, %.1f items per call (one item per call would cost %s; 32 per call cost %s, section 3).", rel, 1/rel, relRow(1), relRow(32))
				}
			}
			b.p("- Per item at 64 workers, client side: %s. Redis ran %s.", perCycleNames(x.W.ByName, x.Done), perCycleRedis(x.W.Redis, x.Done))
			b.p("- **`claim_pick.lua` costs %.1f µs of Redis per item** picking 32 (section 7), running %s per item; the record is %s (%s µs in the probe, prelude included), the state value is written from the new fence's bytes, and the call's meta values, held scores and the candidates' meta reads go in one HSET, ZADD and HMGET. The batched claim rate (section 3) stops rising past about 8–32 ids per call: the per-item script work, not the round trip, is the limit.",
				r.scriptCost("claim_pick.lua, 32")/32, perItemInner(r.innerOf("claim_pick.lua, 32"), 32), recDesc, sc(recProbe))
			if one := e.row("syncd", 1, 0); one != nil && len(one.Runs) > 0 {
				y := one.Runs[len(one.Runs)/2]
				b.p("- **At one worker every item is a full scheduler round**: %.2f round trips per item (%s), each waiting on the previous: the pick claim, then the release (with `Store.Oldest` at most every 20 ms). asynq needs 2 (dequeue, done).",
					float64(y.W.RoundTrips)/float64(max(y.Done, 1)), perCycleNames(y.W.ByName, y.Done))
			}
			if s50 := e.row("syncd", 64, 50*time.Millisecond); s50 != nil && len(s50.Runs) > 0 {
				r50 := spreadOf(mapRuns(s50.Runs, E2ERun.Rate)).Med
				r0 := spreadOf(mapRuns(row.Runs, E2ERun.Rate)).Med
				if r50 <= 1.1*32/0.05 {
					b.p("- **Settle serialises the claims.** With settle 50ms, 64 workers sync %s items/s (settle 0: %s): at most one batch of ≤ 32 items per 50 ms settle window (≤ 640 items/s), so `Manager.ClaimPick`'s settle wait is taken inside the scheduler loop.", fmtRate(r50), fmtRate(r0))
				} else {
					b.p("- **Settle windows overlap**: with settle 50ms, 64 workers sync %s items/s (settle 0: %s), above the 640 items/s that one 32-item batch per 50 ms window would allow.", fmtRate(r50), fmtRate(r0))
				}
			}
		}
		b.nl()
	}
	if e := r.E2E; e != nil && len(e.TargetRows) > 0 {
		targetFindings(&b, e, missedPrefix("target limiter"), float64(r.Env.NumCPU))
	}
	if s := r.Scale; s != nil {
		var big int
		for _, n := range s.Sizes {
			if len(s.Runs[n]) > 0 {
				big = n
			}
		}
		if big > 0 {
			runs := s.Runs[big]
			bl := builds(runs)
			mem := spreadOf(mapRuns(bl, func(x ScaleRun) float64 { return float64(x.MemSynced) / float64(x.Items) })).Med
			due := spreadOf(mapRuns(bl, func(x ScaleRun) float64 { return float64(x.DueBytes) / float64(x.Items) })).Med
			meta := spreadOf(mapRuns(bl, func(x ScaleRun) float64 { return float64(x.MetaBytes) / float64(x.Items) })).Med
			status := "met"
			if mem > 200 {
				status = "missed"
			}
			if big < 1_000_000 {
				status = "set for 1M, not measured in this run"
			}
			b.p("### Memory per item at %s (target %s)", humanCount(big), status)
			b.nl()
			b.p("- %.0f B per item once every item has synced: the due index (a ZSET per shard, skiplist + dict) %.0f B and the state hash %.0f B per item (MEMORY USAGE). Right after Add only the due index exists. The state hash is one hashtable per shard, so every item pays a dict entry, an sds field and an sds value; the value (fence, lastSync, attempts) is %d bytes of binary, the most that fits Redis's smallest string allocation.",
				mem, due, meta, len(runs[0].MetaSample))
			if len(s.MemAlts) == 3 {
				a := s.MemAlts
				b.p("- The layout experiment at %s items: the state values take %.0f B/item in the decimal `fence:lastSync:attempts` of the previous version, %.0f B/item as now, and %.0f B/item in listpack buckets (≈ %.0f B/item in all; the bucket count would be fixed per deployment, like the shard count).",
					humanCount(s.MemAltItems), a[0].BytesPerItem, a[1].BytesPerItem, a[2].BytesPerItem, mem-a[1].BytesPerItem+a[2].BytesPerItem)
			}
			p99 := spreadOf(mapRuns(runs, func(x ScaleRun) float64 { return ms(percentile(x.Round1, 99)) })).Med
			p50 := spreadOf(mapRuns(runs, func(x ScaleRun) float64 { return ms(percentile(x.Round1, 50)) })).Med
			status = "met"
			if p99 >= 2 {
				status = "missed"
			}
			if big < 1_000_000 {
				status = "set for 1M, not measured in this run"
			}
			b.nl()
			b.p("### Claim round at %s (target %s)", humanCount(big), status)
			b.nl()
			base := r.scriptCost("EVALSHA syncd prelude")
			luaWork := (r.scriptCost(recProbe) - base) + (r.scriptCost("prelude + building a state value") - base)
			claimItem := r.scriptCost("claim_pick.lua, 32") / 32
			b.p("- p50 %.2f ms, p99 %.2f ms. The round is mostly Redis executing two scripts: `claim_pick.lua` picking and claiming 32 items (%s µs per call) and `release.lua` for 32 (%s µs); the sorted set's size barely matters (ZRANGEBYSCORE and ZADD are O(log n): compare the rows for 10k, 100k and 1M). With a p50 that high, a stall of Redis's single thread or of this process (other load on the VM: see the Environment table; GC) pushes a round past 2 ms, so the p99 moves with the machine. Lua-side string work is part of it: building the record and formatting the state value take ≈ %.1f µs of the %.1f µs `claim_pick.lua` spends per item (%.0f%%), before any Redis command.",
				p50, p99, sc("claim_pick.lua, 32"), sc("release.lua synced, 32"), luaWork, claimItem, 100*luaWork/claimItem)
			b.nl()
		}
	}
	reconcileFindings(&b, r)
	return b.String()
}

// targetFindings says what the target's limits and breaker cost per item
// and, from CPU per item, what ratio that cost alone would allow.
func targetFindings(b *md, e *E2EResults, missed bool, ncpu float64) {
	fa, okA := e.targetFigures("default")
	fb, okB := e.targetFigures("breaker-off")
	fc, okC := e.targetFigures("limits")
	if !okA || !okB || !okC {
		return
	}
	status := "met"
	if missed {
		status = "missed"
	}
	b.p("### The target's limiter and breaker at %d workers (goal %s)", E2ETargetWorkers, status)
	b.nl()
	c := e.targetRatio("limits", "breaker-off")
	b.p("- **Limits far above the fleet's rate: %s of the breaker-off rate** (%s vs %s items/s; goal ≥ %.2fx). Per item, (c) sent %.2f round trips against %.2f: %.3f `target_admit.lua` (claim rounds average %.1f items; a round asks Redis only when the permits and tokens this process holds do not cover it) and %.3f ZREM (idle permits given back, batched).",
		ratioSpread(c), fmtRate(fc.rate), fmtRate(fb.rate), TargetGoal, fc.roundTrips, fb.roundTrips, fc.admit, fc.perRound, fc.zrem)
	if fa.zrem >= 0.5 || fb.zrem >= 0.5 {
		b.p("- **Every configuration gives a permit back per sync.** Without max_in_flight no sync holds a permit, yet (a) sent %.2f and (b) %.2f ZREM per item: `Engine.work` calls `target.release` with the empty permit, and that sends `ZREM` of the member \"\", one round trip per item in the default configuration too. (c)/(b) then compares two runs that both pay it, and understates what the permits cost against an engine that skips the empty one.",
			fa.zrem, fb.zrem)
	}
	costB, costC := fb.cpu+fb.rcpu, fc.cpu+fc.rcpu
	b.p("- **CPU per item**: (b) %.1f µs (client %.1f + Redis %.1f), (c) %.1f µs (%.1f + %.1f), %+.1f µs. Where the machine's CPU is the limit, throughput goes as 1 / CPU per item: the extra CPU alone allows (c)/(b) ≈ %.2fx. Cores idle: (b) %.2f, (c) %.2f of %.0f.",
		costB, fb.cpu, fb.rcpu, costC, fc.cpu, fc.rcpu, costC-costB, costB/max(costC, 1e-9), fb.idle, fc.idle, ncpu)
	if fc.rounds > 0 && fb.rounds > 0 {
		b.p("- **Claim rounds**: (b) %.0f/s of %.1f items, (c) %.0f/s of %.1f items. A round of (c) that must ask Redis waits for `target_admit.lua` before its claim: two round trips instead of one.",
			fb.rounds, fb.perRound, fc.rounds, fc.perRound)
	}
	b.p("- **The default (a)** (breaker on, no limits) reached %s of (b). Its only extra traffic is the breaker read: %.1f `target_state.lua` calls/s, %.4f per item against %.2f round trips per item in all, so a gap much wider than that share is the machine's noise, not the breaker (compare the ranges of the repetitions).",
		ratioSpread(e.targetRatio("default", "breaker-off")), fa.state, fa.state/max(fa.rate, 1), fa.roundTrips)
	b.nl()
}

// perItemInner divides innerOf's per-call counts by n items.
func perItemInner(inner string, n float64) string {
	var out []string
	for _, part := range strings.Split(inner, ", ") {
		name, v, ok := strings.Cut(part, " ×")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			continue
		}
		out = append(out, fmt.Sprintf("%s ×%.2g", name, f/n))
	}
	return strings.Join(out, ", ")
}

// E2EGoal is issue 13's goal for syncd / asynq end to end at w workers.
func E2EGoal(w int) float64 {
	switch {
	case w <= 1:
		return 2
	case w >= 64:
		return 4.5
	}
	return 4
}

// e2eByConcurrency says, per concurrency, whether syncd reached its goal
// against asynq and what bounded it there.
func e2eByConcurrency(b *md, e *E2EResults) {
	var rows [][]string
	var missed []int
	cpuAt := map[int][2]float64{} // syncd's and asynq's CPU per item (client + Redis), µs
	idleAt := map[int]float64{}
	for _, w := range E2EWorkers {
		row, arow := e.row("syncd", w, 0), e.row("asynq", w, 0)
		if row == nil || arow == nil || len(row.Runs) == 0 || len(arow.Runs) == 0 {
			continue
		}
		var ratios []float64
		for i := range min(len(row.Runs), len(arow.Runs)) {
			ratios = append(ratios, row.Runs[i].Rate()/max(arow.Runs[i].Rate(), 1))
		}
		ratio := spreadOf(ratios).Med
		med := func(f func(E2ERun) float64) float64 { return spreadOf(mapRuns(row.Runs, f)).Med }
		rtt := med(func(x E2ERun) float64 { return float64(x.W.RoundTrips) / float64(max(x.Done, 1)) })
		rcpu := med(func(x E2ERun) float64 { return us(x.W.RedisCPU) / float64(max(x.Done, 1)) })
		items := med(func(x E2ERun) float64 { return float64(x.Done) / max(x.Rounds()*x.W.Wall.Seconds(), 1) })
		busy := med(func(x E2ERun) float64 { return cores(x.W.RedisCPU, x.W) })
		idle := med(func(x E2ERun) float64 { return cores(x.W.HostIdle, x.W) })
		per := func(rr *E2ERow) float64 {
			return spreadOf(mapRuns(rr.Runs, func(x E2ERun) float64 { return us(x.W.CPU+x.W.RedisCPU) / float64(max(x.Done, 1)) })).Med
		}
		cpuAt[w], idleAt[w] = [2]float64{per(row), per(arow)}, idle
		verdict := "met"
		if ratio < E2EGoal(w) {
			verdict = "missed"
			missed = append(missed, w)
		}
		rows = append(rows, []string{fmt.Sprint(w), fmt.Sprintf("%.2fx", ratio), verdict, fmt.Sprintf("%.2f", rtt),
			fmt.Sprintf("%.1f", items), fmt.Sprintf("%.1f", rcpu), fmt.Sprintf("%.2f / %.2f", busy, idle)})
	}
	if len(rows) == 0 {
		return
	}
	b.p("Per concurrency (medians; a claim call is one `claim_pick.lua` call):")
	b.nl()
	b.table([]string{"workers", "syncd / asynq", "goal", "round trips per item", "items per claim call", "Redis CPU µs/item", "cores: Redis busy / idle"}, rows)
	for _, w := range missed {
		c := cpuAt[w]
		b.p("- **%d workers:** syncd spends %.0f µs of CPU per item (client + Redis), asynq %.0f. %gx asynq needs ≤ %.0f µs per item with both cores busy; %.2f cores were idle. Claim-ahead already brings the round trips per item far below one, so what is left is CPU per item: the pick and release scripts' per-item work in Redis, and go-redis and the engine in the client.",
			w, c[0], c[1], E2EGoal(w), c[1]/E2EGoal(w), idleAt[w])
	}
	b.nl()
}

func recRedis(x ReconcileRun) float64  { return x.W.RedisCPU.Seconds() }
func recClient(x ReconcileRun) float64 { return x.W.CPU.Seconds() }

func reconcile(b *md, rc *ReconcileResults) {
	b.p("## 9. Reconcile of the item set")
	b.nl()
	b.p("`engine.Reconcile` of a set of %s ids (ids like `item-0000042`, %d bytes; %d shards) on a fresh key prefix, epochs marked first, with no source error and `MaxRemoval` %d%%: from an empty set (every id added), then with %.1f%% of the ids gone and as many new ones (%.0f%% changed), then the same set again (nothing changed: what every refresh pays). Each call takes the reconciler's lock, reads every shard's members (`ZRANGE 0 -1`) and items added by hand (`SMEMBERS`), diffs them with the desired set and writes the difference in `reconcile.lua` calls of up to 1000 ids, one shard after another. Client CPU is this process's (`getrusage`), so it includes the harness's heap sampler; the peak heap is the highest heap (live and not yet collected) during the call minus the heap right before it, the desired set itself excluded.",
		humanCount(rc.N), len(recID(0)), rc.Shards, RecMaxRemoval, 100*RecChurn, 200*RecChurn)
	b.nl()
	var rows [][]string
	for _, ph := range RecPhases {
		runs := rc.Runs[ph]
		if len(runs) == 0 {
			continue
		}
		f := func(g func(ReconcileRun) float64) Spread { return rc.spread(ph, g) }
		x := runs[len(runs)/2]
		perK := "–"
		if x.Changed() > 0 {
			perK = numSpread(f(func(x ReconcileRun) float64 { return 1000 * float64(x.Scripts) / float64(max(x.Changed(), 1)) }), "%.2f")
		}
		rows = append(rows, []string{ph, fmt.Sprintf("%d / %d", x.Res.Added, x.Res.Removed),
			numSpread(f(recSeconds), "%.2f"), rateSpread(f(ReconcileRun.Rate)),
			numSpread(f(recRedis), "%.2f"), numSpread(f(recClient), "%.2f"),
			fmt.Sprint(x.Scripts), perK, fmt.Sprint(x.W.RoundTrips),
			numSpread(f(func(x ReconcileRun) float64 { return float64(x.PeakHeap) / 1e6 }), "%.0f"),
			numSpread(f(func(x ReconcileRun) float64 { return float64(x.W.Bytes) / 1e6 }), "%.0f"),
		})
	}
	b.table([]string{"phase", "added / removed", "seconds", "ids of the set/s", "Redis CPU s", "client CPU s", "reconcile.lua calls", "calls per 1000 ids changed", "round trips", "client peak heap MB", "client allocated MB"}, rows)
}

// reconcileFindings says where a reconcile's time goes: the client, Redis
// or the machine's other load.
func reconcileFindings(b *md, r *Results) {
	rc := r.Reconcile
	if rc == nil || len(rc.Runs[RecAddAll]) == 0 || len(rc.Runs[RecNoop]) == 0 {
		return
	}
	t := r.reconcileTarget()
	status := "set for 1M, not measured in this run"
	if t.Known {
		status = strings.Trim(metMissed(t.Met), "*")
	}
	med := func(ph string, f func(ReconcileRun) float64) float64 { return rc.spread(ph, f).Med }
	perID := func(ph string, f func(ReconcileRun) float64) float64 {
		return med(ph, func(x ReconcileRun) float64 { return 1e6 * f(x) / float64(max(x.Changed(), 1)) })
	}
	perSet := func(ph string, f func(ReconcileRun) float64) float64 {
		return med(ph, func(x ReconcileRun) float64 { return 1e6 * f(x) / float64(max(x.Res.Desired, 1)) })
	}
	other := func(ph string) float64 {
		return med(ph, func(x ReconcileRun) float64 { return cores(x.W.Foreign(), x.W) })
	}
	b.p("### Reconcile at %s (target %s)", humanCount(rc.N), status)
	b.nl()
	wall, rcpu, ccpu := med(RecAddAll, recSeconds), med(RecAddAll, recRedis), med(RecAddAll, recClient)
	if wall >= 0.85*(rcpu+ccpu) {
		b.p("- **The time is client CPU plus Redis CPU, one after the other.** Adding all %s ids took %.2f s: Redis %.2f s, the client %.2f s (sum %.2f s). The shards are written one after another and each `reconcile.lua` call waits for its reply, so the two barely overlap and a second core does not help.",
			humanCount(rc.N), wall, rcpu, ccpu, rcpu+ccpu)
	} else {
		b.p("- **Client and Redis overlap.** Adding all %s ids took %.2f s: Redis %.2f s, the client %.2f s (sum %.2f s).", humanCount(rc.N), wall, rcpu, ccpu, rcpu+ccpu)
	}
	b.p("  Redis spends %.1f µs per id added (one `ZADD NX` per id from Lua, plus the fence `GET`/`SET` per call of up to 1000); the client %.1f µs per id of the set.",
		perID(RecAddAll, recRedis), perSet(RecAddAll, recClient))
	b.p("- **A refresh that changes nothing costs %.2f s** for %s ids, %.2f s of it client CPU (%.2f µs per id: every shard's members read with one `ZRANGE 0 -1` and hashed into a map, the desired set hashed into one map per shard) and %.2f s Redis; the client's heap grows by %.0f MB on top of the desired set. The 1%% changed reconcile pays the same reads and diff, then its %d ids changed: %.2f s in all, Redis %.2f s (%+.2f s against no change).",
		med(RecNoop, recSeconds), humanCount(rc.N), med(RecNoop, recClient), perSet(RecNoop, recClient), med(RecNoop, recRedis),
		med(RecNoop, func(x ReconcileRun) float64 { return float64(x.PeakHeap) / 1e6 }), rc.Runs[RecChanged][0].Changed(),
		med(RecChanged, recSeconds), med(RecChanged, recRedis), med(RecChanged, recRedis)-med(RecNoop, recRedis))
	b.p("- Other processes took %.2f cores (add all), %.2f (1%% changed) and %.2f (no change) of %d while these ran; the times above are wall clock and grow with that load.",
		other(RecAddAll), other(RecChanged), other(RecNoop), r.Env.NumCPU)
	b.nl()
}

func (r *Results) apiTarget() Target {
	what := fmt.Sprintf("API at 1M items: summary and first page of items (all, due) p99 < %v", APIGoal)
	a := r.API
	if a == nil {
		return Target{What: what + " (section not run)"}
	}
	met := true
	var m []string
	for _, op := range a.Ops {
		if op.Goal {
			met = met && op.P99 < APIGoal
			m = append(m, fmt.Sprintf("%s p99 %.2f ms", op.Name, ms(op.P99)))
		}
	}
	if a.N < 1_000_000 {
		return Target{What: what + " (not run at 1M: -quick)", Measured: "at " + humanCount(a.N) + ": " + strings.Join(m, "; ")}
	}
	return Target{What: what, Known: true, Met: met, Measured: strings.Join(m, "; ")}
}

func apiSection(b *md, a *APIResults) {
	b.p("## 10. API reads at %s items", humanCount(a.N))
	b.nl()
	b.p("The store calls behind `/api/v1` (what `syncd status` reads too), each called %d times in a row after 5 warm-up calls, against %s items in %d shards: 10%% due over the last hour, 1%% failing, 0.1%% quarantined, the rest due over the next hour, 3 daemons in the registry. The summary is `store.Counts` (the registry, then ZCARD, ZCOUNT and HLEN per shard, pipelined) and `store.TargetState`; pages are `store.ListPage` (a k-way merge of ZRANGEBYSCORE windows, then the candidates' meta, error and record, within a scan budget of %d index entries).", a.Calls, humanCount(a.N), a.Shards, store.ListScanBudget)
	b.nl()
	var rows [][]string
	for _, op := range a.Ops {
		rows = append(rows, []string{op.Name, fmt.Sprintf("%.2f", ms(op.P50)), fmt.Sprintf("%.2f", ms(op.P99)),
			fmt.Sprintf("%.2f", ms(op.Max)), strconv.Itoa(op.Items), strconv.FormatBool(op.Partial)})
	}
	b.table([]string{"read", "p50 ms", "p99 ms", "max ms", "items", "partial"}, rows)
}
