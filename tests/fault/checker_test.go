package fault

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// outcome is how a write ended at the checker.
type outcome string

const (
	inFlight  outcome = "in-flight"
	accepted  outcome = "accepted"  // 200: fence not below the last accepted one
	rejected  outcome = "rejected"  // 409: fence below the last accepted one
	cancelled outcome = "cancelled" // the client went away while held
	poisoned  outcome = "poison"    // 422: the poison item, quarantined by syncd
	aborted   outcome = "aborted"   // the checker shut down while held
)

// write is one POST from a daemon's http sink.
type write struct {
	N       int // position in the checker's log
	ID      string
	Owner   string // as sent: host/pid/run/wN
	Host    string // the daemon's ownership.owner, d<slot>.<incarnation>
	Fence   uint64
	Attempt int
	Last    time.Time // last_sync as sent; zero for null ("never synced")
	Begin   time.Time
	End     time.Time // zero while in flight
	Outcome outcome
	Early   bool // rejected on arrival, without being held
	// Superseded: when it ended, a higher fence of its item had already
	// arrived. A target that remembers the highest fence it has seen,
	// not only the highest it accepted, would refuse it.
	Superseded bool
}

func (w write) String() string {
	end := "…"
	if !w.End.IsZero() {
		end = w.End.Format("15:04:05.000")
	}
	return fmt.Sprintf("#%d %s fence=%d owner=%s [%s–%s] %s", w.N, w.ID, w.Fence, w.Owner,
		w.Begin.Format("15:04:05.000"), end, w.Outcome)
}

// checker is a fencing store: the target of the daemons' http sink. It
// records the begin and end of every write under one lock, holds each
// write for its item's sync duration (or until the client goes away),
// and accepts a write only when its fence is not below the last fence it
// accepted for the item. It knows nothing of Redis or syncd's internals.
type checker struct {
	hold   func(id string) time.Duration
	poison map[string]bool
	srv    *httptest.Server
	stop   chan struct{}

	mu     sync.Mutex
	writes []write
	last   map[string]uint64 // highest accepted fence per item
	seen   map[string]uint64 // highest fence that arrived per item
	bad    []string          // protocol errors: bad body, header and body disagree
}

// newChecker starts a checker on 127.0.0.1:0; it is closed in t's cleanup
// (register it before the daemons, so that they die first).
func newChecker(t *testing.T, hold func(id string) time.Duration, poison ...string) *checker {
	c := &checker{hold: hold, poison: map[string]bool{}, stop: make(chan struct{}), last: map[string]uint64{}, seen: map[string]uint64{}}
	for _, id := range poison {
		c.poison[id] = true
	}
	c.srv = httptest.NewServer(c)
	t.Cleanup(func() {
		close(c.stop)
		c.srv.Close()
	})
	return c
}

// URL is where the http sink posts.
func (c *checker) URL() string { return c.srv.URL + "/sync" }

func (c *checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var p struct {
		ID      string     `json:"id"`
		Fence   uint64     `json:"fence"`
		Owner   string     `json:"owner"`
		Attempt int        `json:"attempt"`
		Last    *time.Time `json:"last_sync"`
	}
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.ID == "" {
		c.protocolError(fmt.Sprintf("undecodable body (%v)", err))
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if h := r.Header.Get("X-Syncd-Fence"); h != strconv.FormatUint(p.Fence, 10) {
		c.protocolError(fmt.Sprintf("item %s: X-Syncd-Fence %q, body fence %d", p.ID, h, p.Fence))
		http.Error(w, "fence header and body differ", http.StatusBadRequest)
		return
	}
	host, _, _ := strings.Cut(p.Owner, "/")
	var last time.Time
	if p.Last != nil {
		last = *p.Last
	}

	c.mu.Lock()
	n := len(c.writes)
	c.writes = append(c.writes, write{N: n, ID: p.ID, Owner: p.Owner, Host: host, Fence: p.Fence,
		Attempt: p.Attempt, Last: last, Begin: time.Now(), Outcome: inFlight})
	if !c.poison[p.ID] {
		c.seen[p.ID] = max(c.seen[p.ID], p.Fence)
	}
	switch {
	case c.poison[p.ID]:
		c.finishLocked(n, poisoned, false)
		c.mu.Unlock()
		http.Error(w, "poison item: cannot be synced", http.StatusUnprocessableEntity)
		return
	case p.Fence < c.last[p.ID]:
		c.finishLocked(n, rejected, true)
		c.mu.Unlock()
		http.Error(w, "stale fence", http.StatusConflict)
		return
	}
	c.mu.Unlock()

	t := time.NewTimer(c.hold(p.ID))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		c.finish(n, cancelled)
		return
	case <-c.stop:
		c.finish(n, aborted)
		http.Error(w, "checker stopped", http.StatusServiceUnavailable)
		return
	}

	c.mu.Lock()
	if p.Fence < c.last[p.ID] {
		c.finishLocked(n, rejected, false)
		c.mu.Unlock()
		http.Error(w, "stale fence", http.StatusConflict)
		return
	}
	c.last[p.ID] = p.Fence
	c.finishLocked(n, accepted, false)
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (c *checker) finish(n int, o outcome) {
	c.mu.Lock()
	c.finishLocked(n, o, false)
	c.mu.Unlock()
}

func (c *checker) finishLocked(n int, o outcome, early bool) {
	w := &c.writes[n]
	w.End = time.Now()
	w.Outcome = o
	w.Early = early
	w.Superseded = c.seen[w.ID] > w.Fence
}

func (c *checker) protocolError(s string) {
	c.mu.Lock()
	c.bad = append(c.bad, s)
	c.mu.Unlock()
}

// snapshot copies the log.
func (c *checker) snapshot() ([]write, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.writes), slices.Clone(c.bad)
}

// inFlightBy returns the writes of a daemon (by host) now held.
func (c *checker) inFlightBy(host string) []write {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []write
	for _, w := range c.writes {
		if w.Outcome == inFlight && w.Host == host {
			out = append(out, w)
		}
	}
	return out
}

// firstAccepted returns, per item of ids, the first accepted write that
// began at or after since; items without one are missing from the map.
func (c *checker) firstAccepted(ids []string, since time.Time) map[string]write {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string]write{}
	for _, w := range c.writes {
		if w.Outcome != accepted || !want[w.ID] || w.Begin.Before(since) {
			continue
		}
		if prev, ok := out[w.ID]; !ok || w.Begin.Before(prev.Begin) {
			out[w.ID] = w
		}
	}
	return out
}

// violations holds what the analysis of a log found; every slice should
// stay empty.
type violations struct {
	Overlaps    []string   // invariant 1: accepted writes of an item overlapping
	Pairs       [][2]write // the same overlaps: earlier, later
	Regressed   []string   // invariant 2: accepted fence lower than an earlier accepted one
	SharedFence []string   // invariant 2: one fence accepted from two owners
	Stale       []string   // invariant 2: accepted although a higher fence had arrived first
	Protocol    []string   // the sink broke its own wire format
	LastSync    []string   // invariant 4: a later claim told the sink an older last_sync, or none
}

func (v violations) count() int {
	return len(v.Overlaps) + len(v.Regressed) + len(v.SharedFence) + len(v.Stale) + len(v.Protocol) + len(v.LastSync)
}

// analyze checks invariants 1 and 2 over a log; writes still in flight
// are left out. Unless Redis's data was thrown away on purpose (wiped),
// it also checks what the sink was told of the item's last sync: lastSync
// in Redis never goes back, and claims read it in fence order, so the
// last_sync each write carries must not go back (or to null) from one
// fence to the next.
func analyze(ws []write, bad []string, wiped bool) violations {
	v := violations{Protocol: bad}
	byItem := map[string][]write{}
	for _, w := range ws {
		if w.Outcome != poisoned {
			byItem[w.ID] = append(byItem[w.ID], w)
		}
	}
	for _, all := range byItem {
		var acc []write
		for _, w := range all {
			if w.Outcome == accepted {
				acc = append(acc, w)
			}
		}
		// 1: sorted by begin, each accepted write must begin after every
		// earlier one ended.
		slices.SortFunc(acc, func(a, b write) int { return a.Begin.Compare(b.Begin) })
		for i := 1; i < len(acc); i++ {
			for j := range i {
				if acc[i].Begin.Before(acc[j].End) {
					v.Overlaps = append(v.Overlaps, fmt.Sprintf("%v overlaps %v", acc[j], acc[i]))
					v.Pairs = append(v.Pairs, [2]write{acc[j], acc[i]})
				}
			}
		}
		// 2: in the order they were accepted, fences never go down, and
		// one fence is never accepted from two owners.
		slices.SortFunc(acc, func(a, b write) int { return a.End.Compare(b.End) })
		owner := map[uint64]string{}
		for i, w := range acc {
			if i > 0 && w.Fence < acc[i-1].Fence {
				v.Regressed = append(v.Regressed, fmt.Sprintf("%v accepted after %v", w, acc[i-1]))
			}
			if o, ok := owner[w.Fence]; ok && o != w.Owner {
				v.SharedFence = append(v.SharedFence, fmt.Sprintf("fence %d of %s accepted from %s and %s", w.Fence, w.ID, o, w.Owner))
			}
			owner[w.Fence] = w.Owner
		}
		// 4: last_sync, in fence order, never goes back.
		if !wiped {
			byFence := slices.Clone(all)
			slices.SortStableFunc(byFence, func(a, b write) int { return cmp.Compare(a.Fence, b.Fence) })
			var best write // the latest last_sync told to a lower fence
			for i := 0; i < len(byFence); {
				j := i
				for j < len(byFence) && byFence[j].Fence == byFence[i].Fence {
					j++
				}
				for _, w := range byFence[i:j] {
					if i > 0 && w.Last.Before(best.Last) {
						shown := "null"
						if !w.Last.IsZero() {
							shown = w.Last.Format(time.RFC3339Nano)
						}
						v.LastSync = append(v.LastSync, fmt.Sprintf("%v was told last_sync %s, the lower fence of %v %s",
							w, shown, best, best.Last.Format(time.RFC3339Nano)))
					}
				}
				for _, w := range byFence[i:j] {
					if i == 0 || w.Last.After(best.Last) {
						best = w
					}
				}
				i = j
			}
		}
		// 2: a write that arrived after a higher fence of its item had
		// arrived comes from an owner whose claim was superseded; it must
		// not be accepted.
		for _, w := range acc {
			for _, x := range all {
				if x.Fence > w.Fence && x.Begin.Before(w.Begin) {
					v.Stale = append(v.Stale, fmt.Sprintf("%v accepted after %v had arrived", w, x))
					break
				}
			}
		}
	}
	return v
}
