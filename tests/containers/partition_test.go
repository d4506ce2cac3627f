package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

// checker is the fenced target of every daemon: an HTTP endpoint on the
// host that holds each sync for a while (the work), then accepts it only
// if its fence is at least the highest accepted for the item, checked
// and applied in one step; 409 otherwise, as the http sink expects.
type checker struct {
	srv *http.Server
	ln  net.Listener

	mu       sync.Mutex
	high     map[string]uint64
	syncs    []syncRec
	inflight map[*syncRec]bool // syncs being held
}

type syncRec struct {
	id, owner  string
	fence      uint64
	start, end time.Time
	accepted   bool
	stale      bool // refused: a higher fence was accepted first
	cancelled  bool // the daemon gave up (its lease ended) before the write
}

func (r syncRec) host() string { h, _, _ := strings.Cut(r.owner, "/"); return h }

func startChecker(t *testing.T, addr string, work func(host string) time.Duration) *checker {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen for the checker on %s: %v", addr, err)
	}
	c := &checker{ln: ln, high: map[string]uint64{}, inflight: map[*syncRec]bool{}}
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ID    string `json:"id"`
			Fence uint64 `json:"fence"`
			Owner string `json:"owner"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec := &syncRec{id: body.ID, owner: body.Owner, fence: body.Fence, start: time.Now()}
		c.mu.Lock()
		c.inflight[rec] = true
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.inflight, rec)
			c.syncs = append(c.syncs, *rec)
			c.mu.Unlock()
		}()
		select {
		case <-time.After(work(rec.host())):
		case <-r.Context().Done():
			rec.end, rec.cancelled = time.Now(), true
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		rec.end = time.Now()
		if body.Fence < c.high[body.ID] {
			rec.stale = true
			http.Error(w, "stale fence", http.StatusConflict)
			return
		}
		c.high[body.ID] = body.Fence
		rec.accepted = true
	}), ReadHeaderTimeout: 5 * time.Second}
	go c.srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.srv.Shutdown(ctx)
	})
	return c
}

func (c *checker) url() string { return "http://" + c.ln.Addr().String() + "/sync" }

func (c *checker) snapshot() []syncRec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.syncs)
}

// busySince counts host's syncs that started after t0 and are held now.
func (c *checker) busySince(host string, t0 time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for r := range c.inflight {
		if r.host() == host && r.start.After(t0) {
			n++
		}
	}
	return n
}

// invariants is what a fencing checker's rules found over the syncs.
type invariants struct {
	syncs, accepted, stale, cancelled int
	// fenceDown: syncs whose claim's fence is not above that of an
	// earlier-started sync of another claim of the same item. Must be 0.
	fenceDown int
	// overlaps: pairs of syncs of one item by different claims that ran
	// at the same time; acceptedOverlaps: those where both writes were
	// accepted. Must be 0.
	overlaps, acceptedOverlaps int
	examples                   []string
}

func (v invariants) String() string {
	return fmt.Sprintf("%d syncs: %d accepted, %d refused as stale, %d cancelled by their daemon; fence not above an earlier claim's: %d; overlapping claims: %d, both accepted: %d",
		v.syncs, v.accepted, v.stale, v.cancelled, v.fenceDown, v.overlaps, v.acceptedOverlaps)
}

func check(syncs []syncRec) invariants {
	v := invariants{syncs: len(syncs)}
	byItem := map[string][]syncRec{}
	for _, s := range syncs {
		byItem[s.id] = append(byItem[s.id], s)
		switch {
		case s.accepted:
			v.accepted++
		case s.stale:
			v.stale++
		case s.cancelled:
			v.cancelled++
		}
	}
	for _, ss := range byItem {
		slices.SortFunc(ss, func(a, b syncRec) int { return a.start.Compare(b.start) })
		for i, s := range ss {
			for _, p := range ss[:i] {
				if p.fence == s.fence && p.owner == s.owner {
					continue // the same claim, retried
				}
				if s.fence <= p.fence {
					v.fenceDown++
					v.example(fmt.Sprintf("%s: %s fence %d after %s fence %d", s.id, s.owner, s.fence, p.owner, p.fence))
				}
				if s.start.Before(p.end) {
					v.overlaps++
					if s.accepted && p.accepted {
						v.acceptedOverlaps++
						v.example(fmt.Sprintf("%s: %s fence %d [%s] overlaps %s fence %d [%s, %s]", s.id, s.owner, s.fence,
							s.start.Format("15:04:05.000"), p.owner, p.fence, p.start.Format("15:04:05.000"), p.end.Format("15:04:05.000")))
					}
				}
			}
		}
	}
	return v
}

func (v *invariants) example(s string) {
	if len(v.examples) < 5 {
		v.examples = append(v.examples, s)
	}
}

// Three syncd daemons in containers share a Redis container on a private
// network and sync 30 items through the http sink into a fencing checker
// on the host. One daemon is disconnected from the private network while
// it has syncs in flight, for three times its ttl, then reconnected. Its
// syncs are cancelled when its leases' trust windows close, before its
// items' claims expire in Redis; the other daemons take its items over;
// no two claims' writes overlap and fences per item never go down; once
// back, it syncs again, and so does every item.
func TestPartitionedDaemon(t *testing.T) {
	p := dockerPool(t)
	const (
		daemons = 3
		items   = 30
		ttl     = 2 * time.Second
	)
	redisRepo := buildRedisImage(t, p)
	private := privateNetwork(t, p)
	redisC := run(t, p, &dockertest.RunOptions{Repository: redisRepo, Tag: "latest", Hostname: "redis", ExposedPorts: []string{"6379/tcp"}})
	connect(t, p, private, redisC, "redis")
	hostAddr := "127.0.0.1:" + redisC.GetPort("6379/tcp")

	// Seed from the host through the published port: the items, and the
	// epoch markers of a new deployment (no hold-off).
	ctx := t.Context()
	var st *store.Store
	if err := p.Retry(func() error {
		var err error
		st, err = store.Open(ctx, store.Config{Addrs: []string{hostAddr}, KeyPrefix: "ctr", Shards: 4, DialTimeout: time.Second})
		return err
	}); err != nil {
		t.Fatalf("redis container on %s: %v\n%s", hostAddr, err, logs(t, p, redisC))
	}
	defer st.Close()
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprintf("cust-%02d", i)
	}
	if _, err := st.Add(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	for sh := range 4 {
		if _, err := st.MarkEpoch(ctx, sh, 0); err != nil {
			t.Fatal(err)
		}
	}

	// Syncs take 0.2 to 0.8 s, but while slow names a daemon its syncs
	// take a minute: they outlive the trust window of a lease whose
	// heartbeats stop, and the cut-off daemon has to cancel them.
	var slow atomic.Value
	slow.Store("")
	chk := startChecker(t, bridgeGateway(t, redisC)+":0", func(host string) time.Duration {
		if host == slow.Load() {
			return time.Minute
		}
		return time.Duration(200+rand.IntN(600)) * time.Millisecond
	})
	config := fmt.Sprintf(`redis:
  addrs: ["redis:6379"]
  key_prefix: ctr
  shards: 4
  dial_timeout: 500ms
  read_timeout: 500ms
  write_timeout: 500ms
ownership:
  ttl: %v
engine:
  workers: 4
  interval: 1s
  poll: 50ms
  max_attempts: 1000
  backoff_min: 100ms
  backoff_max: 1s
  drain_timeout: 2s
sink:
  type: http
  http:
    url: %s
    timeout: 10s
log:
  format: json
`, ttl, chk.url())
	repo, tag := buildSyncdImage(t, p, config)
	var ds []*dockertest.Resource
	for n := range daemons {
		d := run(t, p, &dockertest.RunOptions{Repository: repo, Tag: tag, Hostname: fmt.Sprintf("syncd-%d", n)})
		connect(t, p, private, d) // after start: see package doc
		ds = append(ds, d)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range ds {
				t.Logf("--- %s\n%s", d.Container.Config.Hostname, testutil.Tail(logs(t, p, d), 30))
			}
		}
	})
	syncedSince := func(t0 time.Time, host string) int {
		seen := map[string]bool{}
		for _, s := range chk.snapshot() {
			if s.accepted && s.start.After(t0) && (host == "" || s.host() == host) {
				seen[s.id] = true
			}
		}
		return len(seen)
	}
	start := time.Now()
	waitFor(t, 60*time.Second, "every item synced, by every daemon", func() bool {
		if syncedSince(start, "") < items {
			return false
		}
		for n := range daemons {
			if syncedSince(start, fmt.Sprintf("syncd-%d", n)) == 0 {
				return false
			}
		}
		return true
	})

	// Cut syncd-0 off from Redis while it has syncs in flight. It still
	// reaches the checker (over the default bridge): a daemon that kept
	// writing after losing its claims would be seen.
	victim := ds[0]
	host := victim.Container.Config.Hostname
	slow.Store(host)
	slowFrom := time.Now()
	waitFor(t, 10*time.Second, host+" holding slow syncs", func() bool { return chk.busySince(host, slowFrom) >= 2 })
	cut := time.Now()
	disconnect(t, p, private, victim)
	time.Sleep(3 * ttl)
	connect(t, p, private, victim)
	slow.Store("")
	back := time.Now()
	waitFor(t, 30*time.Second, host+" syncing again", func() bool { return syncedSince(back, host) > 0 })
	waitFor(t, 30*time.Second, "every item synced after the reconnect", func() bool { return syncedSince(back, "") == items })

	// Stop the daemons (SIGTERM: drain and hand claims back).
	for _, d := range ds {
		if err := p.Client.KillContainer(dc.KillContainerOptions{ID: d.Container.ID, Signal: dc.SIGTERM}); err != nil {
			t.Errorf("SIGTERM %s: %v", d.Container.Name, err)
		}
	}
	for _, d := range ds {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		code, err := p.Client.WaitContainerWithContext(d.Container.ID, wctx)
		cancel()
		if err != nil || code != 0 {
			t.Errorf("%s after SIGTERM: exit %d, %v", d.Container.Config.Hostname, code, err)
		}
	}

	syncs := chk.snapshot()
	v := check(syncs)
	// What the cut-off daemon did with the items it held at the cut:
	// when its syncs of them ended, and when another daemon first
	// started on them. Per item, the first must come before the second.
	type item struct{ ended, takeover time.Time }
	held := map[string]*item{}
	for _, s := range syncs {
		if s.host() == host && s.start.Before(cut) && s.end.After(cut) {
			if held[s.id] == nil {
				held[s.id] = &item{}
			}
			if s.end.After(held[s.id].ended) {
				held[s.id].ended = s.end
			}
		}
	}
	for _, s := range syncs {
		if it := held[s.id]; it != nil && s.host() != host && s.start.After(cut) && (it.takeover.IsZero() || s.start.Before(it.takeover)) {
			it.takeover = s.start
		}
	}
	var lastEnded, takeover time.Time
	minGap := time.Duration(-1)
	for id, it := range held {
		if it.ended.After(lastEnded) {
			lastEnded = it.ended
		}
		if it.takeover.IsZero() {
			continue
		}
		if takeover.IsZero() || it.takeover.Before(takeover) {
			takeover = it.takeover
		}
		if gap := it.takeover.Sub(it.ended); minGap < 0 || gap < minGap {
			minGap = gap
		}
		if it.takeover.Before(it.ended) {
			t.Errorf("another daemon started on %s %v after the cut, while %s was on it until %v after the cut",
				id, it.takeover.Sub(cut), host, it.ended.Sub(cut))
		}
	}
	// The slow syncs outlived the trust window: the daemon must have
	// cancelled them, never written them.
	for _, s := range syncs {
		if s.host() == host && s.start.After(slowFrom) && s.start.Before(cut) && !s.cancelled {
			t.Errorf("%s's slow sync of %s was not cancelled (accepted %v, stale %v) %v after the cut", host, s.id, s.accepted, s.stale, s.end.Sub(cut))
		}
	}
	victimLog := logs(t, p, victim)
	t.Logf("%d daemons, %d items, ttl %v, %s cut off for %v: %s", daemons, items, ttl, host, 3*ttl, v)
	t.Logf("%s held %d items at the cut; its syncs of them ended by %v after the cut; the first was taken over %v after the cut; smallest gap on one item %v; its log: %d syncs cancelled by lease loss, %d failed heartbeats, %d failed claim rounds",
		host, len(held), since(cut, lastEnded), since(cut, takeover), minGap.Round(time.Millisecond), strings.Count(victimLog, "lease lost during sync"),
		strings.Count(victimLog, "heartbeat failed"), strings.Count(victimLog, "claim round failed"))
	if v.fenceDown > 0 || v.acceptedOverlaps > 0 {
		t.Errorf("fencing invariants violated: %s\n%s", v, strings.Join(v.examples, "\n"))
	}
}

func since(t0, t1 time.Time) string {
	if t1.IsZero() {
		return "never"
	}
	return t1.Sub(t0).Round(time.Millisecond).String()
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, within, 20*time.Millisecond, what, cond)
}
