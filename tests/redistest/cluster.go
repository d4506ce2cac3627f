package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterCreateTimeout bounds redis-cli --cluster create, which polls
	// once a second until the nodes agree.
	clusterCreateTimeout = 60 * time.Second
	// clusterReadyTimeout bounds the wait for a new cluster to settle.
	clusterReadyTimeout = 30 * time.Second
)

// Cluster is a Redis Cluster of cluster-enabled servers on loopback ports,
// started by StartCluster. Its nodes use cluster-node-timeout 1000, so a
// replica takes over a killed master within a few seconds.
type Cluster struct {
	nodes    []*Server
	replicas int // configured replicas per master
}

// StartCluster starts masters*(1+replicasPerMaster) cluster nodes, joins
// them with redis-cli --cluster create (which spreads the 16384 slots
// evenly over the masters), and waits until every node reports
// cluster_state:ok, all agree on the slot owners, and every replica's link
// to its master is up. redis-cli needs at least 3 masters.
func StartCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	return startCluster(t, masters, replicasPerMaster)
}

// startCluster is StartCluster for any tb.
func startCluster(t tb, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	if masters < 3 || replicasPerMaster < 0 {
		t.Fatalf("redistest: StartCluster(%d, %d): need at least 3 masters and no negative replicas", masters, replicasPerMaster)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found on PATH: install Debian's redis-tools (make test does)")
	}
	c := &Cluster{replicas: replicasPerMaster}
	for range masters * (1 + replicasPerMaster) {
		c.nodes = append(c.nodes, startServer(t, Options{Cluster: true}))
	}

	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, out, c.tails())
	}

	if err := poll(clusterReadyTimeout, func() (bool, string) { return c.health(true) }); err != nil {
		t.Fatalf("redistest: StartCluster: %v\n%s", err, c.tails())
	}
	return c
}

// Addrs returns the addresses of all nodes, in Nodes order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns every node of the cluster, masters and replicas, whatever
// their current role.
func (c *Cluster) Nodes() []*Server {
	return slices.Clone(c.nodes)
}

// Masters returns the nodes that currently serve slots and are not marked
// failed, in Nodes order, as CLUSTER NODES on the first running, unpaused
// node reports them. Right after a fault that view may still be stale;
// call WaitHealthy first.
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	for _, n := range c.nodes {
		if !n.answering() {
			continue
		}
		view, err := clusterNodes(n.Addr(), n.password)
		if err != nil {
			t.Fatalf("redistest: Masters: %v", err)
		}
		var masters []*Server
		for _, m := range c.nodes {
			if e, ok := view[m.port]; ok && e.serving() {
				masters = append(masters, m)
			}
		}
		return masters
	}
	t.Fatal("redistest: Masters: no cluster node is running")
	return nil
}

// Client returns a cluster client seeded with every node's address that
// reloads the slot map every second, so it follows failovers quickly. It
// is closed in t's cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      c.Addrs(),
		ClusterStateReloadInterval: time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// WaitHealthy waits until every running, unpaused node reports
// cluster_state:ok, they all agree on which masters serve which slots,
// each of those masters is a running, unpaused node, and every replica
// among them has its replication link up. After killing a master this
// means a replica has taken over its slots. It fails the test, with the
// nodes' logs, after timeout.
func (c *Cluster) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := poll(timeout, func() (bool, string) { return c.health(false) }); err != nil {
		t.Fatalf("redistest: WaitHealthy: %v\n%s", err, c.tails())
	}
}

// health checks the cluster as WaitHealthy describes. initial adds the
// checks for a new cluster: every node knows every other, and the
// configured number of replicas is in place.
func (c *Cluster) health(initial bool) (bool, string) {
	byPort := map[int]*Server{}
	for _, n := range c.nodes {
		byPort[n.port] = n
	}
	var firstView string
	for _, n := range c.nodes {
		if !n.answering() {
			continue
		}
		m, err := clusterInfo(n.Addr(), n.password, adminTimeout)
		if err != nil {
			return false, fmt.Sprintf("node %s: %v", n.Addr(), err)
		}
		if m["cluster_state"] != "ok" {
			return false, fmt.Sprintf("node %s: cluster_state:%s", n.Addr(), m["cluster_state"])
		}
		if initial && m["cluster_known_nodes"] != strconv.Itoa(len(c.nodes)) {
			return false, fmt.Sprintf("node %s: cluster_known_nodes:%s, want %d", n.Addr(), m["cluster_known_nodes"], len(c.nodes))
		}
		view, err := clusterNodes(n.Addr(), n.password)
		if err != nil {
			return false, err.Error()
		}
		var owners []string
		replicas := 0
		for port, e := range view {
			if e.serving() {
				owners = append(owners, strconv.Itoa(port)+":"+strings.Join(e.slots, ","))
				if o := byPort[port]; o == nil || !o.answering() {
					return false, fmt.Sprintf("node %s: slots served by %d, which is down", n.Addr(), port)
				}
			}
			if e.flags["slave"] && !e.flags["fail"] {
				replicas++
			}
		}
		slices.Sort(owners)
		v := strings.Join(owners, " ")
		if firstView == "" {
			firstView = v
		} else if v != firstView {
			return false, fmt.Sprintf("node %s sees slot owners %q, another node %q", n.Addr(), v, firstView)
		}
		if want := len(c.nodes) / (1 + c.replicas) * c.replicas; initial && replicas != want {
			return false, fmt.Sprintf("node %s: %d replicas, want %d", n.Addr(), replicas, want)
		}
		if view[n.port].flags["slave"] {
			r, err := info(n.Addr(), n.password, adminTimeout, "replication")
			if err != nil {
				return false, fmt.Sprintf("node %s: %v", n.Addr(), err)
			}
			if r["master_link_status"] != "up" {
				return false, fmt.Sprintf("replica %s: master_link_status:%s", n.Addr(), r["master_link_status"])
			}
		}
	}
	if firstView == "" {
		return false, "no cluster node is running"
	}
	return true, ""
}

// nodeEntry is one line of CLUSTER NODES.
type nodeEntry struct {
	flags map[string]bool // master, slave, myself, fail, fail?, ...
	slots []string        // "0-5460", "5461"; migration entries left out
}

// serving reports whether the node is a master that serves slots and is
// not marked failed.
func (e nodeEntry) serving() bool {
	return e.flags["master"] && !e.flags["fail"] && len(e.slots) > 0
}

// clusterNodes returns addr's CLUSTER NODES view, keyed by port.
func clusterNodes(addr, password string) (map[int]nodeEntry, error) {
	s, err := doString(addr, password, adminTimeout, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("node %s: CLUSTER NODES: %w", addr, err)
	}
	view := map[int]nodeEntry{}
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
		// <pong-recv> <config-epoch> <link-state> <slot> ...
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		hostPort, _, _ := strings.Cut(f[1], "@")
		i := strings.LastIndexByte(hostPort, ':')
		port, err := strconv.Atoi(hostPort[i+1:])
		if err != nil || port == 0 { // port 0: a node still in handshake
			continue
		}
		e := nodeEntry{flags: map[string]bool{}}
		for _, fl := range strings.Split(f[2], ",") {
			e.flags[fl] = true
		}
		for _, sl := range f[8:] {
			if !strings.HasPrefix(sl, "[") {
				e.slots = append(e.slots, sl)
			}
		}
		view[port] = e
	}
	return view, nil
}

func (c *Cluster) tails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "--- node %s\n%s", n.Addr(), n.LogTail(10))
	}
	return b.String()
}
