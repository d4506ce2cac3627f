package items

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

var syncd testutil.Syncd

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		syncd.Remove()
		os.Exit(code)
	}))
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// daemon starts `syncd run -c cfg` (see testutil.Syncd.Daemon).
func daemon(t *testing.T, cfg string) (*testutil.Process, *testutil.Buffer) {
	t.Helper()
	return syncd.Daemon(t, cfg)
}

// writeIDs writes the ids c<from>..c<to-1>, one per line.
func writeIDs(t *testing.T, path string, from, to int) {
	t.Helper()
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "c%06d\n", i)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, srv *redistest.Server, prefix string) int {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, _, err := st.Count(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func metric(t *testing.T, addr, line string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), line)
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, within, 100*time.Millisecond, what, cond)
}

// An items.command source grows from 1,000 to 1,100 IDs, then shrinks to
// 900: the set follows. Shrinking to 50, failing or printing nothing
// removes nothing, and each is logged and counted.
func TestCommandSourceFollowedAndGuarded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	dir := t.TempDir()
	list, mode := filepath.Join(dir, "ids"), filepath.Join(dir, "mode")
	writeIDs(t, list, 0, 1000)
	os.WriteFile(mode, []byte("ok"), 0o644)
	script := fmt.Sprintf(`case "$(cat %s)" in fail) echo "the customer API is down" >&2; exit 3;; empty) exit 0;; esac; cat %s`, mode, list)
	listen := freePort(t)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: cmd
  shards: 4
ownership:
  ttl: 3s
engine:
  interval: 1h
items:
  command: ["sh", "-c", %q]
  refresh: 1s
  max_removal: 25
sink:
  type: log
http:
  listen: %s
log:
  format: json
`, srv.Addr(), script, listen))
	_, log := daemon(t, cfg)
	waitFor(t, 20*time.Second, "1,000 items", func() bool { return count(t, srv, "cmd") == 1000 })
	writeIDs(t, list, 0, 1100)
	waitFor(t, 10*time.Second, "1,100 items", func() bool { return count(t, srv, "cmd") == 1100 })
	writeIDs(t, list, 0, 900)
	waitFor(t, 10*time.Second, "900 items", func() bool { return count(t, srv, "cmd") == 900 })

	for _, step := range []struct {
		name, why string
		set       func()
	}{
		{"shrink to 50", "would go, more than the 25% allowed", func() { writeIDs(t, list, 0, 50) }},
		{"fail", "the customer API is down", func() { writeIDs(t, list, 0, 900); os.WriteFile(mode, []byte("fail"), 0o644) }},
		{"print nothing", "the sources gave no ids", func() { os.WriteFile(mode, []byte("empty"), 0o644) }},
	} {
		before := strings.Count(log.String(), step.why)
		step.set()
		waitFor(t, 10*time.Second, step.name+": logged", func() bool { return strings.Count(log.String(), step.why) > before })
		if n := count(t, srv, "cmd"); n != 900 {
			t.Errorf("%s: %d items, want the 900 kept", step.name, n)
		}
		if !metric(t, listen, "syncd_reconcile_refusing 1") {
			t.Errorf("%s: syncd_reconcile_refusing is not 1", step.name)
		}
	}
	if !metric(t, listen, `syncd_reconciles_total{result="guarded"}`) {
		t.Error("guarded reconciles not counted")
	}
	os.WriteFile(mode, []byte("ok"), 0o644)
	waitFor(t, 10*time.Second, "the guard lifted", func() bool { return metric(t, listen, "syncd_reconcile_refusing 0") })
	r := testutil.Run(t, nil, syncd.Path(t), "items", "reconcile", "-c", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "900 items in the sources") {
		t.Errorf("items reconcile:\n%s", r)
	}
}

// Two daemons are elected reconciler in turn while the first is
// SIGSTOPped in the middle of its reconcile: once the second has
// reconciled, the first's writes after waking are refused (by the
// reconcile fence, or before they are sent, by its lock's lost lease).
func TestPausedReconcilerIsFencedOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	dir := t.TempDir()
	big, small := filepath.Join(dir, "big"), filepath.Join(dir, "small")
	writeIDs(t, big, 0, 300_000)
	writeIDs(t, small, 0, 100)
	conf := func(name, list, refresh string) string {
		return testutil.WriteFile(t, name+".yaml", fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: rec
  shards: 4
ownership:
  ttl: 2s
engine:
  interval: 1h
  workers: 1
items:
  command: ["cat", %q]
  refresh: %s
  max_removal: 100
sink:
  type: log
  log:
    delay: 1h
log:
  format: json
`, srv.Addr(), list, refresh))
	}
	a, alog := daemon(t, conf("a", big, "1h"))
	waitFor(t, 60*time.Second, "the first reconcile writing", func() bool { return count(t, srv, "rec") > 0 })
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := count(t, srv, "rec")
	if paused >= 300_000 {
		t.Skip("the first reconcile finished before it could be paused")
	}
	_, blog := daemon(t, conf("b", small, "1h"))
	waitFor(t, 30*time.Second, "the second daemon's reconcile", func() bool {
		return strings.Contains(blog.String(), "item set reconciled")
	})
	if n := count(t, srv, "rec"); n != 100 {
		t.Fatalf("after the second reconcile: %d items, want its 100", n)
	}
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the first reconciler to give up", func() bool {
		return strings.Contains(alog.String(), "reconcile failed")
	})
	if n := count(t, srv, "rec"); n != 100 {
		t.Errorf("after the paused reconciler woke: %d items, want the second's 100", n)
	}
	if strings.Contains(alog.String(), "item set reconciled") {
		t.Error("the paused reconciler says it reconciled")
	}
	for _, line := range strings.Split(alog.String(), "\n") {
		if strings.Contains(line, "reconcile failed") {
			t.Logf("paused at %d items; the first reconciler, woken: %s", paused, line)
		}
	}
}

// A new deployment on a fresh Redis is not a disaster: one calm line says
// why claims wait (while Redis has been up for less than one ttl, a lease
// from before a loss could still be trusted), and no data-loss warning
// is logged, where there were 16 per daemon.
func TestNewDeploymentIsCalm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: fresh
ownership:
  ttl: 15s
items:
  ids: [a, b, c, d, e, f, g, h]
sink:
  type: log
log:
  format: json
`, srv.Addr()))
	_, log := daemon(t, cfg)
	waitFor(t, 10*time.Second, "the new-deployment line", func() bool {
		return strings.Contains(log.String(), "new deployment: claims start after one ttl")
	})
	time.Sleep(time.Second) // every shard has tried to claim by now
	if n := strings.Count(log.String(), "new deployment: claims start after one ttl"); n != 1 {
		t.Errorf("the new-deployment line logged %d times, want once", n)
	}
	for _, warn := range []string{"redis has no epoch marker", "redis lost its data", `"level":"warn"`, `"level":"error"`} {
		if strings.Contains(log.String(), warn) {
			t.Errorf("a new deployment logged %q", warn)
		}
	}
}
