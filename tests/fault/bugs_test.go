package fault

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// knownBugs runs the tests of known bugs instead of skipping them.
func knownBugs(t *testing.T, issue string) {
	t.Helper()
	if os.Getenv("SYNCD_FAULT_KNOWN_BUGS") != "1" {
		t.Skip("known bug, not fixed yet (SYNCD_FAULT_KNOWN_BUGS=1 runs it): " + issue)
	}
}

// Known bug. A claim whose reply is lost (every attempt go-redis makes
// times out while Redis ran the script) is resolved by the confirm read
// in ownership.Manager.Claim. When the confirm finds the claim, the lease
// is built from a ClaimResult that holds only the ID and the fence:
// LastSync, Attempt and PrevDue are zero. The sink is then told the item
// never synced (the http sink sends "last_sync": null, the exec sink
// SYNCD_LAST_SYNC_MS of zero) and that this is attempt 1, although Redis
// holds the item's lastSync and attempt count; a sink that syncs
// incrementally from last_sync does a full sync, and max_attempts is
// judged on attempt 1. Nothing else goes wrong: the claim is safe and the
// release records the right lastSync.
//
// Reproduce: one daemon behind the proxy, redis.read_timeout 250ms;
// after every item synced once, delay the reply to every claim script
// call by 375ms. Within a few seconds a write arrives with last_sync null
// right after the daemon logged "claim reply lost; confirming".
func TestAmbiguousClaimForgetsLastSync(t *testing.T) {
	// Fixed: the confirmed claim is read back with the claim script
	// (idempotent for its token), which returns attempt and lastSync.
	processTest(t)
	f := newFleet(t, fleetOpts{Prefix: "lastsync", Daemons: 1, Workers: 2, Fast: 3, ReadTimeout: 250 * time.Millisecond, Proxy: true})
	f.waitFor(10*time.Second, "every item's lastSync recorded", func() bool {
		st, err := f.state()
		if err != nil {
			return false
		}
		for _, id := range f.normal {
			if st[id].LastSyncMs == 0 {
				return false
			}
		}
		return true
	})
	d := f.daemon(0)
	pre := f.mustState()
	off := d.logSize()
	t0 := time.Now()
	f.proxies[0].delayRepliesTo([]byte("\r\n$4\r\npick\r\n"), 375*time.Millisecond)
	var got []write
	f.waitFor(20*time.Second, "a write after a confirmed ambiguous claim", func() bool {
		got = got[:0]
		ws, _ := f.chk.snapshot()
		for _, w := range ws {
			if w.Begin.After(t0) && w.Outcome == accepted {
				got = append(got, w)
			}
		}
		return len(got) > 0
	})
	f.proxies[0].delayRepliesTo(nil, 0)
	logs := d.countLog(off)
	if logs[msgUnknown] == 0 {
		t.Errorf("the daemon lost no claim reply (%q never logged): the fault did not happen", msgUnknown)
	}
	for _, w := range got {
		if w.Last.IsZero() {
			t.Errorf("%v: told last_sync null and attempt %d, but before the fault Redis had lastSync %s and attempts %d for it (the daemon logged %q %d times)",
				w, w.Attempt, time.UnixMilli(pre[w.ID].LastSyncMs).UTC().Format(time.RFC3339Nano), pre[w.ID].Attempts, msgUnknown, logs[msgUnknown])
		}
	}
	if !t.Failed() {
		t.Logf("fixed? no write after %q was told last_sync null", msgUnknown)
	}
}

// Known bug. When Redis lost its data, the first claim of each shard sets
// the shard's epoch marker with a hold-off of ttl − uptime, uptime taken
// from INFO's uptime_in_seconds (store.Store.MarkEpoch). The comment there
// says the value is rounded down, so the hold errs long. It is not an
// uptime rounded down: Redis computes it as floor(now) − floor(start), in
// whole seconds, so a Redis that started at 12:00:00.95 reports an uptime
// of 1 s at 12:00:01.05, after 100 ms. The hold-off is then up to one
// second short, and a new claim can be granted while an owner from before
// the crash still trusts its lease (until its last heartbeat + ttl −
// margin): two owners at once. It bites whenever margin < 1 s, that is
// with the default margin (ttl/10) for every ttl below about 10 s.
//
// Reproduce (this test, about 15 s): two daemons, each behind a proxy,
// ttl 2s, heartbeat 100ms, Redis without persistence, one item whose
// sync the checker holds for 1 s. Let the checker hold one write of the
// item until 1.5 s after the kill; kill -9 Redis at hh:mm:ss.88 and cut
// the owner off from Redis (so its heartbeats cannot find its record gone
// and it keeps trusting its lease until about kill + 1.8 s); restart
// Redis at once; run `syncd items add` just after the next second
// boundary. The other daemon logs hold_off 1000 (not 2000), claims the
// item about 1.2 s after the kill, and both writes are accepted while
// they overlap.
func TestHoldOffAfterDataLossTooShort(t *testing.T) {
	// Fixed: store.MarkEpoch took a second off the reported uptime, and
	// now holds a shard off one whole ttl whatever the uptime (a FLUSHALL
	// on a Redis up for days loses the data too: TestRedisRestart/flushall).
	// The repro is slow (up to 35 s) and timing-dependent, so it runs on
	// demand.
	knownBugs(t, "slow regression test: the hold-off after Redis lost its data must not be up to 1 s short of one ttl (uptime_in_seconds is floor(now) - floor(start))")
	processTest(t)
	const id = "slow-0"
	var target atomic.Pointer[time.Time] // hold the next write of id until then
	hold := func(string) time.Duration {
		if end := target.Swap(nil); end != nil {
			return time.Until(*end)
		}
		return time.Second
	}
	f := newFleet(t, fleetOpts{Prefix: "holdoff", Daemons: 2, Slow: 1, Interval: 100 * time.Millisecond,
		Heartbeat: 100 * time.Millisecond, Proxy: true, Hold: hold})
	f.wiped = true
	safe := f.o.TTL - f.o.margin() // a lease from before the kill may be trusted until kill + safe
	for attempt := 1; attempt <= 5; attempt++ {
		// The kill, at hh:mm:ss.88 at least 2.5 s from now; the write
		// held at that moment ends 1.5 s after it.
		now := time.Now()
		t0 := now.Truncate(time.Second).Add(880 * time.Millisecond)
		for t0.Sub(now) < 2500*time.Millisecond {
			t0 = t0.Add(time.Second)
		}
		end := t0.Add(1500 * time.Millisecond)
		// Wait for the item's sync before the kill to arrive: it takes the
		// target end. Retry when it arrives too late.
		f.waitFor(5*time.Second, "the write before the kill", func() bool { return time.Now().After(t0.Add(-1200 * time.Millisecond)) })
		target.Store(&end)
		var old write
		f.waitFor(5*time.Second, "a write held across the kill", func() bool {
			ws, _ := f.chk.snapshot()
			for _, w := range ws {
				if w.Outcome == inFlight && w.ID == id && target.Load() == nil {
					old = w
					return true
				}
			}
			return false
		})
		if !old.Begin.Before(t0) {
			t.Logf("attempt %d: the write arrived after the kill time; again", attempt)
			continue
		}
		slot := f.slotOf(old.Host)
		time.Sleep(time.Until(t0)) // a point on the wall clock, not a condition
		f.proxies[slot].partition()
		f.srv.Kill(t)
		f.srv.Restart(t)
		restarted := time.Now()
		time.Sleep(time.Until(t0.Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
		f.cli("items", "add", id)
		f.waitFor(10*time.Second, "the old write to end and a new one to be accepted", func() bool {
			ws, _ := f.chk.snapshot()
			done := false
			for _, w := range ws {
				if w.N == old.N && w.Outcome != inFlight {
					old = w
					done = true
				}
			}
			return done && len(f.chk.firstAccepted([]string{id}, t0)) > 0
		})
		f.proxies[slot].heal()
		ws, _ := f.chk.snapshot()
		var first write
		for _, w := range ws {
			if w.ID == id && w.Fence >= uint64(t0.UnixMicro()) && (first.Begin.IsZero() || w.Begin.Before(first.Begin)) {
				first = w
			}
		}
		t.Logf("attempt %d: Redis killed at %s and restarted by %s; old owner's write %v; first new write %v, %v after the kill",
			attempt, t0.Format("15:04:05.000"), restarted.Format("15:04:05.000"), old, first, first.Begin.Sub(t0))
		if first.Begin.IsZero() || !first.Begin.Before(t0.Add(safe)) {
			t.Logf("attempt %d: no claim inside the hold-off this time", attempt)
			continue
		}
		t.Errorf("%v began %v after Redis was killed, while the owner from before the crash could trust its lease until %v after it (ttl %v − margin %v)",
			first, first.Begin.Sub(t0), safe, f.o.TTL, f.o.margin())
		if v := analyze(ws, nil, true); len(v.Overlaps) > 0 {
			t.Errorf("two owners at once, both writes accepted:\n  %s", strings.Join(v.Overlaps, "\n  "))
		}
		for _, d := range f.daemons {
			t.Logf("%s: %s", d.host, grepLog(d.log, "hold_off"))
		}
		return
	}
	t.Log("not reproduced in 5 attempts (the timing did not line up), or the bug is fixed")
}

// grepLog returns the lines of a log that contain s.
func grepLog(path, s string) string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
