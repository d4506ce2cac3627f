package fault

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/syncd/syncd/store"
)

// A random daemon of three dies with SIGKILL while the checker holds one
// of its writes. Its items come back when their leases expire: nothing
// stranded, recovery about one ttl.
func TestDaemonKill(t *testing.T) {
	processTest(t)
	f := newFleet(t, fleetOpts{Prefix: "kill", Fast: 12})
	sc := newScenario(t, f, "Daemon SIGKILL mid-sync",
		"A random daemon of three gets SIGKILL while the checker holds at least one of its writes, and is "+
			"started again once every item has synced after the kill. Recovery: from the kill to the begin of "+
			"the next accepted write of each item the dead daemon had in flight (its lease must expire first, "+
			"so expect a little under one ttl).")
	for range trials(3) {
		slot := rand.IntN(f.o.Daemons)
		d := f.daemon(slot)
		pre := f.mustState()
		var inflight []write
		f.waitFor(10*time.Second, d.host+" syncing", func() bool {
			inflight = f.chk.inFlightBy(d.host)
			return len(inflight) > 0
		})
		tr := sc.begin("SIGKILL 1 of 3")
		t0 := time.Now()
		if err := d.kill(); err != nil {
			t.Fatal(err)
		}
		// The dead daemon's records stay until they expire: when?
		expiry := map[string]time.Time{}
		if st, err := f.state(); err == nil {
			now := time.Now()
			for _, w := range inflight {
				if r := st[w.ID]; r.Record != nil && r.Record.Owner.Host == d.host {
					expiry[w.ID] = now.Add(r.RecordTTL)
				}
			}
		}
		rec, stranded := f.awaitSynced(t0, 0)
		sc.stranded(tr, stranded, t0, 0)
		for _, w := range inflight {
			r, ok := rec[w.ID]
			if !ok {
				continue
			}
			tr.Recovery = append(tr.Recovery, r)
			if e, ok := expiry[w.ID]; ok {
				tr.Maxes["lease left at the kill, at most"] = max(tr.Maxes["lease left at the kill, at most"], e.Sub(t0))
				tr.Maxes["next write after the lease expired, at most"] = max(tr.Maxes["next write after the lease expired, at most"], t0.Add(r).Sub(e))
			}
		}
		tr.Counts["writes in flight at the kill"] = len(inflight)
		sc.lost(tr, lostAcks(pre, f.mustState()))
		f.start(slot)
		sc.end(tr)
	}
	sc.finish()
}

// A daemon stopped with SIGSTOP for 0.5, 0.9, 1.5 and 3 ttl, then
// continued. While stopped it cannot cancel anything; what matters is
// that after SIGCONT its late writes are refused by fence or never sent,
// and that no stale write is ACCEPTED.
func TestDaemonPause(t *testing.T) {
	processTest(t)
	f := newFleet(t, fleetOpts{Prefix: "pause", Fast: 12, Settle: 300 * time.Millisecond})
	sc := newScenario(t, f, "Daemon SIGSTOP, then SIGCONT",
		"A random daemon of three is stopped with SIGSTOP, either while the checker holds one of its writes "+
			"(\"in a POST\") or while one of its claims is in the settle wait, before the POST is sent (\"between "+
			"claim and POST\", found by reading the claim records in Redis), and continued after the given time. "+
			"*Late writes* are the writes of the stopped daemon that reached the checker after SIGCONT for claims "+
			"made before SIGSTOP (fence below the stop time in µs). A stale write is one that reached the checker "+
			"after a higher fence of its item had; none may be accepted. The sync duration stays below ttl − margin "+
			"on purpose: a write the checker already holds when its sender stops is finished by the checker on its "+
			"own, and if it outlived the lease a fence check at commit alone could not keep it from overlapping "+
			"the next owner's (see \"Limits\" in RELIABILITY.md).")
	factors := []float64{0.5, 0.9, 1.5, 3}
	for trial := range trials(1) {
		for i, k := range factors {
			inClaim := (trial+i)%2 == 1
			where := "in a POST"
			if inClaim {
				where = "between claim and POST"
			}
			slot := rand.IntN(f.o.Daemons)
			d := f.daemon(slot)
			pre := f.mustState()
			if inClaim {
				f.waitFor(10*time.Second, d.host+" in the settle wait", func() bool {
					st, err := f.state()
					if err != nil {
						return false
					}
					for _, s := range st {
						if s.Record != nil && s.Record.Owner.Host == d.host && s.Record.State == store.StateClaimed {
							return true
						}
					}
					return false
				})
			} else {
				f.waitFor(10*time.Second, d.host+" syncing", func() bool { return len(f.chk.inFlightBy(d.host)) > 0 })
			}
			held := f.chk.inFlightBy(d.host)
			off := d.logSize()
			tr := sc.begin(fmt.Sprintf("SIGSTOP %.1f×ttl, %s", k, where))
			t0 := time.Now()
			d.pause(t)
			time.Sleep(time.Duration(k * float64(f.o.TTL))) // the fault itself
			d.resume(t)
			t1 := time.Now()
			rec, stranded := f.awaitSynced(t1, 0)
			sc.stranded(tr, stranded, t1, 0)
			for _, r := range rec {
				tr.Recovery = append(tr.Recovery, r)
			}
			// Let the resumed daemon finish what it had started.
			f.waitFor(f.o.TTL+f.o.Sync+5*time.Second, d.host+"'s old writes to end", func() bool {
				for _, w := range f.chk.inFlightBy(d.host) {
					if w.Fence < uint64(t0.UnixMicro()) {
						return false
					}
				}
				return true
			})
			ws, _ := f.chk.snapshot()
			heldIDs := map[int]bool{}
			for _, w := range held {
				heldIDs[w.N] = true
			}
			for _, w := range ws {
				switch {
				case heldIDs[w.N]:
					tr.Counts["held at SIGSTOP, "+string(w.Outcome)]++
				case w.Host == d.host && !w.Begin.Before(t1) && w.Fence < uint64(t0.UnixMicro()):
					tr.Counts["late writes, "+string(w.Outcome)]++
				}
			}
			logs := d.countLog(off)
			tr.Counts["syncs cancelled (lease lost)"] = logs[msgLost]
			tr.Counts["synced but not recorded"] = logs[msgUnrecorded]
			tr.Counts["claims not confirmed after settle"] = logs[msgNotConfirmed]
			if n := logs[msgStale]; n > 0 {
				tr.Counts["fence refused by the sink"] = n
			}
			sc.lost(tr, lostAcks(pre, f.mustState()))
			sc.end(tr)
		}
	}
	sc.finish()
}

// The limit of fencing at commit: a daemon stopped while the checker holds
// a write that outlives the lease. The checker finishes that write on its
// own while the next owner's is running, and a target that compares the
// fence only with the last fence it ACCEPTED takes both: an overlap that
// no lease can prevent (the stopped process cannot cancel anything). A
// target that refuses a fence lower than one it has already SEEN would
// refuse the older write; the checker marks such writes "superseded". The
// test tolerates exactly those overlaps and fails on any other.
func TestDaemonPauseLongSync(t *testing.T) {
	processTest(t)
	f := newFleet(t, fleetOpts{Prefix: "longpause", Fast: 6, Sync: 3 * time.Second})
	sc := newScenario(t, f, "Daemon SIGSTOP in a POST longer than the lease",
		"Every sync takes 1.5 × ttl, so leases live on heartbeats. A random daemon is stopped with SIGSTOP for "+
			"3 × ttl while the checker holds one of its writes, then continued. Its lease expires and another "+
			"daemon takes the item with a higher fence while the checker still holds the stopped daemon's "+
			"write. Overlaps of accepted writes are expected here when the held write ends while the new "+
			"owner's is running: they are counted (\"overlaps a target refusing superseded fences would have "+
			"prevented\") and only fail the test when the older write was not superseded or its sender was "+
			"not stopped when the newer write arrived.")
	type pause struct {
		host     string
		from, to time.Time
	}
	var pauses []pause
	sc.tolerate = func(p [2]write) bool {
		for _, x := range pauses {
			if p[0].Host == x.host && p[0].Superseded && !p[1].Begin.Before(x.from) && p[1].Begin.Before(x.to) {
				return true
			}
		}
		return false
	}
	for range trials(2) {
		d := f.daemon(rand.IntN(f.o.Daemons))
		pre := f.mustState()
		var held []write
		f.waitFor(20*time.Second, d.host+" syncing", func() bool {
			held = f.chk.inFlightBy(d.host)
			return len(held) > 0
		})
		off := d.logSize()
		tr := sc.begin("SIGSTOP 3.0×ttl, in a 1.5×ttl POST")
		t0 := time.Now()
		d.pause(t)
		time.Sleep(3 * f.o.TTL) // the fault itself
		d.resume(t)
		t1 := time.Now()
		pauses = append(pauses, pause{d.host, t0, t1})
		rec, stranded := f.awaitSynced(t1, 0)
		sc.stranded(tr, stranded, t1, 0)
		for _, r := range rec {
			tr.Recovery = append(tr.Recovery, r)
		}
		ws, _ := f.chk.snapshot()
		heldN := map[int]bool{}
		for _, w := range held {
			heldN[w.N] = true
		}
		for _, w := range ws {
			if heldN[w.N] {
				tr.Counts["held at SIGSTOP, "+string(w.Outcome)]++
				if w.Superseded {
					tr.Counts["held at SIGSTOP, superseded when it ended"]++
				}
			}
		}
		logs := d.countLog(off)
		tr.Counts["synced but not recorded"] = logs[msgUnrecorded]
		tr.Counts["syncs cancelled (lease lost)"] = logs[msgLost]
		sc.lost(tr, lostAcks(pre, f.mustState()))
		sc.end(tr)
	}
	sc.finish()
}
