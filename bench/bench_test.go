package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// srv is one redis-server for the package's tests and benchmarks; nil
// when redis-server is not installed.
var srv *Server

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("redis-server"); err == nil {
		s, err := StartServer(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		srv = s
	}
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func needRedis(tb testing.TB) {
	tb.Helper()
	if srv == nil {
		tb.Skip("redis-server not installed (make deps)")
	}
}

func TestParseRedisBenchmark(t *testing.T) {
	out := "SET: rps=0.0 (overall: 0.0) avg_msec=-nan\r SET: rps=74120.0 (overall: 74000.1)\rSET: 74962.52 requests per second, p50=0.335 msec\n\n"
	r, err := parseRedisBenchmark(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS != 74962.52 || r.P50ms != 0.335 {
		t.Errorf("got %+v", r)
	}
	r, err = parseRedisBenchmark("evalsha e0e1f9fabfc9d4800c877a703b823ac0578ff8db 0: 65610.20 requests per second, p50=0.423 msec\n")
	if err != nil || r.RPS != 65610.20 {
		t.Errorf("custom command: %+v, %v", r, err)
	}
	if _, err := parseRedisBenchmark("ERR unknown command"); err == nil {
		t.Error("no error for output without a rate")
	}
}

func TestSpreadAndPercentile(t *testing.T) {
	s := spreadOf([]float64{3, 1, math.NaN(), 2, 10})
	if s.Med != 2.5 || s.Min != 1 || s.Max != 10 || s.N != 4 {
		t.Errorf("spread %+v", s)
	}
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := percentile(d, 50); got != 5 {
		t.Errorf("p50 %v", got)
	}
	if got := percentile(d, 99); got != 10 {
		t.Errorf("p99 %v", got)
	}
}

// Every lock implementation takes and releases a free lock, and refuses a
// held one.
func TestLockImplementations(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			impl, err := k.setup(ctx, srv.Addr(), "t"+k.name, []string{"a"}, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer impl.Close()
			for range 20 {
				ok, err := impl.Worker(0)(ctx, "a")
				if err != nil || !ok {
					t.Fatalf("cycle: ok %v, err %v", ok, err)
				}
			}
			w := runLoop(ctx, srv, impl.Counters, 2, 0, 100*time.Millisecond, func(g int) opFunc {
				c := impl.Worker(g)
				return func(ctx context.Context) (bool, error) { return c(ctx, "a") }
			})
			if w.Errs > 0 || w.OK == 0 {
				t.Errorf("two goroutines on one key: %d ok, %d busy, %d errors (%v)", w.OK, w.Fail, w.Errs, w.FirstErr)
			}
			// Auto-pipelined, the two goroutines' commands share round trips.
			if rt := w.PerOK(float64(w.W.RoundTrips)); rt < 1.5 && !autoPipelined(k.name) || rt == 0 {
				t.Errorf("%.2f round trips per cycle counted; the hook is not attached", rt)
			}
		})
	}
}

// BenchmarkLockCycle is the lock comparison in go test form, for
// benchstat: go test -run '^$' -bench LockCycle -count 6 | benchstat -.
func BenchmarkLockCycle(b *testing.B) {
	needRedis(b)
	ctx := context.Background()
	for _, k := range lockKinds {
		for _, par := range []int{1, 32} {
			// RunParallel runs par goroutines per GOMAXPROCS.
			g := par * runtime.GOMAXPROCS(0)
			b.Run(fmt.Sprintf("%s/goroutines=%d", k.name, g), func(b *testing.B) {
				sc := LockScenario{G: g, Keys: g}
				keys := lockKeys(sc)
				impl, err := k.setup(ctx, srv.Addr(), fmt.Sprintf("b%s%d", k.name, g), keys, g)
				if err != nil {
					b.Fatal(err)
				}
				defer impl.Close()
				var next atomic.Int64
				b.SetParallelism(par)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(1) - 1)
					cycle, key := impl.Worker(i), keys[i%len(keys)]
					for pb.Next() {
						if ok, err := cycle(ctx, key); err != nil || !ok {
							b.Errorf("cycle on %s: ok %v, err %v", key, ok, err)
							return
						}
					}
				})
			})
		}
	}
}

// Every target variant is a valid engine configuration: a limit out of
// TargetConfig's bounds would fail engine.New in the middle of a run.
func TestTargetVariantsValid(t *testing.T) {
	for _, v := range E2ETargetVariants {
		if err := engineConfig(E2ETargetWorkers, 0, v.Target).Validate(); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
	}
}

// Every settle variant is a valid engine configuration.
func TestSettleVariantsValid(t *testing.T) {
	for _, v := range SettleVariants {
		if err := v.config().Validate(); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
	}
}

// TestReconcileSection runs the reconcile section small: RunReconcile
// checks each phase's counts itself; the report must show every phase.
func TestReconcileSection(t *testing.T) {
	needRedis(t)
	setScriptNames()
	rc, err := RunReconcile(t.Context(), srv, 2000, 2, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range RecPhases {
		if got := len(rc.Runs[ph]); got != 2 {
			t.Fatalf("%s: %d runs, want 2", ph, got)
		}
	}
	if got := rc.Runs[RecAddAll][0].Scripts; got < int64(rc.Shards) {
		t.Errorf("add all: %d reconcile.lua calls counted, want at least one per shard (%d)", got, rc.Shards)
	}
	out := Report(&Results{Reconcile: rc})
	for _, ph := range RecPhases {
		if !strings.Contains(out, "| "+ph+" |") {
			t.Errorf("report has no %q row:\n%s", ph, out)
		}
	}
}

// createRanges is redis-cli's split: 3 masters get 0-5460, 5461-10922
// and 10923-16383, and any count covers every slot once, in order.
func TestCreateRanges(t *testing.T) {
	if got, want := createRanges(3), []int{0, 5461, 10923, ClusterSlots}; !slices.Equal(got, want) {
		t.Errorf("createRanges(3) = %v, want %v", got, want)
	}
	for _, m := range ModelMasters {
		first := createRanges(m)
		if len(first) != m+1 || first[0] != 0 || first[m] != ClusterSlots {
			t.Fatalf("createRanges(%d) = %v", m, first)
		}
		for i := range m {
			if first[i+1] <= first[i] {
				t.Fatalf("createRanges(%d): master %d gets no slots: %v", m, i, first)
			}
		}
	}
}

// TestClusterSection runs the cluster section small against a real
// 3-master Cluster: both rows measured, every master's CPU read, every
// shard placed on a master, and the model in the report.
func TestClusterSection(t *testing.T) {
	needRedis(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli not installed (make deps)")
	}
	setScriptNames()
	c, err := RunCluster(t.Context(), srv, 1, 5000, 100*time.Millisecond, 300*time.Millisecond, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range c.Rows {
		if len(row.Runs) != 1 || row.Runs[0].Done == 0 {
			t.Fatalf("%s: runs %+v, want one that synced items", row.Name, row.Runs)
		}
		if got := len(row.Runs[0].W.RedisCPUs); got != row.Masters {
			t.Errorf("%s: CPU of %d processes, want %d", row.Name, got, row.Masters)
		}
	}
	n := 0
	for _, s := range c.shardsOn() {
		n += len(s)
	}
	if n != c.Shards {
		t.Errorf("%d shards placed on masters, want %d", n, c.Shards)
	}
	if !c.createdAsModelled() {
		t.Errorf("the Cluster's slot ranges %v are not createRanges's", c.Ranges)
	}
	if got := shardsPerMaster(c.TagSlots, c.Shards, len(c.Ranges)); len(got) != ClusterMasters {
		t.Errorf("shardsPerMaster: %v", got)
	}
	out := Report(&Results{Cluster: c, Env: Env{NumCPU: 2}})
	for _, want := range []string{"## 4c. Scale-out", "### A model", "| 100 |", "(b) Redis Cluster, 3 masters"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
