package topology

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// Redis Cluster under engine load: three masters with a replica each,
// four engines (one of them counting claims only after a replica
// acknowledged them) syncing 120 items every second into one fence
// checker. A master is killed (its replica takes over) and comes back as
// a replica; then a third of the slots, with several shards' hash tags,
// is resharded to another master while items sync. No CROSSSLOT error
// anywhere (engine logs, go-redis's log, every node's INFO errorstats),
// fences rise per item in claim order, and every item syncs again after
// the faults.
func TestClusterFaults(t *testing.T) {
	t.Parallel()
	const (
		engines  = 4 // the last one with MinReplicas 1
		items    = 120
		shards   = 16
		interval = time.Second
	)
	c := redistest.StartCluster(t, 3, 1)
	ctx := t.Context()
	var logs logBuffer
	cfg := store.Config{Addrs: c.Addrs(), Cluster: true, KeyPrefix: "cl", Shards: shards,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
		Logger: logs.logger(zerolog.InfoLevel)}

	setup, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprintf("cust-{%d}:%d", i%7, i) // braces in IDs must not move keys
	}
	if _, err := setup.Add(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	for sh := range shards {
		if _, err := setup.MarkEpoch(ctx, sh, 0); err != nil {
			t.Fatal(err)
		}
	}
	setup.Close()

	checker := newFenceChecker(nil)
	var es []*engine.Engine
	for n := range engines {
		st, err := store.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		own := ownership.Config{TTL: 2 * time.Second, Owner: store.Owner{Host: fmt.Sprintf("engine-%d", n)}}
		if n == engines-1 {
			own.MinReplicas, own.ReplicaTimeout = 1, 100*time.Millisecond
		}
		e, err := engine.New(st, checker.sink(n), engine.Config{Workers: 4, Interval: interval, Poll: 20 * time.Millisecond,
			MaxAttempts: 1000, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
			DrainTimeout: time.Second, Ownership: own, Logger: cfg.Logger.With().Int("engine", n).Logger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Stop(context.Background()) })
		es = append(es, e)
	}
	// syncedSince reports how many items have an accepted sync that
	// started after t.
	syncedSince := func(t0 time.Time) int {
		seen := map[string]bool{}
		for _, s := range checker.snapshot() {
			if s.accepted && s.start.After(t0) {
				seen[s.id] = true
			}
		}
		return len(seen)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "every item synced", func() bool { return syncedSince(start) == items })
	time.Sleep(2 * interval)

	// Kill a master: its replica takes over; it comes back as a replica.
	crossslot := errorstat(t, c, "CROSSSLOT")
	victim := c.Masters(t)[0]
	killed := time.Now()
	victim.Kill(t)
	c.WaitHealthy(t, 30*time.Second)
	failover := time.Since(killed)
	victim.Restart(t)
	c.WaitHealthy(t, 30*time.Second)
	recovered := time.Now()
	waitFor(t, 30*time.Second, "every item synced after the failover", func() bool { return syncedSince(recovered) == items })
	resumed := time.Since(killed)

	// Reshard: move a master's first 5461 slots to another master, with
	// keys migrated one at a time, while the engines claim and release.
	masters := c.Masters(t)
	from, to := nodeID(t, masters[0]), nodeID(t, masters[1])
	moving := shardsOn(t, c, masters[0], cfg.KeyPrefix, shards)
	reshardStart := time.Now()
	cmd := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", masters[0].Addr(),
		"--cluster-from", from, "--cluster-to", to, "--cluster-slots", "5461",
		"--cluster-yes", "--cluster-pipeline", "1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reshard: %v\n%s", err, testutil.Tail(string(out), 20))
	}
	reshard := time.Since(reshardStart)
	c.WaitHealthy(t, 30*time.Second)
	if after := shardsOn(t, c, masters[1], cfg.KeyPrefix, shards); len(after) < len(moving) {
		t.Errorf("shards %v were on %s, after the reshard %s holds only %v", moving, masters[0].Addr(), masters[1].Addr(), after)
	}
	done := time.Now()
	waitFor(t, 30*time.Second, "every item synced after the reshard", func() bool { return syncedSince(done) == items })
	for _, e := range es {
		e.Stop(ctx)
	}

	r := checkFences(checker.snapshot())
	crossslot += errorstat(t, c, "CROSSSLOT")
	var ok, failed, lost, stale int64
	for _, e := range es {
		m := e.Metrics()
		ok += m.SyncsOK.Load()
		failed += m.SyncsFailed.Load()
		lost += m.SyncsLost.Load()
		stale += m.StaleFences.Load()
	}
	t.Logf("cluster 3x(1+1), %d engines, %d items every %v: %s", engines, items, interval, r)
	t.Logf("engines: %d synced, %d failed, %d lost leases, %d stale fences; master killed: failover %v, every item synced again %v after the kill; reshard of 5461 slots (shards %v) took %v",
		ok, failed, lost, stale, failover.Round(10*time.Millisecond), resumed.Round(10*time.Millisecond), moving, reshard.Round(10*time.Millisecond))
	t.Logf("store errors in the engines' logs: %s", errorKinds(logs.String()))
	t.Logf("CROSSSLOT replies counted by the nodes: %d; TRYAGAIN %d, ASK %d, MOVED %d", crossslot,
		errorstat(t, c, "TRYAGAIN"), errorstat(t, c, "ASK"), errorstat(t, c, "MOVED"))

	if crossslot > 0 {
		t.Errorf("nodes counted %d CROSSSLOT errors", crossslot)
	}
	for _, src := range []string{logs.String(), goRedisLog.String()} {
		if strings.Contains(src, "CROSSSLOT") {
			t.Errorf("CROSSSLOT in the logs:\n%s", strings.Join(grepLines(src, "CROSSSLOT"), "\n"))
		}
	}
	if r.fenceDown > 0 {
		t.Errorf("%d syncs ran with a fence not above an earlier claim's: %v", r.fenceDown, r.examples)
	}
}

// nodeID returns a node's cluster id.
func nodeID(t *testing.T, n *redistest.Server) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: n.Addr()})
	defer c.Close()
	id, err := c.Do(t.Context(), "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// shardsOn returns the shards whose hash slot master n serves.
func shardsOn(t *testing.T, c *redistest.Cluster, n *redistest.Server, prefix string, shards int) []int {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
	defer cl.Close()
	keys := store.NewKeys(prefix, shards)
	var on []int
	for sh := range shards {
		slot, err := cl.ClusterKeySlot(t.Context(), keys.Due(sh)).Result()
		if err != nil {
			t.Fatal(err)
		}
		// CLUSTER COUNTKEYSINSLOT answers for slots the node serves only.
		if owner := slotOwner(t, cl, int(slot)); owner == n.Addr() {
			on = append(on, sh)
		}
	}
	return on
}

// slotOwner returns the address of the master serving slot, as cl sees it.
func slotOwner(t *testing.T, cl *redis.Client, slot int) string {
	t.Helper()
	shards, err := cl.ClusterShards(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int64(slot) < r.Start || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				}
			}
		}
	}
	return ""
}

// errorstat sums INFO errorstats' count for prefix over the running
// nodes.
func errorstat(t *testing.T, c *redistest.Cluster, prefix string) int {
	t.Helper()
	total := 0
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		s, err := cl.Info(t.Context(), "errorstats").Result()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(s, "\n") {
			// errorstat_CROSSSLOT:count=3
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ":count="); ok && k == "errorstat_"+prefix {
				n, _ := strconv.Atoi(v)
				total += n
			}
		}
	}
	return total
}

func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// errorKinds counts the kinds of Redis errors in JSON log lines.
func errorKinds(logs string) string {
	kinds := map[string]int{}
	for _, l := range grepLines(logs, `"error":"`) {
		_, e, _ := strings.Cut(l, `"error":"`)
		e, _, _ = strings.Cut(e, `"`)
		k := "other"
		for _, w := range []string{"CROSSSLOT", "TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "NOSCRIPT", "too few replicas", "connection refused", "i/o timeout", "EOF", "READONLY", "LOADING", "lease", "stale fence", "context"} {
			if strings.Contains(e, w) {
				k = w
				break
			}
		}
		if k == "other" && len(e) > 0 {
			k = "other: " + e[:min(len(e), 60)]
		}
		kinds[k]++
	}
	var out []string
	for k, v := range kinds {
		out = append(out, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// One Cluster master out of reach stops only its own shards: the
// others keep syncing. Three masters without replicas, set to serve their
// slots when another master fails (cluster-require-full-coverage no, as
// an operator who prefers part of the service to none sets it); one is
// paused (SIGSTOP) until every item of the other masters' shards synced
// again, 8 seconds at most; then every item syncs after it.
func TestClusterMasterUnreachable(t *testing.T) {
	t.Parallel()
	const (
		items    = 60
		shards   = 16
		interval = 300 * time.Millisecond
		pause    = 8 * time.Second
	)
	c := redistest.StartCluster(t, 3, 0)
	ctx := t.Context()
	for _, n := range c.Nodes() {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var logs logBuffer
	cfg := store.Config{Addrs: c.Addrs(), Cluster: true, KeyPrefix: "cu", Shards: shards,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		Logger: logs.logger(zerolog.InfoLevel)}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%02d", i)
	}
	if _, err := st.Add(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	for sh := range shards {
		if _, err := st.MarkEpoch(ctx, sh, 0); err != nil {
			t.Fatal(err)
		}
	}
	victim := c.Masters(t)[0]
	down := map[int]bool{}
	for _, sh := range shardsOn(t, c, victim, cfg.KeyPrefix, shards) {
		down[sh] = true
	}
	var healthy []string
	for _, id := range ids {
		if !down[st.Keys().Shard(id)] {
			healthy = append(healthy, id)
		}
	}
	if len(down) == 0 || len(healthy) == 0 {
		t.Fatalf("shards %v on the victim, %d items elsewhere: the test needs both", down, len(healthy))
	}

	checker := newFenceChecker(func() time.Duration { return time.Millisecond })
	e, err := engine.New(st, checker.sink(0), engine.Config{Workers: 4, Interval: interval, Poll: 20 * time.Millisecond,
		MaxAttempts: 1000, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, DrainTimeout: time.Second,
		Ownership: ownership.Config{TTL: 3 * time.Second}, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	syncedSince := func(t0 time.Time, of []string) int {
		want := map[string]bool{}
		for _, id := range of {
			want[id] = true
		}
		seen := map[string]bool{}
		for _, s := range checker.snapshot() {
			if s.accepted && s.start.After(t0) && want[s.id] {
				seen[s.id] = true
			}
		}
		return len(seen)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "every item synced", func() bool { return syncedSince(start, ids) == items })

	victim.Pause(t)
	paused := time.Now()
	within := time.Duration(0)
	for time.Since(paused) < pause && within == 0 {
		if syncedSince(paused, healthy) == len(healthy) {
			within = time.Since(paused)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := syncedSince(paused, healthy)
	var onVictim []string
	for _, id := range ids {
		if down[st.Keys().Shard(id)] {
			onVictim = append(onVictim, id)
		}
	}
	// The engine names the paused master's shards (for /readyz).
	var away []int
	for _, err := range e.OutOfReach() {
		var sh int
		if _, err := fmt.Sscanf(err.Error(), "shard %d out of reach", &sh); err == nil {
			away = append(away, sh)
		}
	}
	// The monitor leaves the shards out of reach out of its reads too: the
	// backlog gauges go on for the other masters' shards (before, every
	// read waited on the paused master and failed, redis_up read 0 and
	// the gauges went stale for the whole pause).
	// A read begun before the scheduler found the master out of reach
	// waits out the monitor's timeout (2 s): sample after that.
	waitFor(t, 5*time.Second, "the paused master's shards out of reach", func() bool { return len(e.OutOfReach()) >= len(down) })
	time.Sleep(2500 * time.Millisecond)
	var down0, samples int
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); samples++ {
		if e.Metrics().RedisUp.Load() != 1 {
			down0++
		}
		time.Sleep(50 * time.Millisecond)
	}
	// None can be claimed while the master is paused. A claim it answered
	// just before the pause may start its sync just after it (claimed
	// ahead, or its reply still on the wire), so count from a second on:
	// the pause lasts seconds and the items fall due every 300 ms, so a
	// pause that did not take hold shows many syncs after that.
	stuck := syncedSince(paused.Add(time.Second), onVictim)
	held := time.Since(paused)
	victim.Resume(t)
	resumed := time.Now()
	waitFor(t, 30*time.Second, "every item synced after the pause", func() bool { return syncedSince(resumed, ids) == items })
	t.Logf("master %s (shards %v) paused %v: %d of the other masters' %d items synced again within %v; every item synced %v after the resume; store errors logged: %s",
		victim.Addr(), slices.Sorted(maps.Keys(down)), held.Round(time.Millisecond), got, len(healthy), within.Round(time.Millisecond),
		time.Since(resumed).Round(time.Millisecond), errorKinds(logs.String()))
	if want := slices.Sorted(maps.Keys(down)); !slices.Equal(away, want) {
		t.Errorf("OutOfReach during the pause names shards %v, want the paused master's %v", away, want)
	}
	if stuck > 0 {
		t.Errorf("%d items of the paused master's shards synced during the pause", stuck)
	}
	if down0 > 0 {
		t.Errorf("with the paused master's shards out of reach, redis_up read 0 in %d of %d samples over 1.5 s: the monitor's backlog read waits on that master (%s)", down0, samples,
			strings.Join(grepLines(logs.String(), "cannot read the backlog"), "; "))
	}
	if got < len(healthy) {
		t.Errorf("with one master paused, %d of the other masters' %d items synced in %v: one unreachable master held up the rest", got, len(healthy), pause)
	}
	if r := checkFences(checker.snapshot()); r.fenceDown > 0 {
		t.Errorf("%d syncs ran with a fence not above an earlier claim's: %v", r.fenceDown, r.examples)
	}
}
