package topology

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/syncd/syncd/sinks"
)

// fenceChecker is the target of every engine in a test: one store that
// checks fences the way a fenced target must (the write is accepted only
// if its fence is at least the highest accepted for the item, checked and
// applied in one step) and records every sync for the invariants.
type fenceChecker struct {
	mu    sync.Mutex
	high  map[string]uint64
	syncs []syncRec
	work  func() time.Duration
}

// syncRec is one call of Sync.
type syncRec struct {
	id, owner  string
	fence      uint64
	start, end time.Time
	accepted   bool
	stale      bool // rejected: a higher fence was accepted first
	engine     int
}

func newFenceChecker(work func() time.Duration) *fenceChecker {
	if work == nil {
		work = func() time.Duration { return time.Duration(5+rand.IntN(26)) * time.Millisecond }
	}
	return &fenceChecker{high: map[string]uint64{}, work: work}
}

// sink returns the sink engine number n uses.
func (c *fenceChecker) sink(n int) sinks.Sink {
	return sinks.Func(func(ctx context.Context, it sinks.Item) error {
		rec := syncRec{id: it.ID, owner: it.Owner, fence: it.Fence, start: time.Now(), engine: n}
		select {
		case <-time.After(c.work()):
		case <-ctx.Done():
			rec.end = time.Now()
			c.add(rec)
			return context.Cause(ctx)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		rec.end = time.Now()
		if it.Fence < c.high[it.ID] {
			rec.stale = true
			c.syncs = append(c.syncs, rec)
			return fmt.Errorf("%w: item %q fence %d below %d", sinks.ErrStaleFence, it.ID, it.Fence, c.high[it.ID])
		}
		c.high[it.ID] = it.Fence
		rec.accepted = true
		c.syncs = append(c.syncs, rec)
		return nil
	})
}

func (c *fenceChecker) add(r syncRec) {
	c.mu.Lock()
	c.syncs = append(c.syncs, r)
	c.mu.Unlock()
}

func (c *fenceChecker) snapshot() []syncRec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.syncs)
}

// fenceReport is what the invariants found over a set of syncs.
type fenceReport struct {
	syncs, accepted, stale int
	// fenceDown counts syncs whose claim's fence is not above that of
	// an earlier-started sync of another claim of the item: a fencing
	// target could not tell the stale writer from the current one. It
	// must be 0.
	fenceDown int
	// overlaps counts pairs of syncs of one item by different claims
	// that ran at the same time (a lost claim's owner still working);
	// acceptedOverlaps those where both writes were accepted.
	overlaps, acceptedOverlaps int
	examples                   []string
}

func (r fenceReport) String() string {
	return fmt.Sprintf("%d syncs (%d accepted, %d rejected as stale); fence not above an earlier claim: %d; overlapping claims: %d (both writes accepted: %d)",
		r.syncs, r.accepted, r.stale, r.fenceDown, r.overlaps, r.acceptedOverlaps)
}

// checkFences checks, per item, that claims' fences rise in the order
// the claims started working, and counts overlaps.
func checkFences(syncs []syncRec) fenceReport {
	r := fenceReport{syncs: len(syncs)}
	byItem := map[string][]syncRec{}
	for _, s := range syncs {
		byItem[s.id] = append(byItem[s.id], s)
		if s.accepted {
			r.accepted++
		}
		if s.stale {
			r.stale++
		}
	}
	for _, ss := range byItem {
		slices.SortFunc(ss, func(a, b syncRec) int { return a.start.Compare(b.start) })
		for i, s := range ss {
			for _, p := range ss[:i] {
				if p.fence == s.fence && p.owner == s.owner {
					continue // the same claim
				}
				if s.fence <= p.fence {
					r.fenceDown++
					if len(r.examples) < 5 {
						r.examples = append(r.examples, fmt.Sprintf("%s: %s fence %d started %s after %s fence %d",
							s.id, s.owner, s.fence, s.start.Sub(p.start), p.owner, p.fence))
					}
				}
				if s.start.Before(p.end) {
					r.overlaps++
					if s.accepted && p.accepted {
						r.acceptedOverlaps++
					}
				}
			}
		}
	}
	return r
}
