package engine

import (
	"sync"
	"time"

	"github.com/syncd/syncd/store"
)

// health says for /readyz whether Redis answers: the monitor's round
// trips and the item counts, the signals syncd_redis_up follows, report
// to it. The scheduler's own flag (Engine.Ready) cannot say so alone: a
// claim round blocked on a hung Redis (a SIGSTOPped server, a dead link)
// returns no error until its read timeouts and go-redis's retries run
// out, and an outside trial saw /readyz say "ready" for about 21 s, past
// every lease's end, while syncd_redis_up said 0 after 4.
//
// It also says whether Redis refuses writes for lack of memory
// (maxmemory reached under noeviction): the claims and the registry
// writes report to it. Reads go through then, so syncd_redis_up stays 1,
// and /readyz said "redis unreachable or not claiming yet" (an outside
// trial).
//
// While the monitor runs, Redis is silent while the last round trip
// reported failed (an ACL refusal is an answer), or while none came back
// within bound (the monitor's period plus its round trip's timeout),
// which covers a round trip that overruns its own deadline.
type health struct {
	mu       sync.Mutex
	bound    time.Duration // 0: the monitor does not run
	answered time.Time     // the end of the last round trip Redis answered
	err      error         // the last round trip's error; nil: it was answered
	oom      time.Time     // when Redis first refused a write for lack of memory; zero: it takes them
}

// start is called as the monitor starts: Redis counts as answering from
// now, for bound.
func (h *health) start(bound time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bound, h.answered, h.err = bound, time.Now(), nil
}

// stop is called as the monitor ends: nothing says Redis is silent since.
func (h *health) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bound = 0
}

// report records how a round trip went: nil, answered.
func (h *health) report(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	if err == nil {
		h.answered = time.Now()
	}
}

// silent returns when Redis last answered, and the last round trip's
// error (nil when it overran the bound instead), while Redis is silent;
// the zero time while it answers or the monitor does not run.
func (h *health) silent() (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bound == 0 || h.err == nil && time.Since(h.answered) <= h.bound {
		return time.Time{}, nil
	}
	return h.answered, h.err
}

// wrote records how a write went: an out-of-memory refusal
// (store.IsOutOfMemory) marks Redis out of memory, a write that went
// through clears that; other errors tell nothing about memory. Report
// only a write that wrote: a script that found nothing to write is not
// refused under maxmemory.
func (h *health) wrote(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.oom = time.Time{}
	case store.IsOutOfMemory(err) && h.oom.IsZero():
		h.oom = time.Now()
	}
}

// outOfMemory returns since when Redis refuses writes for lack of
// memory, the zero time while it takes them.
func (h *health) outOfMemory() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.oom
}
