package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// Multi-process tests re-run this test binary as a syncd-like daemon or
// batch process (helperMain), with real signals.

type procEvent struct {
	Ev    string    `json:"ev"` // begin, end, cancel
	ID    string    `json:"id"`
	Fence uint64    `json:"fence"`
	PID   int       `json:"pid"`
	T     time.Time `json:"t"`
}

// eventSink appends begin/end lines to a file shared by the processes,
// and takes SINK_MS per sync unless cancelled.
type eventSink struct {
	mu  sync.Mutex
	f   *os.File
	dur time.Duration
}

func (s *eventSink) emit(ev string, it sinks.Item) {
	b, _ := json.Marshal(procEvent{Ev: ev, ID: it.ID, Fence: it.Fence, PID: os.Getpid(), T: time.Now()})
	s.mu.Lock()
	s.f.Write(append(b, '\n'))
	s.mu.Unlock()
}

func (s *eventSink) Sync(ctx context.Context, it sinks.Item) error {
	s.emit("begin", it)
	select {
	case <-time.After(s.dur):
		s.emit("end", it)
		return nil
	case <-ctx.Done():
		s.emit("cancel", it)
		return context.Cause(ctx)
	}
}

func (s *eventSink) Close() error { return s.f.Close() }

func helperMain() bool {
	mode := os.Getenv("SYNCD_ENGINE_HELPER")
	if mode == "" {
		return false
	}
	env := func(k string) string { return os.Getenv("SYNCD_" + k) }
	ms := func(k string) time.Duration { n, _ := strconv.Atoi(env(k)); return time.Duration(n) * time.Millisecond }
	num := func(k string) int { n, _ := strconv.Atoi(env(k)); return n }
	fail := func(err error) { fmt.Fprintln(os.Stderr, "helper:", err); os.Exit(3) }
	log := zerolog.New(os.Stderr).With().Int("pid", os.Getpid()).Logger().Level(zerolog.InfoLevel)
	st, err := store.Open(context.Background(), store.Config{Addrs: []string{env("ADDR")}, KeyPrefix: env("PREFIX"), Shards: num("SHARDS")})
	if err != nil {
		fail(err)
	}
	f, err := os.OpenFile(env("EVENTS"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	sink := &eventSink{f: f, dur: ms("SINK_MS")}
	e, err := engine.New(st, sink, engine.Config{Workers: num("WORKERS"), Interval: time.Hour, Poll: 20 * time.Millisecond,
		DrainTimeout: ms("DRAIN_MS"), Ownership: ownership.Config{TTL: ms("TTL_MS")}, Logger: log})
	if err != nil {
		fail(err)
	}
	switch mode {
	case "daemon":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		fmt.Println("READY")
		e.Run(ctx)
	case "batch":
		rep, err := e.RunBatch(context.Background(), engine.BatchOptions{})
		if err != nil {
			fail(err)
		}
		json.NewEncoder(os.Stdout).Encode(rep)
	}
	sink.Close()
	st.Close()
	os.Exit(0)
	return true
}

type cluster struct {
	t      *testing.T
	srv    *redistest.Server
	prefix string
	events string
	env    []string
}

func newProcCluster(t *testing.T, ids int, extra ...string) *cluster {
	srv := redistest.Start(t, nil)
	c := &cluster{t: t, srv: srv, prefix: fmt.Sprintf("p%d", prefixes.Add(1)), events: filepath.Join(t.TempDir(), "events.jsonl")}
	st := openStoreWithPrefix(t, srv.Addr(), c.prefix, 4)
	for i := range ids {
		st.Add(context.Background(), fmt.Sprintf("item-%03d", i))
	}
	c.env = append([]string{"SYNCD_ADDR=" + srv.Addr(), "SYNCD_PREFIX=" + c.prefix, "SYNCD_SHARDS=4",
		"SYNCD_EVENTS=" + c.events}, extra...)
	return c
}

func openStoreWithPrefix(t *testing.T, addr, prefix string, shards int) *store.Store {
	s, err := store.Open(context.Background(), store.Config{Addrs: []string{addr}, KeyPrefix: prefix, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for sh := range shards {
		s.MarkEpoch(context.Background(), sh, 0)
	}
	return s
}

// start runs a helper process; stdout is returned by wait.
func (c *cluster) start(mode string, extra ...string) (*exec.Cmd, *strings.Builder) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(append(os.Environ(), "SYNCD_ENGINE_HELPER="+mode), c.env...), extra...)
	out := &strings.Builder{}
	cmd.Stdout = out
	cmd.Stderr = &prefixWriter{t: c.t}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, out
}

type prefixWriter struct{ t *testing.T }

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.t.Logf("helper: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (c *cluster) read() []procEvent {
	f, err := os.Open(c.events)
	if err != nil {
		return nil
	}
	defer f.Close()
	var evs []procEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev procEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

// inflight returns, per pid, the items begun and not yet ended or
// cancelled.
func inflight(evs []procEvent) map[int]map[string]bool {
	m := map[int]map[string]bool{}
	for _, ev := range evs {
		if m[ev.PID] == nil {
			m[ev.PID] = map[string]bool{}
		}
		if ev.Ev == "begin" {
			m[ev.PID][ev.ID] = true
		} else {
			delete(m[ev.PID], ev.ID)
		}
	}
	return m
}

// SIGKILL a daemon mid-sync: another process syncs all its items again
// within ttl + one scan.
func TestCrashedDaemonItemsComeBack(t *testing.T) {
	t.Parallel()
	const ttl, sinkDur = 1500 * time.Millisecond, 400 * time.Millisecond
	// The daemon holds every item when it dies, so the peer's capacity
	// plays no part: recovery is bounded by the ttl alone.
	c := newProcCluster(t, 8, "SYNCD_TTL_MS=1500", "SYNCD_SINK_MS=400", "SYNCD_WORKERS=8", "SYNCD_DRAIN_MS=100")
	a, _ := c.start("daemon")
	var victim map[string]bool
	waitFor(t, 10*time.Second, "the daemon to be mid-sync on every item", func() bool {
		victim = inflight(c.read())[a.Process.Pid]
		return len(victim) == 8
	})
	a.Process.Signal(syscall.SIGKILL)
	a.Wait()
	killed := time.Now()
	victim = inflight(c.read())[a.Process.Pid] // what it held when it died
	b, _ := c.start("daemon")
	bound := ttl + 500*time.Millisecond + sinkDur + time.Second // ttl + a scan + the sync + process start
	waitFor(t, bound+5*time.Second, "the dead daemon's items to sync elsewhere", func() bool {
		for _, ev := range c.read() {
			if ev.Ev == "end" && ev.PID == b.Process.Pid {
				delete(victim, ev.ID)
			}
		}
		return len(victim) == 0
	})
	if took := time.Since(killed); took > bound {
		t.Errorf("recovery took %v, bound %v", took, bound)
	}
	t.Logf("items of the killed daemon synced again %v after SIGKILL (ttl %v)", time.Since(killed), ttl)
	waitFor(t, 20*time.Second, "every item to sync", func() bool {
		done := map[string]bool{}
		for _, ev := range c.read() {
			if ev.Ev == "end" {
				done[ev.ID] = true
			}
		}
		return len(done) == 8
	})
}

// SIGTERM mid-sync: in-flight syncs are cancelled at drain_timeout and
// handed back; a peer resumes them at once, well before the ttl.
func TestDrainHandsBackToPeers(t *testing.T) {
	t.Parallel()
	c := newProcCluster(t, 4, "SYNCD_TTL_MS=20000", "SYNCD_SINK_MS=5000", "SYNCD_WORKERS=4", "SYNCD_DRAIN_MS=300")
	a, _ := c.start("daemon")
	waitFor(t, 10*time.Second, "4 syncs in flight", func() bool { return len(inflight(c.read())[a.Process.Pid]) == 4 })
	b, _ := c.start("daemon", "SYNCD_SINK_MS=50")
	time.Sleep(200 * time.Millisecond) // b is up and finds nothing to claim
	termed := time.Now()
	a.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- a.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("daemon exit after SIGTERM: %v", err)
		}
		if took := time.Since(termed); took > 3*time.Second {
			t.Errorf("daemon took %v to stop with drain_timeout 300ms", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not stop after SIGTERM")
	}
	waitFor(t, 3*time.Second, "the peer to resume the handed-back items (ttl is 20s)", func() bool {
		n := 0
		for _, ev := range c.read() {
			if ev.Ev == "end" && ev.PID == b.Process.Pid {
				n++
			}
		}
		return n == 4
	})
	cancels := 0
	for _, ev := range c.read() {
		if ev.Ev == "cancel" && ev.PID == a.Process.Pid {
			cancels++
		}
	}
	if cancels != 4 {
		t.Errorf("%d syncs cancelled at the drain timeout, want 4", cancels)
	}
	t.Logf("peer resumed all items %v after SIGTERM (ttl 20s)", time.Since(termed))
}

// Three batch processes over 500 items: each item synced exactly once,
// the reports add up, and they finish together.
func TestBatchThreeProcesses(t *testing.T) {
	t.Parallel()
	c := newProcCluster(t, 500, "SYNCD_TTL_MS=5000", "SYNCD_SINK_MS=3", "SYNCD_WORKERS=4", "SYNCD_DRAIN_MS=1000")
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range 3 {
		cmd, out := c.start("batch")
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	var reps []engine.Report
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("batch process %d: %v", i, err)
		}
		var rep engine.Report
		if err := json.Unmarshal([]byte(outs[i].String()), &rep); err != nil {
			t.Fatalf("report %d: %v: %q", i, err, outs[i].String())
		}
		reps = append(reps, rep)
	}
	synced := 0
	first, last := reps[0].Finished, reps[0].Finished
	for _, r := range reps {
		synced += r.Synced
		if r.Items != 500 || r.Unsynced != 0 || r.Quarantined != 0 || r.Synced+r.SyncedElsewhere != 500 {
			t.Errorf("report %+v", r)
		}
		first, last = minTime(first, r.Finished), maxTime(last, r.Finished)
	}
	if synced != 500 {
		t.Errorf("processes synced %d items in all, want 500", synced)
	}
	if spread := last.Sub(first); spread > time.Second {
		t.Errorf("processes finished %v apart", spread)
	}
	ends := map[string]int{}
	for _, ev := range c.read() {
		if ev.Ev == "end" {
			ends[ev.ID]++
		}
	}
	if len(ends) != 500 {
		t.Errorf("%d distinct items synced, want 500", len(ends))
	}
	for id, n := range ends {
		if n != 1 {
			t.Errorf("%s synced %d times", id, n)
		}
	}
	t.Logf("synced per process: %d, %d, %d", reps[0].Synced, reps[1].Synced, reps[2].Synced)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
