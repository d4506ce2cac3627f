package fault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// waitSlowInFlight waits until the checker holds at least one slow write,
// so that a fault finds leases that need their heartbeats, and returns
// the slot of the daemon that sent it.
func (f *fleet) waitSlowInFlight() int {
	f.t.Helper()
	slot := -1
	f.waitFor(20*time.Second, "a slow sync in flight", func() bool {
		ws, _ := f.chk.snapshot()
		for _, w := range ws {
			if w.Outcome == inFlight && f.hold(w.ID) == f.o.SlowSync {
				if slot = f.slotOf(w.Host); slot >= 0 {
					return true
				}
			}
		}
		return false
	})
	return slot
}

// slotOf returns the slot of the current daemon named host, or -1.
func (f *fleet) slotOf(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, d := range f.daemons {
		if d.host == host {
			return i
		}
	}
	return -1
}

// fate counts how the writes running at t0 (of host, or of every daemon
// when host is "") ended, and the longest a cancelled one ran on after t0.
// With limit > 0 it returns those still held by the checker more than
// limit after t0: their leases could not have been trusted that long.
func fate(tr *trial, ws []write, t0 time.Time, host string, limit time.Duration) []string {
	var late []string
	for _, w := range runningAt(ws, t0) {
		if host != "" && w.Host != host {
			continue
		}
		end := w.End
		if w.Outcome == inFlight {
			end = time.Now()
		}
		after := end.Sub(t0)
		tr.Counts["running at the fault, "+string(w.Outcome)]++
		if w.Outcome == cancelled {
			tr.Maxes["cancelled after the fault began, at most"] = max(tr.Maxes["cancelled after the fault began, at most"], after)
		}
		if limit > 0 && after > limit {
			late = append(late, fmt.Sprintf("%v: still held %v after the fault began", w, after))
		}
	}
	if len(late) > 0 {
		tr.Counts["held past ttl"] += len(late)
	}
	return late
}

// logOffsets remembers where every current daemon's log ends.
func (f *fleet) logOffsets() map[*daemon]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[*daemon]int64{}
	for _, d := range f.daemons {
		out[d] = d.logSize()
	}
	return out
}

// countLogs sums the daemons' log messages written after offs.
func countLogs(offs map[*daemon]int64) map[string]int {
	sum := map[string]int{}
	for d, off := range offs {
		for k, v := range d.countLog(off) {
			sum[k] += v
		}
	}
	return sum
}

// runningAt returns the writes that had begun before t and had not ended
// by then.
func runningAt(ws []write, t time.Time) []write {
	var out []write
	for _, w := range ws {
		if w.Begin.Before(t) && (w.Outcome == inFlight || w.End.After(t)) {
			out = append(out, w)
		}
	}
	return out
}

// Redis stalls for longer than a ttl, by SIGSTOP or by CLIENT PAUSE
// WRITE. Leases must be given up by the trust window (running syncs
// cancelled), not held blindly, and the fleet must recover when Redis
// answers again.
func TestRedisStall(t *testing.T) {
	processTest(t)
	f := newFleet(t, fleetOpts{Prefix: "stall", Fast: 8, Slow: 4})
	stall := f.o.TTL * 3 / 2
	sc := newScenario(t, f, "Redis stalls longer than ttl",
		fmt.Sprintf("Redis is stopped with SIGSTOP, or paused for writes with `CLIENT PAUSE %d WRITE` (scripts, "+
			"hence claims, heartbeats and releases, block; keys do not expire meanwhile), for %v = 1.5 × ttl, "+
			"while at least one slow sync runs. Every write running when the stall began must end by the "+
			"trust window: its last heartbeat was sent before the stall, so it must be cancelled (or finish) "+
			"within ttl − margin of the stall's start; one still held by the checker after ttl counts as *held "+
			"past ttl*. Recovery: from the end of the stall to the begin of each item's next accepted write.",
			stall.Milliseconds(), stall))
	for range trials(2) {
		for _, kind := range []string{"SIGSTOP", "CLIENT PAUSE WRITE"} {
			f.waitSlowInFlight()
			pre := f.mustState()
			offs := f.logOffsets()
			tr := sc.begin(fmt.Sprintf("%s %v", kind, stall))
			t0 := time.Now()
			switch kind {
			case "SIGSTOP":
				f.srv.Pause(t)
				time.Sleep(stall) // the fault itself
				f.srv.Resume(t)
			default:
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := f.rdb.Do(ctx, "CLIENT", "PAUSE", stall.Milliseconds(), "WRITE").Err()
				cancel()
				if err != nil {
					t.Fatalf("CLIENT PAUSE: %v", err)
				}
				time.Sleep(time.Until(t0.Add(stall))) // Redis unpauses by itself
			}
			t1 := time.Now()
			rec, stranded := f.awaitSynced(t1, 0)
			sc.stranded(tr, stranded, t1, 0)
			for _, r := range rec {
				tr.Recovery = append(tr.Recovery, r)
			}
			ws, _ := f.chk.snapshot()
			if blind := fate(tr, ws, t0, "", f.o.TTL); len(blind) > 0 {
				t.Errorf("%s: writes held past ttl while Redis stalled (the lease was not given up):\n  %s", tr.Variant, strings.Join(blind, "\n  "))
			}
			logs := countLogs(offs)
			tr.Counts["syncs cancelled (lease lost)"] = logs[msgLost]
			tr.Counts["synced but not recorded"] = logs[msgUnrecorded]
			sc.lost(tr, lostAcks(pre, f.mustState()))
			sc.end(tr)
		}
	}
	sc.finish()
}

// afterLoss waits, from since, for every item to sync after Redis lost
// its data (what) at t0, and checks the trial's writes: no claim made
// after the loss (begun from since, with a fence, from Redis's clock, of
// newer or later) began before every lease from before could have
// expired (t0 + ttl − margin), and each daemon logged the loss once.
func (sc *scenario) afterLoss(tr *trial, offs map[*daemon]int64, what string, t0, since, newer time.Time) {
	t, f := sc.t, sc.f
	rec, stranded := f.awaitSynced(since, 0)
	sc.stranded(tr, stranded, since, f.o.TTL)
	for _, r := range rec {
		tr.Recovery = append(tr.Recovery, r)
	}
	ws, _ := f.chk.snapshot()
	fate(tr, ws, t0, "", 0)
	first := time.Time{}
	early := 0
	for _, w := range ws {
		if w.Begin.Before(since) || w.Fence < uint64(newer.UnixMicro()) {
			continue // not a claim made after the loss
		}
		if first.IsZero() || w.Begin.Before(first) {
			first = w.Begin
		}
		if w.Begin.Before(t0.Add(f.o.TTL - f.o.margin())) {
			early++
			t.Errorf("%v began %v after %s, before every earlier lease could have expired", w, w.Begin.Sub(t0), what)
		}
	}
	tr.Counts["writes begun inside the hold-off"] = early
	if !first.IsZero() {
		tr.Maxes["first new write after "+what+", at most"] = first.Sub(t0)
	}
	logs := countLogs(offs)
	tr.Counts["syncs cancelled (lease lost)"] = logs[msgLost]
	tr.Counts["shards held off (daemon logs)"] = logs[msgHeldOff]
	tr.Counts["data losses logged"] = logs[msgDataLoss]
	for d, off := range offs {
		if n := d.countLog(off)[msgDataLoss]; n != 1 {
			t.Errorf("%s logged the data loss %d times, want once", d.host, n)
		}
	}
}

// Redis dies (kill -9) and comes back. Without persistence every item,
// claim and fence counter is gone: the operator adds the items again, and
// no claim may be made while an owner from before can still be running.
// With AOF nothing acknowledged may be lost.
func TestRedisRestart(t *testing.T) {
	processTest(t)
	t.Run("no persistence", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, fleetOpts{Prefix: "restart", Fast: 26, Slow: 4})
		f.wiped = true
		sc := newScenario(t, f, "Redis kill -9 and restart without persistence, daemons paused",
			"Every daemon is paused (SIGSTOP) while at least one slow sync runs; Redis is killed with SIGKILL "+
				"and restarted at once, empty; the daemons are resumed one ttl later. Nobody adds the items "+
				"back: each daemon sees the deployment's marker gone, logs the data loss once, and restores "+
				"the items of its config. "+
				"Owners from before the crash may still be running: their heartbeats find their records gone, "+
				"and no new claim may begin before every earlier lease could have expired (kill + ttl − margin). "+
				"Recovery: from the resume to the begin of each item's next accepted write, bounded by "+
				"ttl + interval + the item's sync.")
		for range trials(2) {
			f.waitSlowInFlight()
			offs := f.logOffsets()
			tr := sc.begin("pause the daemons, kill -9, restart empty, resume after ttl")
			for _, d := range f.daemons {
				d.pause(t)
			}
			t0 := time.Now()
			f.srv.Kill(t)
			f.srv.Restart(t)
			time.Sleep(f.o.TTL + 200*time.Millisecond)
			for _, d := range f.daemons {
				d.resume(t)
			}
			sc.afterLoss(tr, offs, "the kill", t0, time.Now(), t0)
			sc.end(tr)
		}
		sc.finish()
	})
	t.Run("flushall", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, fleetOpts{Prefix: "flush", Fast: 12, Slow: 4})
		f.wiped = true
		sc := newScenario(t, f, "FLUSHALL under running daemons",
			"While at least one slow sync runs, the operator runs FLUSHALL on a Redis that has been up "+
				"longer than one ttl; the daemons keep running. Each sees the deployment's marker gone, "+
				"logs the data loss once and restores the items of its config. Owners from before may still "+
				"be running until their next heartbeat finds their records gone, so no new claim may begin "+
				"before every earlier lease could have expired (flush + ttl − margin): a Redis up longer "+
				"than ttl tells nothing, and the shards are held off one ttl from when a claim first finds "+
				"their epoch markers gone. Recovery: from the flush to the begin of each item's next "+
				"accepted write, bounded by ttl + interval + the item's sync.")
		for range trials(2) {
			f.waitSlowInFlight()
			offs := f.logOffsets()
			tr := sc.begin("FLUSHALL, daemons running")
			t0 := time.Now()
			if err := f.rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			// Redis ran the flush between t0 and flushed: a claim whose
			// fence (Redis's clock) is below flushed may have come first.
			sc.afterLoss(tr, offs, "the FLUSHALL", t0, t0, time.Now())
			sc.end(tr)
		}
		sc.finish()
	})
	t.Run("AOF", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, fleetOpts{Prefix: "aof", Fast: 8, Slow: 4, AOF: true})
		sc := newScenario(t, f, "Redis kill -9 and restart with AOF",
			"Redis (appendonly yes, appendfsync everysec) is killed with SIGKILL while at least one slow sync "+
				"runs and restarted at once from its AOF. The state read from Redis just before the kill must "+
				"be there after the restart: every item, lastSync and fence not lower, the poison item still "+
				"quarantined. Before the kill, the test waits until Redis has written its AOF buffer: with "+
				"everysec, Redis acknowledges writes it holds back for up to 2 s while a slow fsync runs, which "+
				"a kill -9 loses whatever syncd does. Recovery: from the restart to the begin of each item's "+
				"next accepted write.")
		for range trials(2) {
			f.waitSlowInFlight()
			offs := f.logOffsets()
			pre := f.mustState()
			f.awaitAOFWritten()
			tr := sc.begin("kill -9, restart from AOF")
			t0 := time.Now()
			f.srv.Kill(t)
			f.srv.Restart(t)
			t1 := time.Now()
			post := f.mustState()
			sc.lost(tr, lostAcks(pre, post))
			rec, stranded := f.awaitSynced(t1, 0)
			sc.stranded(tr, stranded, t1, 0)
			for _, r := range rec {
				tr.Recovery = append(tr.Recovery, r)
			}
			sc.lost(tr, lostAcks(post, f.mustState()))
			ws, _ := f.chk.snapshot()
			fate(tr, ws, t0, "", 0)
			tr.Counts["items checked"] = len(pre)
			logs := countLogs(offs)
			tr.Counts["syncs cancelled (lease lost)"] = logs[msgLost]
			sc.end(tr)
		}
		sc.finish()
	})
}
