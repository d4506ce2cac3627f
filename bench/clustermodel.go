package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The scale-out model of the cluster section's report: throughput
// against masters and shards, computed from the run's per-item Redis
// CPU and the key slots of the shards' hash tags.

// ModelMasters and ModelShards are the model's grid.
var (
	ModelMasters = []int{1, 3, 10, 16, 32, 64, 100}
	ModelShards  = []int{16, 64, 256, 1024}
)

// ModelDaemons is the fleet size the head-read cost is shown for.
const ModelDaemons = 100

// perItem is d per item synced in x, in µs.
func perItem(d time.Duration, x E2ERun) float64 { return us(d) / float64(max(x.Done, 1)) }

// med is the median of f over a row's runs.
func (c *ClusterResults) med(name string, f func(E2ERun) float64) float64 {
	row := c.row(name)
	if row == nil {
		return spreadOf(nil).Med
	}
	return spreadOf(mapRuns(row.Runs, f)).Med
}

// ratio is the Cluster's rate over the one server's, per repetition.
func (c *ClusterResults) ratio() Spread {
	a, b := c.row("single"), c.row("cluster")
	if a == nil || b == nil {
		return spreadOf(nil)
	}
	return runRatio(b.Runs, a.Runs)
}

// masterOf is the index of the master whose ranges hold slot, or -1.
func (c *ClusterResults) masterOf(slot int) int {
	for i, rs := range c.Ranges {
		for _, r := range rs {
			if slot >= r[0] && slot <= r[1] {
				return i
			}
		}
	}
	return -1
}

// shardsOn lists, per master of the local Cluster, the shards whose tag
// slot it serves.
func (c *ClusterResults) shardsOn() [][]int {
	out := make([][]int, len(c.Ranges))
	for k := range c.Shards {
		if i := c.masterOf(c.TagSlots[k]); i >= 0 {
			out[i] = append(out[i], k)
		}
	}
	return out
}

// createdAsModelled reports whether the local Cluster's slot ranges are
// those createRanges gives, i.e. the model's split is the real one.
func (c *ClusterResults) createdAsModelled() bool {
	first := createRanges(len(c.Ranges))
	var got [][2]int
	for _, rs := range c.Ranges {
		got = append(got, rs...)
	}
	slices.SortFunc(got, func(a, b [2]int) int { return a[0] - b[0] })
	if len(got) != len(first)-1 {
		return false
	}
	for i, r := range got {
		if r[0] != first[i] || r[1] != first[i+1]-1 {
			return false
		}
	}
	return true
}

// modelCell is the model at m masters and s shards: the Redis-side
// ceiling in items/s, the shards on the busiest master and how many
// masters hold any shard.
type modelCell struct {
	ceiling       float64
	busiest, used int
}

// model is the Redis-side ceiling with m masters and s shards, for a
// per-item Redis cost of perItemUs: items spread evenly over the shards
// (FNV-1a of the id), each shard's work on the one master that serves
// its tag's slot, one core per master; the busiest master saturates
// first.
func (c *ClusterResults) model(perItemUs float64, m, s int) modelCell {
	counts := shardsPerMaster(c.TagSlots, s, m)
	cell := modelCell{busiest: slices.Max(counts)}
	for _, n := range counts {
		if n > 0 {
			cell.used++
		}
	}
	cell.ceiling = 1e6 / perItemUs * float64(s) / float64(cell.busiest)
	return cell
}

// clusterHeadline is the headline line of the cluster section.
func clusterHeadline(b *md, c *ClusterResults) {
	r1 := c.med("single", func(x E2ERun) float64 { return perItem(x.W.RedisCPU, x) })
	rc := c.med("cluster", func(x E2ERun) float64 { return perItem(x.W.RedisCPU, x) })
	on := c.shardsOn()
	busiest := 0
	for _, s := range on {
		busiest = max(busiest, len(s))
	}
	top := c.model(r1, ModelMasters[len(ModelMasters)-1], ModelShards[len(ModelShards)-1])
	def := c.model(r1, ModelMasters[len(ModelMasters)-1], c.Shards)
	b.p("- Scale-out (%d workers, %d shards): one redis-server %s items/s at %.1f µs of Redis CPU per item; a local %d-master Cluster %s items/s (%s) at %.1f µs per item summed over the masters, the busiest master holding %d of %d shards. Model: %s items/s per master core; at %d masters, %s with %d shards, %s with %d.",
		c.Workers, c.Shards, fmtRate(c.med("single", E2ERun.Rate)), r1, len(c.Ranges), fmtRate(c.med("cluster", E2ERun.Rate)),
		ratioSpread(c.ratio()), rc, busiest, c.Shards, fmtRate(1e6/r1), ModelMasters[len(ModelMasters)-1],
		fmtRate(def.ceiling), c.Shards, fmtRate(top.ceiling), ModelShards[len(ModelShards)-1])
}

// clusterSection writes section 4c: the measurement and the model.
func clusterSection(b *md, c *ClusterResults, ncpu int) {
	masters := len(c.Ranges)
	b.p("## 4c. Scale-out: one redis-server against a local Redis Cluster")
	b.nl()
	b.p("The engine as in section 4 (`engine.New` + `Start`, a no-op `sinks.Func`, %d workers, settle 0, the default target, %d shards, %d items pre-added, `SyncsOK` over a %v window after %v) against (a) the run's redis-server and (b) a Redis Cluster of %d masters without replicas on loopback ports (`tests/redistest`: `redis-cli --cluster create`, no persistence), back to back in each repetition, the first of the two alternating. Redis CPU is read from `/proc/<pid>/stat` of every redis-server process and summed; the store reaches (b) through go-redis's cluster client.",
		c.Workers, c.Shards, c.Pool, c.Dur, c.Warm, masters)
	b.nl()
	var rows [][]string
	for _, row := range c.Rows {
		f := func(g func(E2ERun) float64) float64 { return spreadOf(mapRuns(row.Runs, g)).Med }
		ratio := "1"
		if row.Name == "cluster" {
			ratio = ratioSpread(c.ratio())
		}
		rows = append(rows, []string{row.Label, rateSpread(spreadOf(mapRuns(row.Runs, E2ERun.Rate))) + exhausted(&E2ERow{Runs: row.Runs}), ratio,
			numSpread(spreadOf(mapRuns(row.Runs, func(x E2ERun) float64 { return perItem(x.W.RedisCPU, x) })), "%.1f"),
			fmt.Sprintf("%.1f", f(func(x E2ERun) float64 { return perItem(x.W.CPU, x) })),
			fmt.Sprintf("%.2f", f(func(x E2ERun) float64 { return float64(x.W.RoundTrips) / float64(max(x.Done, 1)) })),
			fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", f(func(x E2ERun) float64 { return cores(x.W.CPU, x.W) }),
				f(func(x E2ERun) float64 { return cores(x.W.RedisCPU, x.W) }), f(func(x E2ERun) float64 { return cores(x.W.Foreign(), x.W) }),
				f(func(x E2ERun) float64 { return cores(x.W.HostIdle, x.W) })),
		})
	}
	b.table([]string{"Redis", "items/s", "of (a)", "Redis CPU µs/item", "client CPU µs/item", "round trips/item", "cores: client / Redis / other / idle"}, rows)

	on := c.shardsOn()
	cl := c.row("cluster")
	total := c.med("cluster", func(x E2ERun) float64 { return perItem(x.W.RedisCPU, x) })
	rows = nil
	for i := range masters {
		var rs, ks []string
		for _, r := range c.Ranges[i] {
			rs = append(rs, fmt.Sprintf("%d–%d", r[0], r[1]))
		}
		for _, k := range on[i] {
			ks = append(ks, strconv.Itoa(k))
		}
		per := spreadOf(mapRuns(cl.Runs, func(x E2ERun) float64 {
			if i >= len(x.W.RedisCPUs) {
				return spreadOf(nil).Med
			}
			return perItem(x.W.RedisCPUs[i], x)
		})).Med
		rows = append(rows, []string{fmt.Sprint(i + 1), strings.Join(rs, ", "),
			fmt.Sprintf("%d (%s)", len(on[i]), strings.Join(ks, " ")), fmt.Sprintf("%.0f%%", 100*float64(len(on[i]))/float64(c.Shards)),
			fmt.Sprintf("%.1f", per), fmt.Sprintf("%.0f%%", 100*per/total)})
	}
	b.p("Per master of (b): the slots it serves, the shards whose hash tag `{s<k>}` falls in them (`CLUSTER KEYSLOT`), and its Redis CPU per item synced (medians).")
	b.nl()
	b.table([]string{"master", "slots", "shards", "of the shards", "Redis CPU µs/item", "of the Redis CPU"}, rows)
	clusterModel(b, c, ncpu)
}

// clusterModel writes the model of throughput against masters and
// shards, and what this machine can show of it.
func clusterModel(b *md, c *ClusterResults, ncpu int) {
	masters := len(c.Ranges)
	a := c.row("single")
	r1 := c.med("single", func(x E2ERun) float64 { return perItem(x.W.RedisCPU, x) })
	rc := c.med("cluster", func(x E2ERun) float64 { return perItem(x.W.RedisCPU, x) })
	c1 := 1e6 / r1
	b.p("### A model: throughput against masters and shards")
	b.nl()
	b.p("- **Per master.** One item synced cost %.1f µs of Redis CPU on (a). Redis runs commands on one thread, so one master tops out near 1 core / %.1f µs = **%s items/s**. On (b) the masters together spent %.1f µs per item (%.2fx of (a)); what can add to it there: the cluster client splits each pipeline by node, so each master gets smaller batches, and %d masters and the client take turns on %d cores.",
		r1, r1, fmtRate(c1), rc, rc/r1, len(c.Ranges), ncpu)
	split := "even contiguous ranges, as `redis-cli --cluster create` splits the slots (the local Cluster's ranges are exactly that split)"
	if !c.createdAsModelled() {
		split = "even contiguous ranges, as `redis-cli --cluster create` splits the slots (the local Cluster's ranges differ from that split: see the table above)"
	}
	b.p("- **Per shard.** Every key of shard k carries the hash tag `{s<k>}`, so all of a shard's work goes to the one master that serves that slot, and items spread evenly over the shards (FNV-1a of the id). The busiest master saturates first: the fleet's Redis ceiling is %s × shards / (shards on the busiest master). More masters than shards add nothing: the masters beyond the shards get no items. The table spreads the real slots of `{s0}`…`{s1023}` over masters holding %s, at (a)'s cost per item. In brackets: shards on the busiest master / shards, and masters that hold any.", fmtRate(c1), split)
	b.nl()
	head := []string{"masters"}
	for _, s := range ModelShards {
		l := fmt.Sprintf("%d shards", s)
		if s == c.Shards {
			l += " (default)"
		}
		head = append(head, l)
	}
	var rows [][]string
	for _, m := range ModelMasters {
		row := []string{fmt.Sprint(m)}
		for _, s := range ModelShards {
			if s > len(c.TagSlots) {
				row = append(row, "–")
				continue
			}
			cell := c.model(r1, m, s)
			row = append(row, fmt.Sprintf("%s (%d/%d, %d)", fmtRate(cell.ceiling), cell.busiest, s, cell.used))
		}
		rows = append(rows, row)
	}
	b.table(head, rows)

	// Head reads: every daemon reads every shard's head, whatever the
	// item rate.
	reads := c.med("single", func(x E2ERun) float64 { return float64(x.W.ByName["zrange"]) / x.W.Wall.Seconds() })
	zr := c.med("single", func(x E2ERun) float64 {
		s := x.W.Redis["zrange"]
		return float64(s.Usec) / float64(max(s.Calls, 1))
	})
	perShard := reads / float64(c.Shards)
	top := c.model(r1, ModelMasters[len(ModelMasters)-1], ModelShards[len(ModelShards)-1])
	headCores := ModelDaemons * perShard * float64(top.busiest) * zr / 1e6
	global := c.med("single", func(x E2ERun) float64 {
		n := x.W.ByName["daemon_write.lua"]
		for _, s := range []string{"target_admit.lua", "target_extend.lua", "target_report.lua", "target_state.lua"} {
			n += x.W.ByName[s]
		}
		return 1000 * float64(n) / float64(max(x.Done, 1))
	})
	b.p("- **What does not spread.** Each daemon reads the head of every shard (`Store.Oldest`, one ZRANGE per shard) at most every 20 ms, whatever its item rate: %.0f ZRANGEs/s in (a), %.0f per shard, at %.1f µs of Redis each. With %d shards over %d masters and %d daemons, the busiest master (%d shards) would spend %.2f cores on head reads alone, on top of its items. The `{daemons}` registry and the target's `{target}` keys sit on one master each: %.2f script calls per 1000 items in (a) (`daemon_write.lua`, `target_*.lua`), per daemon and per second rather than per item.",
		reads, perShard, zr, ModelShards[len(ModelShards)-1], ModelMasters[len(ModelMasters)-1], ModelDaemons, top.busiest, headCores, global)
	client := c.med("single", func(x E2ERun) float64 { return perItem(x.W.CPU, x) })
	def := c.model(r1, ModelMasters[len(ModelMasters)-1], c.Shards)
	rate := c.med("single", E2ERun.Rate)
	b.p("- **The client side.** The daemon spent %.1f µs of CPU per item in (a) (engine, go-redis, the no-op sink) and synced %s items/s with %d workers. Daemons share nothing but Redis, so they scale out horizontally: a fleet at the Redis ceiling needs ceiling × %.1f µs of client CPU per second, e.g. %.0f cores of daemons (or %.0f daemons at (a)'s rate) for the %s items/s of %d masters with %d shards, %.0f cores (%.0f daemons) for the %s items/s of the default %d shards.",
		client, fmtRate(rate), c.Workers, client, top.ceiling*client/1e6, top.ceiling/rate, fmtRate(top.ceiling),
		ModelMasters[len(ModelMasters)-1], ModelShards[len(ModelShards)-1], def.ceiling*client/1e6, def.ceiling/rate, fmtRate(def.ceiling), c.Shards)
	use := func(f func(E2ERun) float64) float64 { return spreadOf(mapRuns(a.Runs, f)).Med }
	cl, rd := use(func(x E2ERun) float64 { return cores(x.W.CPU, x.W) }), use(func(x E2ERun) float64 { return cores(x.W.RedisCPU, x.W) })
	idle := use(func(x E2ERun) float64 { return cores(x.W.HostIdle, x.W) })
	var bound []string
	if rd < 0.9 {
		bound = append(bound, fmt.Sprintf("Redis used %.2f of its one core, so one daemon did not saturate one Redis: a Cluster cannot speed this daemon up, whatever the cores", rd))
	}
	if idle < 0.1*float64(ncpu) {
		bound = append(bound, "no core was idle")
	}
	if len(bound) == 0 {
		bound = append(bound, "the one Redis was near its core")
	}
	b.p("- **What this machine can show.** It has %d cores. In (a) the client took %.2f cores, Redis %.2f, other processes %.2f, and %.2f were idle: %s. In (b) the %d masters and the client share the same %d cores, so (b)/(a) = %s measures what the Cluster costs (client and Redis CPU per item, round trips) and how evenly the shards spread (the per-master table), not the speed-up. A speed-up needs a load that saturates one master, each master on a core of its own and the daemons on others; the ceilings above for more than one master are the model's extrapolation from (a)'s cost per item and the measured spread of the shards' slots, not measurements.",
		ncpu, cl, rd, use(func(x E2ERun) float64 { return cores(x.W.Foreign(), x.W) }), idle, strings.Join(bound, "; "),
		masters, ncpu, ratioSpread(c.ratio()))
	b.nl()
}
