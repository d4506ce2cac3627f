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
	refused  time.Time     // the last write Redis refused for lack of memory
	wentOK   time.Time     // when the last write that went through was sent
	resumed  chan struct{} // closed when a write goes through after a refusal, then replaced
	hold     time.Duration // oomHold, and the monitor's tick while it runs
}

// oomHold is how long Redis must refuse no write, with one gone through
// since its last refusal, before /readyz stops saying it is out of
// memory: one registry period, to which start adds the monitor's tick,
// the most a registry write can come after the period (the monitor
// writes at the first tick past it), so that this daemon's registry
// write, refused while Redis is full, went through in it. Redis that
// sits just at maxmemory takes some writes and refuses others as keys
// expire and memory fills again (and a script whose first write cannot
// grow memory, DEL or PEXPIRE, runs whole over maxmemory, so a claim can
// go through while the registry write is refused). Measured with three
// daemons (syncd run, 300 items due every second) on a Redis kept full
// for 30 or 40 s at a time: without a hold (and the first write through
// waking the claims), /readyz went back to ready up to 15 times in a
// spell, each time starting its "since" anew; with a hold of 1 s, up to
// 6 times; of 2 s, 3 times in one of 8 spells; of 2 s and the tick
// (250 ms), once, for 30 ms, in one of 6, and it said ready 0.6 to
// 1.9 s after memory was freed.
const oomHold = registryEvery

// start is called as the monitor starts: Redis counts as answering from
// now, for bound; the monitor ticks every tick.
func (h *health) start(bound, tick time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bound, h.answered, h.err = bound, time.Now(), nil
	h.hold = oomHold + tick
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

// wrote records how a write sent at sent went: an out-of-memory
// refusal (store.IsOutOfMemory) marks Redis out of memory, from the
// first refusal on until outOfMemory's hold ends; the first write sent
// after a refusal that goes through wakes whoever waits on
// writesResumed; other errors tell nothing about memory. A write sent
// before the last refusal came back tells nothing of Redis since, as a
// call does for an ACL refusal (refusals.cleared). Report only a write
// that wrote: a script that found nothing to write is not refused under
// maxmemory.
func (h *health) wrote(err error, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	switch {
	case err == nil:
		if !sent.After(h.refused) {
			return
		}
		if h.refused.After(h.wentOK) && h.resumed != nil {
			close(h.resumed) // the first since a refusal
			h.resumed = nil
		}
		if sent.After(h.wentOK) {
			h.wentOK = sent
		}
	case store.IsOutOfMemory(err):
		if h.oom.IsZero() || h.holdEnded(now) {
			h.oom = now // a new spell, though no one read the last one's end
		}
		h.refused = now
	}
}

// holdEnded reports whether the hold of a spell out of memory has ended
// at now: a write went through since the last refusal, the hold ago or
// more.
func (h *health) holdEnded(now time.Time) bool {
	return h.wentOK.After(h.refused) && now.Sub(h.refused) >= max(h.hold, oomHold)
}

// writesResumed returns a channel closed when a write goes through
// after Redis refused one for lack of memory. The scheduler takes it
// before a claim round and waits on it as it backs off after a failed
// one: the rounds an out-of-memory Redis refuses back off to 5 s, and
// /readyz said "not claiming yet" for up to that long after memory was
// freed, while the daemon's registry writes went through.
func (h *health) writesResumed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resumed == nil {
		h.resumed = make(chan struct{})
	}
	return h.resumed
}

// outOfMemory returns since when Redis refuses writes for lack of
// memory: its first refusal, held until a write went through and none
// was refused for the hold (oomHold); the zero time while it takes them.
func (h *health) outOfMemory() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holdEnded(time.Now()) {
		h.oom = time.Time{}
	}
	return h.oom
}
