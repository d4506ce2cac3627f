package redistest_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// failoverTimeout is generous: failovers here take a few seconds, but the
// machine may be busy with other packages' tests.
const failoverTimeout = 30 * time.Second

func TestRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		aof  bool
		kill bool // Kill before Restart; otherwise Restart kills
		want string
	}{
		{name: "aof keeps key", aof: true, kill: true, want: "v"},
		{name: "aof keeps key when restarted while running", aof: true, want: "v"},
		{name: "no aof loses key", kill: true, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, &redistest.Options{AOF: tt.aof})
			addr, dir := srv.Addr(), srv.Dir()
			if !strings.HasPrefix(addr, "127.0.0.1:") || !strings.HasSuffix(addr, fmt.Sprint(":", srv.Port())) {
				t.Errorf("Addr() = %q, Port() = %d", addr, srv.Port())
			}
			rdb := srv.Client(t)
			if err := rdb.Set(t.Context(), "restart:k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}

			if tt.kill {
				srv.Kill(t)
				if srv.Running() {
					t.Fatal("Running() = true after Kill")
				}
				if conn, err := net.Dial("tcp", addr); err == nil {
					conn.Close()
					t.Fatal("a killed server accepts connections")
				}
				srv.Kill(t) // killing a dead server is harmless
			}
			srv.Restart(t)
			if !srv.Running() {
				t.Fatal("Running() = false after Restart")
			}
			if srv.Addr() != addr || srv.Dir() != dir {
				t.Errorf("after Restart: %s in %s, want %s in %s", srv.Addr(), srv.Dir(), addr, dir)
			}

			got, err := rdb.Get(t.Context(), "restart:k").Result()
			if errors.Is(err, redis.Nil) {
				got, err = "", nil
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("GET after restart (-got +want):\n%s", diff)
			}
			if !strings.Contains(srv.LogTail(5), "Ready to accept connections") {
				t.Errorf("LogTail(5) does not show the restart:\n%s", srv.LogTail(5))
			}
		})
	}
}

func TestRestartWaitsForPort(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, &redistest.Options{AOF: true})
	srv.Kill(t)
	// Another process takes the port while the server is down, and gives
	// it back a little later.
	l, err := net.Listen("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(150*time.Millisecond, func() { l.Close() })
	srv.Restart(t)
	if err := srv.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if log := srv.LogTail(100); !strings.Contains(log, "Address already in use") {
		t.Errorf("Restart never met the taken port; log:\n%s", log)
	}
}

// fatalTB records a fatal failure instead of failing the test, so that
// tests can check the helpers' failure messages.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalMessage runs fn and returns the message it failed with, or "".
func fatalMessage(t *testing.T, fn func(testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	return tb.msg
}

// Not parallel: it empties PATH for the whole process.
func TestStartWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	got := fatalMessage(t, func(tb testing.TB) { redistest.Start(tb, nil) })
	want := "redis-server not found on PATH: install Debian's redis-server (make test does)"
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("failure (-got +want):\n%s", diff)
	}
}

func TestStartBadConfig(t *testing.T) {
	t.Parallel()
	got := fatalMessage(t, func(tb testing.TB) {
		redistest.Start(tb, &redistest.Options{Config: []string{"no-such-directive 1"}})
	})
	for _, want := range []string{"exited during startup", "no-such-directive"} {
		if !strings.Contains(got, want) {
			t.Errorf("failure message does not contain %q:\n%s", want, got)
		}
	}
	// Redis 7.0's words, and 8.0's.
	if !strings.Contains(got, "FATAL CONFIG FILE ERROR") && !strings.Contains(got, "Unresolved Configuration") {
		t.Errorf("failure message does not show the server's complaint:\n%s", got)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, &redistest.Options{
		Password: "s3 cret",
		Config:   []string{"maxmemory-policy allkeys-lru"},
	})
	got, err := srv.Client(t).ConfigGet(t.Context(), "maxmemory-policy").Result()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, map[string]string{"maxmemory-policy": "allkeys-lru"}); diff != "" {
		t.Errorf("CONFIG GET (-got +want):\n%s", diff)
	}
	anon := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer anon.Close()
	if err := anon.Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without password: %v, want NOAUTH", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	rdb := redis.NewClient(&redis.Options{
		Addr:         srv.Addr(),
		ReadTimeout:  200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}

	srv.Pause(t)
	if !srv.Running() {
		t.Error("Running() = false while paused")
	}
	err := rdb.Ping(t.Context()).Err()
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("PING while paused: %v, want a timeout", err)
	}

	srv.Resume(t)
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	srv.Pause(t) // cleanup and Kill must cope with a paused server
	srv.Kill(t)
	if srv.Running() {
		t.Error("Running() = true after Kill of a paused server")
	}
}

func TestReplica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, &redistest.Options{Password: "pw"})
	replica := redistest.Start(t, &redistest.Options{ReplicaOf: master, Password: "pw"})

	m := master.Client(t)
	if err := m.Set(t.Context(), "replica:k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := m.Wait(t.Context(), 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas, %v", n, err)
	}
	got, err := replica.Client(t).Get(t.Context(), "replica:k").Result()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, "v"); diff != "" {
		t.Errorf("GET on replica (-got +want):\n%s", diff)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, nil)
	replica := redistest.Start(t, &redistest.Options{ReplicaOf: master})
	sentinels := redistest.StartSentinels(t, master, 3, "mymaster")
	if got := len(sentinels.Addrs()); got != 3 {
		t.Fatalf("%d sentinels, want 3", got)
	}
	if got := sentinels.WaitForMaster(t, "mymaster", "", time.Second); got != master.Addr() {
		t.Fatalf("master before failover = %s, want %s", got, master.Addr())
	}

	start := time.Now()
	master.Kill(t)
	got := sentinels.WaitForMaster(t, "mymaster", master.Addr(), failoverTimeout)
	t.Logf("sentinel failover took %v", time.Since(start).Round(time.Millisecond))
	if got != replica.Addr() {
		t.Fatalf("WaitForMaster = %s, want the replica %s", got, replica.Addr())
	}
	role, err := replica.Client(t).Do(t.Context(), "ROLE").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if role[0] != "master" {
		t.Errorf("ROLE of the promoted replica = %v, want master", role)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3, 0)
	if got := len(cluster.Nodes()); got != 3 {
		t.Fatalf("%d nodes, want 3", got)
	}
	masters := cluster.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}

	rdb := cluster.Client(t)
	const keys = 100
	for i := range keys {
		if err := rdb.Set(t.Context(), fmt.Sprint("cluster:", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for _, m := range masters {
		n, err := m.Client(t).DBSize(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("master %s holds no keys", m.Addr())
		}
		total += n
	}
	if total != keys {
		t.Errorf("masters hold %d keys, want %d", total, keys)
	}
	for i := range keys {
		got, err := rdb.Get(t.Context(), fmt.Sprint("cluster:", i)).Int()
		if err != nil || got != i {
			t.Fatalf("GET cluster:%d = %d, %v", i, got, err)
		}
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3, 1)
	if got := len(cluster.Nodes()); got != 6 {
		t.Fatalf("%d nodes, want 6", got)
	}
	rdb := cluster.Client(t)
	const key = "failover:k"
	if err := rdb.Set(t.Context(), key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	owner, err := rdb.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var victim *redistest.Server
	for _, m := range cluster.Masters(t) {
		if m.Addr() == owner.Options().Addr {
			victim = m
		}
	}
	if victim == nil {
		t.Fatalf("owner %s of %q is not among Masters", owner.Options().Addr, key)
	}
	// Make sure the replica has the key before its master dies.
	if n, err := victim.Client(t).Wait(t.Context(), 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas, %v", n, err)
	}

	start := time.Now()
	victim.Kill(t)
	cluster.WaitHealthy(t, failoverTimeout)
	t.Logf("cluster failover took %v", time.Since(start).Round(time.Millisecond))
	masters := cluster.Masters(t)
	if len(masters) != 3 {
		t.Errorf("%d masters after failover, want 3", len(masters))
	}
	for _, m := range masters {
		if m == victim {
			t.Errorf("killed node %s is still a master", victim.Addr())
		}
	}

	// The client finds the new master after its next slot-map reload.
	var got string
	deadline := time.Now().Add(failoverTimeout)
	for got, err = rdb.Get(t.Context(), key).Result(); err != nil; got, err = rdb.Get(t.Context(), key).Result() {
		if time.Now().After(deadline) {
			t.Fatalf("GET %q after failover: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if diff := cmp.Diff(got, "v"); diff != "" {
		t.Errorf("GET after failover (-got +want):\n%s", diff)
	}

	// The old master rejoins as a replica.
	victim.Restart(t)
	cluster.WaitHealthy(t, failoverTimeout)
	for _, m := range cluster.Masters(t) {
		if m == victim {
			t.Errorf("restarted node %s is a master again", victim.Addr())
		}
	}
}

func TestLaunchCluster(t *testing.T) {
	t.Parallel()
	cluster, stop, err := redistest.LaunchCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stop()
		}
	})
	nodes := cluster.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes))
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	defer rdb.Close()
	if err := rdb.Set(t.Context(), "launched", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, n := range nodes {
		if n.Pid() <= 0 {
			t.Errorf("node %s: Pid() = %d", n.Addr(), n.Pid())
		}
		pids = append(pids, n.Pid())
	}
	stopped = true
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if n.Running() {
			t.Errorf("node %s (pid %d) still running after stop", n.Addr(), pids[i])
		}
		if _, err := os.Stat(n.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node %s: data directory %s: %v, want it removed", n.Addr(), n.Dir(), err)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestLaunchClusterRefusesTwoMasters(t *testing.T) {
	t.Parallel()
	_, _, err := redistest.LaunchCluster(2, 0)
	if err == nil || !strings.Contains(err.Error(), "at least 3 masters") {
		t.Fatalf("LaunchCluster(2, 0) = %v, want an error about at least 3 masters", err)
	}
}

// FillMemory leaves the server refusing writes with OOM, and its free
// function lets it take them again.
func TestFillMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	rdb := srv.Client(t)
	free := srv.FillMemory(t)
	if err := rdb.Set(t.Context(), "k", "v", 0).Err(); !redis.IsOOMError(err) {
		t.Errorf("SET after FillMemory: %v, want OOM", err)
	}
	if err := rdb.Get(t.Context(), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after FillMemory: %v, want redis.Nil: reads go through", err)
	}
	free()
	if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Errorf("SET after free: %v", err)
	}
}
