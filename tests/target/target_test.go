package target

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// outage is how long the targets stay down: the 80 s, shorter
// with SYNCD_OUTAGE (a Go duration) when trying changes locally.
func outage(t *testing.T) time.Duration {
	if v := os.Getenv("SYNCD_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SYNCD_OUTAGE: %v", err)
		}
		return d
	}
	return 80 * time.Second
}

// ids returns n healthy item IDs and the poison one.
func ids(n int) []string {
	out := make([]string, n, n+1)
	for i := range out {
		out[i] = fmt.Sprintf("item-%02d", i)
	}
	return append(out, "poison")
}

// config writes a daemon's config: redis, the items, then rest (sink,
// target, engine).
func config(t *testing.T, srv *redistest.Server, prefix string, items []string, rest string) string {
	t.Helper()
	quoted := make([]string, len(items))
	for i, id := range items {
		quoted[i] = strconv.Quote(id)
	}
	return testutil.WriteFile(t, prefix+".yaml", fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: %s
  shards: 4
ownership:
  ttl: 3s
items:
  ids: [%s]
log:
  format: json
  level: info
%s`, srv.Addr(), prefix, strings.Join(quoted, ", "), rest))
}

// daemons starts n `syncd run -c cfg`; each is killed in t's cleanup.
func daemons(t *testing.T, n int, cfg string) []*testutil.Process {
	t.Helper()
	var out []*testutil.Process
	for range n {
		p, _ := syncd.Daemon(t, cfg)
		out = append(out, p)
	}
	return out
}

// quarantined lists the deployment's quarantined items.
func quarantined(t *testing.T, srv *redistest.Server, prefix string) []string {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out []string
	for sh := range 4 {
		items, _, err := st.List(context.Background(), sh, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.Quarantined {
				out = append(out, it.ID)
			}
		}
	}
	slices.Sort(out)
	return out
}

// call is one call that reached a target.
type call struct {
	at time.Time
	id string
	ok bool
}

// calls is what a target saw.
type calls struct {
	mu   sync.Mutex
	list []call
}

func (c *calls) add(id string, ok bool) {
	c.mu.Lock()
	c.list = append(c.list, call{time.Now(), id, ok})
	c.mu.Unlock()
}

func (c *calls) snapshot() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

// between counts the calls in [from, to).
func between(cs []call, from, to time.Time) int {
	n := 0
	for _, c := range cs {
		if !c.at.Before(from) && c.at.Before(to) {
			n++
		}
	}
	return n
}

// syncedAfter reports whether every healthy item had a successful call
// after t.
func syncedAfter(cs []call, items []string, t time.Time) (missing []string) {
	ok := map[string]bool{}
	for _, c := range cs {
		if c.ok && c.at.After(t) {
			ok[c.id] = true
		}
	}
	for _, id := range items {
		if id != "poison" && !ok[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

// execCalls reads the exec target's log: "<unix ns> <id> ok|fail" lines.
func execCalls(t *testing.T, path string) []call {
	b, _ := os.ReadFile(path)
	var out []call
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, call{time.Unix(0, ns), f[1], f[2] == "ok"})
	}
	return out
}

// outageCheck runs the outage acceptance over a target whose
// calls are read by seen: the target goes down (setDown(true)) for the
// outage, then comes back. Healthy items quarantined: none; each syncs
// again within 30 s of recovery; the dead target gets about one call a
// second from the whole fleet once the breaker opened; the poison item
// is quarantined as before.
//
// opensAfter is how many distinct failing items open the breaker: 1 for
// a target that says it is down (503), 5 (the default) for plain errors.
func outageCheck(t *testing.T, srv *redistest.Server, prefix string, items []string, opensAfter int, setDown func(bool), seen func() []call) {
	waitFor(t, 30*time.Second, "every healthy item synced once", func() bool {
		return len(syncedAfter(seen(), items, time.Time{})) == 0
	})
	down := outage(t)
	setDown(true)
	t0 := time.Now()
	time.Sleep(down)
	setDown(false)
	t1 := time.Now()
	waitFor(t, 30*time.Second, "every healthy item synced again after the recovery", func() bool {
		return len(syncedAfter(seen(), items, t1)) == 0
	})
	t.Logf("every healthy item synced again %v after the recovery", time.Since(t1).Round(100*time.Millisecond))
	// The breaker opens once opensAfter distinct items failed (syncs
	// already running then still arrive); then, about one probe a second.
	cs := seen()
	opened, failing := t1, map[string]bool{}
	for _, c := range cs {
		if c.at.After(t0) && !c.ok && c.id != "poison" && len(failing) < opensAfter {
			failing[c.id] = true
			opened = c.at
		}
	}
	from := opened.Add(time.Second)
	n := between(cs, from, t1)
	perSec := float64(n) / t1.Sub(from).Seconds()
	t.Logf("the breaker opened %v into the outage; then the dead target got %d calls in %v: %.2f/s",
		opened.Sub(t0).Round(100*time.Millisecond), n, t1.Sub(from).Round(time.Second), perSec)
	if perSec > 1.3 {
		t.Errorf("the dead target got %.2f calls/s from the fleet, want about 1", perSec)
	}
	waitFor(t, 90*time.Second, "the poison item quarantined", func() bool {
		return slices.Contains(quarantined(t, srv, prefix), "poison")
	})
	if q := quarantined(t, srv, prefix); !slices.Equal(q, []string{"poison"}) {
		t.Errorf("quarantined %v, want only the poison item", q)
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, within, 100*time.Millisecond, what, cond)
}

// An exec target down for the outage, answering only with a plain exit 1,
// quarantines no healthy item.
func TestExecOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	dir := t.TempDir()
	flag, log := filepath.Join(dir, "down"), filepath.Join(dir, "calls")
	items := ids(40)
	script := fmt.Sprintf(`now=$(date +%%s%%N); if [ -e %s ] || [ "$SYNCD_ID" = poison ]; then echo "$now $SYNCD_ID fail" >> %s; exit 1; fi; echo "$now $SYNCD_ID ok" >> %s`, flag, log, log)
	cfg := config(t, srv, "exec", items, fmt.Sprintf(`engine:
  interval: 10s
sink:
  type: exec
  exec:
    command: ["sh", "-c", %q]
`, script))
	daemons(t, 2, cfg)
	outageCheck(t, srv, "exec", items, 5, func(down bool) {
		if down {
			os.WriteFile(flag, nil, 0o644)
		} else {
			os.Remove(flag)
		}
	}, func() []call { return execCalls(t, log) })
}

// The same with an http target answering 503.
func TestHTTP503Outage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	var down atomic.Bool
	seen := &calls{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		decodeID(r, &id)
		switch {
		case down.Load():
			seen.add(id, false)
			http.Error(w, "down", http.StatusServiceUnavailable)
		case id == "poison":
			seen.add(id, false)
			http.Error(w, "cannot sync poison", http.StatusInternalServerError)
		default:
			seen.add(id, true)
		}
	}))
	defer target.Close()
	items := ids(40)
	cfg := config(t, srv, "h503", items, fmt.Sprintf(`engine:
  interval: 10s
sink:
  type: http
  http:
    url: %s/sync
`, target.URL))
	daemons(t, 2, cfg)
	outageCheck(t, srv, "h503", items, 1, down.Store, seen.snapshot)
}

// A 429 with Retry-After: 10 keeps the whole fleet off the target for
// 10 s.
func TestHTTP429RetryAfter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	var limitedFrom atomic.Int64 // unix ns of the first 429; 0: none yet
	var limit atomic.Bool
	seen := &calls{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		decodeID(r, &id)
		if limit.Load() {
			limitedFrom.CompareAndSwap(0, time.Now().UnixNano())
			if time.Since(time.Unix(0, limitedFrom.Load())) < time.Second {
				seen.add(id, false)
				w.Header().Set("Retry-After", "10")
				http.Error(w, "quota exceeded", http.StatusTooManyRequests)
				return
			}
		}
		seen.add(id, true)
	}))
	defer target.Close()
	items := ids(40)[:40]
	cfg := config(t, srv, "h429", items, fmt.Sprintf(`engine:
  interval: 2s
sink:
  type: http
  http:
    url: %s/sync
`, target.URL))
	daemons(t, 2, cfg)
	waitFor(t, 30*time.Second, "every item synced once", func() bool {
		return len(syncedAfter(seen.snapshot(), items, time.Time{})) == 0
	})
	limit.Store(true)
	waitFor(t, 10*time.Second, "a 429", func() bool { return limitedFrom.Load() != 0 })
	first := time.Unix(0, limitedFrom.Load())
	time.Sleep(time.Until(first.Add(12 * time.Second)))
	// Calls already on their way when the first 429 was sent still
	// arrive; the fleet hears of the breaker at once from its own 429s.
	const slack = 300 * time.Millisecond
	cs := seen.snapshot()
	if n := between(cs, first.Add(slack), first.Add(10*time.Second)); n > 0 {
		t.Errorf("%d calls reached the target within its Retry-After of 10 s", n)
	}
	if n := between(cs, first.Add(10*time.Second), first.Add(12*time.Second)); n == 0 {
		t.Error("no call in the 2 s after the Retry-After ended")
	}
	if missing := syncedAfter(seen.snapshot(), items, first.Add(10*time.Second)); len(missing) > 0 {
		waitFor(t, 10*time.Second, "every item synced after the Retry-After", func() bool {
			return len(syncedAfter(seen.snapshot(), items, first.Add(10*time.Second))) == 0
		})
	}
}

// Three daemons with 8 workers each, 200 items due, target.rate 20/s and
// target.max_in_flight 8: the fleet starts 20 syncs a second (±10%), and
// never more than 8 run at the target at once, across a SIGKILL of one
// daemon in the middle of its syncs. With syncs of 50 ms the rate binds,
// not the permits: 4 permits did bind on a loaded 2-core machine (with
// -race and other suites running, a sync and its permit's hand-back took
// about 250 ms, so 4 permits capped the fleet at 16 syncs a second, with
// or without the rate limit).
func TestRateAndMaxInFlightFleetWide(t *testing.T) {
	t.Parallel()
	const maxInFlight = 8
	srv := redistest.Start(t, nil)
	var running, peak atomic.Int64
	var slow atomic.Bool
	var byPID sync.Map // daemon pid -> *atomic.Int64 syncs running
	seen := &calls{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ ID, Owner string }
		json.NewDecoder(r.Body).Decode(&body)
		seen.add(body.ID, true)
		pid := strings.Split(body.Owner, "/")[1] // host/pid/run/wN
		c, _ := byPID.LoadOrStore(pid, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		defer c.(*atomic.Int64).Add(-1)
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if slow.Load() {
			time.Sleep(time.Second)
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		running.Add(-1)
	}))
	defer target.Close()
	items := make([]string, 200)
	for i := range items {
		items[i] = fmt.Sprintf("r%03d", i)
	}
	cfg := config(t, srv, "rate", items, fmt.Sprintf(`engine:
  workers: 8
  interval: 5s
sink:
  type: http
  http:
    url: %s/sync
target:
  rate: "20/s"
  max_in_flight: %d
`, target.URL, maxInFlight))
	ds := daemons(t, 3, cfg)
	waitFor(t, 30*time.Second, "the first sync", func() bool { return len(seen.snapshot()) > 0 })
	start := seen.snapshot()[0].at
	time.Sleep(time.Until(start.Add(15 * time.Second)))
	n := between(seen.snapshot(), start.Add(5*time.Second), start.Add(15*time.Second))
	t.Logf("%d starts in 10 s after warm-up: %.1f/s; at most %d at once", n, float64(n)/10, peak.Load())
	if n < 180 || n > 220 {
		t.Errorf("%d starts in 10 s at target.rate 20/s, want 200 ± 10%%", n)
	}
	if p := peak.Load(); p > maxInFlight {
		t.Errorf("%d syncs ran at the target at once, target.max_in_flight is %d", p, maxInFlight)
	}
	// Syncs of 1 s: now max_in_flight binds (20/s would be 20 at once).
	slow.Store(true)
	time.Sleep(3 * time.Second)
	if p := peak.Load(); p != maxInFlight {
		t.Errorf("with 1 s syncs at most %d ran at once, want exactly target.max_in_flight, %d", p, maxInFlight)
	}
	// SIGKILL one daemon in the middle of its syncs: its permits are
	// leases, not handed to others until they expire (ttl 3s).
	peak.Store(running.Load())
	var victim *testutil.Process
	waitFor(t, 5*time.Second, "a daemon with a sync at the target", func() bool {
		for _, d := range ds {
			if c, ok := byPID.Load(strconv.Itoa(d.Pid())); ok && c.(*atomic.Int64).Load() > 0 {
				victim = d
				return true
			}
		}
		return false
	})
	victim.Signal(syscall.SIGKILL)
	time.Sleep(6 * time.Second)
	if p := peak.Load(); p > maxInFlight {
		t.Errorf("%d syncs ran at the target at once across a SIGKILL, target.max_in_flight is %d", p, maxInFlight)
	}
	if after := between(seen.snapshot(), time.Now().Add(-2*time.Second), time.Now()); after == 0 {
		t.Error("no sync in the 2 s after the killed daemon's permits expired")
	}
}

// decodeID reads the item ID from the http sink's JSON body.
func decodeID(r *http.Request, id *string) {
	var body struct {
		ID string `json:"id"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	*id = body.ID
}
