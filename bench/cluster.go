package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// The cluster section (issue 13, scale-out): the engine end to end
// against the run's one redis-server and against a local Redis Cluster,
// back to back in each repetition, with Redis CPU per item summed over
// every redis-server process and split by master.
const (
	// ClusterMasters is the local Cluster's size: redis-cli's minimum.
	ClusterMasters = 3
	// ClusterWorkers is the engine's concurrency in both runs.
	ClusterWorkers = 64
	// ClusterSlots is Redis Cluster's key-slot count.
	ClusterSlots = 16384
)

// Cluster is a local Redis Cluster of masters without replicas, started
// with tests/redistest, measured as one Redis: command stats summed over
// the masters, CPU per master.
type Cluster struct {
	rc     *redistest.Cluster
	stop   func() error
	nodes  []*redistest.Server
	admins []*redis.Client // one per node, in nodes' order
}

// StartCluster starts a cluster of masters on loopback ports. Close it.
func StartCluster(masters int) (*Cluster, error) {
	rc, stop, err := redistest.LaunchCluster(masters, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	c := &Cluster{rc: rc, stop: stop, nodes: rc.Nodes()}
	for _, n := range c.nodes {
		c.admins = append(c.admins, redis.NewClient(&redis.Options{Addr: n.Addr(), PoolSize: 2}))
	}
	return c, nil
}

// Close kills the nodes and removes their directories.
func (c *Cluster) Close() error {
	var errs []error
	for _, a := range c.admins {
		errs = append(errs, a.Close())
	}
	return errors.Join(append(errs, c.stop())...)
}

// each runs f on every node's admin client.
func (c *Cluster) each(f func(*redis.Client) error) error {
	var errs []error
	for _, a := range c.admins {
		errs = append(errs, f(a))
	}
	return errors.Join(errs...)
}

// FlushAll empties every master, synchronously.
func (c *Cluster) FlushAll(ctx context.Context) error {
	return c.each(func(a *redis.Client) error { return a.Do(ctx, "flushall", "sync").Err() })
}

// ResetStats is CONFIG RESETSTAT on every master.
func (c *Cluster) ResetStats(ctx context.Context) error {
	return c.each(func(a *redis.Client) error { return a.ConfigResetStat(ctx).Err() })
}

// CommandStats is INFO commandstats summed over the masters.
func (c *Cluster) CommandStats(ctx context.Context) (map[string]CmdStat, error) {
	out := map[string]CmdStat{}
	err := c.each(func(a *redis.Client) error {
		m, err := commandStats(ctx, a)
		for k, v := range m {
			s := out[k]
			s.Calls += v.Calls
			s.Usec += v.Usec
			out[k] = s
		}
		return err
	})
	return out, err
}

// CPUs is each master's user+system CPU time so far, from /proc.
func (c *Cluster) CPUs() []time.Duration {
	out := make([]time.Duration, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = procCPU(n.Pid())
	}
	return out
}

// StoreConfig is how a store reaches the cluster.
func (c *Cluster) StoreConfig() store.Config {
	return store.Config{Addrs: c.rc.Addrs(), Cluster: true}
}

// slotRanges returns, per node (in nodes' order), the slot ranges it
// serves as master, from CLUSTER SHARDS.
func (c *Cluster) slotRanges(ctx context.Context) ([][][2]int, error) {
	shards, err := c.admins[0].ClusterShards(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("bench: CLUSTER SHARDS: %w", err)
	}
	idx := map[int]int{}
	for i, n := range c.nodes {
		idx[n.Port()] = i
	}
	out := make([][][2]int, len(c.nodes))
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" {
				continue
			}
			i, ok := idx[int(n.Port)]
			if !ok {
				return nil, fmt.Errorf("bench: CLUSTER SHARDS: master on port %d is not a node of ours", n.Port)
			}
			for _, r := range sh.Slots {
				out[i] = append(out[i], [2]int{int(r.Start), int(r.End)})
			}
		}
	}
	return out, nil
}

// tagSlots returns the key slot of the hash tag {s<k>} of every shard k
// below n, by CLUSTER KEYSLOT in one pipeline.
func (c *Cluster) tagSlots(ctx context.Context, n int) ([]int, error) {
	keys := store.NewKeys("e2e", n)
	cmds := make([]*redis.IntCmd, n)
	_, err := c.admins[0].Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range n {
			cmds[k] = p.ClusterKeySlot(ctx, keys.Due(k))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: CLUSTER KEYSLOT: %w", err)
	}
	out := make([]int, n)
	for k, c := range cmds {
		out[k] = int(c.Val())
	}
	return out, nil
}

// ClusterRow is one Redis deployment's runs.
type ClusterRow struct {
	Name    string // "single" or "cluster"
	Label   string
	Masters int
	Runs    []E2ERun
}

// ClusterResults hold the cluster section.
type ClusterResults struct {
	Rows            []*ClusterRow // the one server first, then the Cluster
	Workers, Shards int
	Pool            int
	Warm, Dur       time.Duration
	// Ranges are the slot ranges each master served (CLUSTER SHARDS), in
	// the order of the runs' RedisCPUs.
	Ranges [][][2]int
	// TagSlots[k] is the key slot of the hash tag {s<k>}, for every k
	// below store.ShardsMax: the model spreads shard counts over any
	// number of masters with it.
	TagSlots []int
}

func (c *ClusterResults) row(name string) *ClusterRow {
	for _, r := range c.Rows {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// RunCluster starts a local Cluster of ClusterMasters and measures the
// engine (ClusterWorkers, settle 0, the default shards and target) on srv
// and on the Cluster, back to back in each of reps repetitions, the
// first of the two alternating.
func RunCluster(ctx context.Context, srv *Server, reps, pool int, warm, dur time.Duration, logf func(string, ...any)) (*ClusterResults, error) {
	cl, err := StartCluster(ClusterMasters)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	logf("cluster: %d masters on %v", ClusterMasters, cl.rc.Addrs())
	res := &ClusterResults{Workers: ClusterWorkers, Shards: store.ShardsDefault, Pool: pool, Warm: warm, Dur: dur,
		Rows: []*ClusterRow{
			{Name: "single", Label: "(a) one redis-server", Masters: 1},
			{Name: "cluster", Label: fmt.Sprintf("(b) Redis Cluster, %d masters", ClusterMasters), Masters: ClusterMasters},
		}}
	targets := []engineTarget{srv, cl}
	for rep := range reps {
		for i := range targets {
			k := (rep + i) % len(targets)
			row := res.Rows[k]
			r, err := runEngine(ctx, targets[k], ClusterWorkers, 0, engine.TargetConfig{}, pool, warm, dur)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", row.Name, err)
			}
			per := ""
			for _, c := range r.W.RedisCPUs {
				per += " " + strconv.FormatFloat(us(c)/float64(max(r.Done, 1)), 'f', 1, 64)
			}
			logf("cluster rep %d %-28s %8.0f items/s, Redis µs/item %.1f (by process:%s) exhausted=%v",
				rep+1, row.Label, r.Rate(), us(r.W.RedisCPU)/float64(max(r.Done, 1)), per, r.Exhausted)
			row.Runs = append(row.Runs, r)
		}
	}
	if res.Ranges, err = cl.slotRanges(ctx); err != nil {
		return nil, err
	}
	if res.TagSlots, err = cl.tagSlots(ctx, store.ShardsMax); err != nil {
		return nil, err
	}
	srv.FlushAll(ctx)
	return res, nil
}

// createRanges splits the slots over m masters as redis-cli --cluster
// create does: master i gets the slots from first[i] to first[i+1]-1.
func createRanges(m int) []int {
	first := []int{0}
	per := float64(ClusterSlots) / float64(m)
	cursor := 0.0
	for i := range m {
		last := int(roundHalfAway(cursor + per - 1))
		if last > ClusterSlots-1 || i == m-1 {
			last = ClusterSlots - 1
		}
		last = max(last, first[i])
		first = append(first, last+1)
		cursor += per
	}
	return first
}

// roundHalfAway is C's lround.
func roundHalfAway(x float64) float64 {
	if x < 0 {
		return -float64(int(-x + 0.5))
	}
	return float64(int(x + 0.5))
}

// shardsPerMaster counts the shards (of the first shards tag slots) that
// fall on each of m masters split as createRanges(m) does.
func shardsPerMaster(tagSlots []int, shards, m int) []int {
	first := createRanges(m)
	out := make([]int, m)
	for _, slot := range tagSlots[:shards] {
		i := 0
		for i < m-1 && slot >= first[i+1] {
			i++
		}
		out[i]++
	}
	return out
}
