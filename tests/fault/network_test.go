package fault

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Connections between daemons and Redis are cut, or Redis's replies are
// delayed past the client's read timeout, through a TCP proxy per daemon.
// Claims whose reply was lost are ambiguous: they must be resolved (the
// item synced in the end) and never leaked (no record lives on without a
// running write much beyond a ttl), and no foreign claim may be extended
// or released (invariants 1 and 2).
func TestConnections(t *testing.T) {
	processTest(t)
	f := newFleet(t, fleetOpts{Prefix: "net", Fast: 8, Slow: 4, ReadTimeout: 250 * time.Millisecond, Proxy: true, Watch: true})
	delay := f.o.ReadTimeout * 3 / 2
	window := 2 * f.o.TTL
	leak := 2*f.o.TTL + time.Second
	// A record outlives its write by the release's round trip; count
	// only those that stay noticeably longer.
	const orphanMin = 250 * time.Millisecond
	// The claim script's mode argument, as go-redis writes it: only the
	// daemon's (pick) claim requests carry it.
	claimMarker := []byte("\r\n$4\r\npick\r\n")
	sc := newScenario(t, f, "Connection cuts and delayed replies between daemons and Redis",
		fmt.Sprintf("Each daemon reaches Redis through its own in-process TCP proxy. *cut ×5*: every connection "+
			"of every daemon is closed five times, 100–500 ms apart. *partition*: everything between the "+
			"daemon that runs a slow sync and Redis is dropped for %v = 1.5 × ttl, then every connection is "+
			"reset. *delayed*: for %v, replies from Redis are held %v = 1.5 × redis.read_timeout, so the "+
			"commands run in Redis while the client has given up on them (go-redis retries some of them "+
			"itself, on a new connection): every reply to the daemon that runs a slow sync; the replies to "+
			"every claim script call of every daemon (every claim is ambiguous and must be resolved by the "+
			"confirm read); or 60%% of all replies to every daemon. A watcher reads every claim record every "+
			"50 ms: a record that lives on with none of its writes running is an *orphan* (counted when it "+
			"stays over 250 ms); it must be gone within ttl of its last claim or heartbeat, and within %v "+
			"in all (its ttl plus the client's retries before a confirm), longer counts as a leak. A write of a partitioned or all-delayed daemon running when the fault began must end "+
			"within ttl (*held past ttl* otherwise). Recovery: from the end of the fault to the begin of each "+
			"item's next accepted write.",
			f.o.TTL*3/2, window, delay, leak))
	variants := []string{
		"cut ×5, every daemon",
		"partition, one daemon",
		"all replies delayed, one daemon",
		"claim replies delayed, every daemon",
		"60% of replies delayed, every daemon",
	}
	for range trials(2) {
		for _, v := range variants {
			slot := f.waitSlowInFlight()
			host := f.daemon(slot).host
			pre := f.mustState()
			offs := f.logOffsets()
			cuts := int64(0)
			for _, p := range f.proxies {
				cuts -= p.cuts.Load()
			}
			tr := sc.begin(v)
			t0 := time.Now()
			limit := time.Duration(0)
			switch v {
			case "cut ×5, every daemon":
				host = ""
				for i := range 5 {
					if i > 0 {
						time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond) // the fault itself
					}
					for _, p := range f.proxies {
						p.cutAll()
					}
				}
			case "partition, one daemon":
				limit = f.o.TTL
				f.proxies[slot].partition()
				time.Sleep(f.o.TTL * 3 / 2) // the fault itself
				f.proxies[slot].heal()
			case "all replies delayed, one daemon":
				limit = f.o.TTL
				f.proxies[slot].setDelay(delay, 1)
				time.Sleep(window) // the fault itself
				f.proxies[slot].setDelay(0, 0)
			case "claim replies delayed, every daemon":
				host = ""
				for _, p := range f.proxies {
					p.delayRepliesTo(claimMarker, delay)
				}
				time.Sleep(window) // the fault itself
				for _, p := range f.proxies {
					p.delayRepliesTo(nil, 0)
				}
			default:
				host = ""
				for _, p := range f.proxies {
					p.setDelay(delay, 0.6)
				}
				time.Sleep(window) // the fault itself
				for _, p := range f.proxies {
					p.setDelay(0, 0)
				}
			}
			t1 := time.Now()
			rec, stranded := f.awaitSynced(t1, 0)
			sc.stranded(tr, stranded, t1, 0)
			for _, r := range rec {
				tr.Recovery = append(tr.Recovery, r)
			}
			for _, p := range f.proxies {
				cuts += p.cuts.Load()
			}
			if cuts > 0 {
				tr.Counts["connections cut"] = int(cuts)
			}
			// Orphans: wait until every record seen during the trial had
			// the time to expire, then look.
			time.Sleep(time.Until(t1.Add(f.o.TTL))) // a record's lifetime, not a condition
			ws, _ := f.chk.snapshot()
			orphans, badTTL := f.watch.orphans(t0, ws)
			for k, o := range orphans {
				tr.Maxes["longest orphan record"] = max(tr.Maxes["longest orphan record"], o.lived)
				tr.Maxes["longest orphan record after its last claim or heartbeat"] = max(tr.Maxes["longest orphan record after its last claim or heartbeat"], o.untouched)
				if o.lived > orphanMin {
					tr.Counts["orphan records"]++
				}
				if o.lived > leak {
					tr.Counts["leaked records"]++
					t.Errorf("%s: record of %s (fence %d) lived %v with none of its writes running", v, k.id, k.fence, o.lived)
				}
				if o.untouched > f.o.TTL+250*time.Millisecond {
					tr.Counts["records outliving their ttl"]++
					t.Errorf("%s: record of %s (fence %d) lived %v after its last claim or heartbeat, with none of its writes running", v, k.id, k.fence, o.untouched)
				}
			}
			for _, b := range badTTL {
				t.Errorf("%s: %s", v, b)
			}
			logs := countLogs(offs)
			if late := fate(tr, ws, t0, host, limit); len(late) > 0 {
				t.Errorf("%s: writes held past ttl while their daemon could not reach Redis:\n  %s", v, strings.Join(late, "\n  "))
			}
			tr.Counts["ambiguous claims (reply lost)"] = logs[msgUnknown]
			if v == "claim replies delayed, every daemon" && logs[msgUnknown] == 0 {
				// Otherwise the variant tests nothing (the marker no longer
				// matches the claims, say).
				t.Errorf("%s: no daemon lost a claim reply", v)
			}
			tr.Counts["syncs cancelled (lease lost)"] = logs[msgLost]
			tr.Counts["synced but not recorded"] = logs[msgUnrecorded]
			sc.lost(tr, lostAcks(pre, f.mustState()))
			sc.end(tr)
		}
	}
	sc.finish()
}
