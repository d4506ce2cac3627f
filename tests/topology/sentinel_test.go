package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// Sentinel failover under claim load. Four processes' worth of claim
// Managers claim due items through the Sentinels; the primary is killed
// while they do, either with the replica in sync or after it fell behind
// (its replication link held down for a moment), and with or without
// MinReplicas=1 (WAIT). After the failover every acknowledged claim is
// looked up on the new primary: a claim whose record is gone or someone
// else's was lost. Lost items are claimed again after the failover; such
// a second claim while the first owner still believes it holds the item
// is an overlap, and an overlap a fencing check would accept is one
// whose fence is not above the earlier claim's.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	modes := []failoverMode{
		{name: "async, replica in sync"},
		{name: "async, replica behind", lag: true},
		{name: "wait 1, replica in sync", minReplicas: 1},
		{name: "wait 1, replica behind", minReplicas: 1, lag: true},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			r := runFailover(t, mode)
			t.Logf("%s: %s", mode.name, r)
			if r.acked == 0 || r.ackedAfter == 0 {
				t.Errorf("no claims acknowledged (before %d, after the failover %d): the load did not run", r.acked, r.ackedAfter)
			}
			if r.fenceAccepted > 0 {
				t.Errorf("%d overlapping claims had a fence not above the earlier claim's: a fencing check would accept both writers", r.fenceAccepted)
			}
			if mode.minReplicas > 0 && r.lost > 0 {
				t.Errorf("%d claims acknowledged by a replica were lost in the failover", r.lost)
			}
			if mode.lag && mode.minReplicas == 0 && r.lostInLag == 0 {
				t.Errorf("no claim acknowledged while the replica was behind was lost: the scenario did not put the replica behind")
			}
		})
	}
}

type failoverMode struct {
	name        string
	minReplicas int
	lag         bool // hold the replication link down before the kill
}

// ack is one acknowledged claim.
type ack struct {
	lease *ownership.Lease
	at    time.Time
	phase int // when it was acknowledged: phaseBefore, phaseLag, ...
}

const (
	phaseBefore = iota // replica in sync
	phaseLag           // replica behind (lag modes only)
	phaseDown          // primary killed, failover not seen yet
	phaseAfter         // new primary known to the sentinels
)

type failoverResult struct {
	acked, ackedLag, ackedAfter int
	lost, lostInLag             int
	detected                    int // lost claims whose holder learned it (heartbeat) by the end
	overlaps, fenceAccepted     int
	handedBack                  int           // claim calls handed back: too few replicas acknowledged
	gap                         time.Duration // longest time without an acknowledged claim
	failover                    time.Duration // kill to the sentinels agreeing on a new primary
	errs                        map[string]int
}

func (r failoverResult) String() string {
	var errs []string
	for k, v := range r.errs {
		errs = append(errs, fmt.Sprintf("%q x%d", k, v))
	}
	slices.Sort(errs)
	return fmt.Sprintf("acknowledged %d before the kill (%d while the replica was behind), %d after; lost %d (%d of those acknowledged while behind), %d of them noticed by heartbeats; "+
		"overlaps %d, accepted by a fence check %d; claim calls handed back for lack of replicas %d; failover %v, longest time without an acknowledged claim %v; claim errors %s",
		r.acked, r.ackedLag, r.ackedAfter, r.lost, r.lostInLag, r.detected, r.overlaps, r.fenceAccepted, r.handedBack,
		r.failover.Round(10*time.Millisecond), r.gap.Round(10*time.Millisecond), strings.Join(errs, ", "))
}

func runFailover(t *testing.T, mode failoverMode) failoverResult {
	const (
		loaders = 4 // claiming processes
		shards  = 8
		items   = 3000
		ttl     = 30 * time.Second // records outlive the test
		every   = 12 * time.Millisecond
		master  = "mymaster"
	)
	primary := redistest.Start(t, nil)
	redistest.Start(t, &redistest.Options{ReplicaOf: primary})
	sentinels := redistest.StartSentinels(t, primary, 3, master)
	admin := primary.Client(t)
	ctx := t.Context()

	cfg := store.Config{Addrs: sentinels.Addrs(), MasterName: master, KeyPrefix: "fo", Shards: shards,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}
	setup, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%05d", i)
	}
	if _, err := setup.Add(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	for sh := range shards {
		if _, err := setup.MarkEpoch(ctx, sh, 0); err != nil { // a new deployment
			t.Fatal(err)
		}
	}
	setup.Close()
	// Everything so far is on the replica before the load starts.
	if err := admin.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		acks  []*ack
		errs  = map[string]int{}
		phase = phaseBefore
	)
	setPhase := func(p int) {
		mu.Lock()
		phase = p
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The loaders stop when the test function returns, however it does;
	// their stores and managers close after that, in t's cleanup.
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	for w := range loaders {
		st, err := store.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		m, err := ownership.New(st, ownership.Config{TTL: ttl, Heartbeat: time.Second,
			MinReplicas: mode.minReplicas, ReplicaTimeout: 300 * time.Millisecond,
			Owner: store.Owner{Host: fmt.Sprintf("loader-%d", w)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for sh := w; ; sh = (sh + 1) % shards {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				// The shard's longest-waiting due item, if any.
				var leases []*ownership.Lease
				res, err := m.ClaimPick(cctx, ownership.ClaimPickParams{Shard: sh, Workers: []int{0}})
				if res != nil {
					leases = res.Leases
				}
				cancel()
				now := time.Now()
				mu.Lock()
				if err != nil {
					errs[errClass(err)]++
				}
				for _, l := range leases {
					acks = append(acks, &ack{lease: l, at: now, phase: phase})
				}
				mu.Unlock()
			}
		}()
	}
	count := func(p int) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range acks {
			if a.phase == p {
				n++
			}
		}
		return n
	}

	waitFor(t, 20*time.Second, "claims before the fault", func() bool { return count(phaseBefore) >= 200 })
	if mode.lag {
		// Hold the replica behind: it cannot resynchronise while the
		// primary refuses PSYNC and SYNC, so what is written now reaches
		// no replica. Sentinels and syncd do not need those commands.
		if err := admin.Do(ctx, "ACL", "SETUSER", "default", "-psync", "-sync").Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
			t.Fatal(err)
		}
		setPhase(phaseLag)
		time.Sleep(1500 * time.Millisecond)
	}
	setPhase(phaseDown)
	killed := time.Now()
	primary.Kill(t)
	newAddr := sentinels.WaitForMaster(t, master, primary.Addr(), 30*time.Second)
	failover := time.Since(killed)
	setPhase(phaseAfter)
	// The old primary comes back empty and is made a replica of the new
	// one: until then, claims that WAIT for a replica stall. Sentinel
	// does that by itself after 8 s or more (12-13 s here, once over
	// 30 s); the test does it at once, as an operator would.
	primary.Restart(t)
	host, port, _ := strings.Cut(newAddr, ":")
	if err := admin.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "claims on the new primary", func() bool { return count(phaseAfter) >= 300 })
	close(stop)
	wg.Wait()
	time.Sleep(1500 * time.Millisecond) // a heartbeat after the last claim

	// Which acknowledged claims does the new primary still hold?
	check := redis.NewClient(&redis.Options{Addr: newAddr})
	defer check.Close()
	keys := store.NewKeys(cfg.KeyPrefix, shards)
	r := failoverResult{errs: errs, failover: failover}
	slices.SortFunc(acks, func(a, b *ack) int { return a.at.Compare(b.at) })
	var last time.Time
	byItem := map[string][]*ack{}
	for _, a := range acks {
		l := a.lease
		b, err := check.Get(ctx, keys.Record(l.Shard(), l.ID())).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		var rec *store.Record
		if err == nil {
			if rec, err = store.UnmarshalRecord(b); err != nil {
				t.Fatal(err)
			}
		}
		lost := rec == nil || rec.Token != l.Token()
		switch {
		case !a.at.Before(killed):
			r.ackedAfter++
		default:
			r.acked++
			if a.phase == phaseLag {
				r.ackedLag++
			}
		}
		if lost {
			r.lost++
			if a.phase == phaseLag {
				r.lostInLag++
			}
			if l.Err() != nil && errors.Is(l.Err(), ownership.ErrLeaseLost) {
				r.detected++
			}
		}
		if !last.IsZero() && a.at.Sub(last) > r.gap {
			r.gap = a.at.Sub(last)
		}
		last = a.at
		byItem[l.ID()] = append(byItem[l.ID()], a)
	}
	r.handedBack = errs["too few replicas"]
	// Overlaps: a later claim of an item acknowledged while an earlier
	// one's trust window was still open (nothing here is released, and
	// the ttl outlives the test, so every earlier claim's is).
	for _, as := range byItem {
		for i := 1; i < len(as); i++ {
			for _, prev := range as[:i] {
				if as[i].at.Before(prev.lease.Expiry()) {
					r.overlaps++
					if as[i].lease.Fence() <= prev.lease.Fence() {
						r.fenceAccepted++
					}
				}
			}
		}
	}
	return r
}

// errClass shortens a claim error to its kind, for the report.
func errClass(err error) string {
	s := err.Error()
	for _, k := range []string{"too few replicas", "connection refused", "i/o timeout", "EOF", "READONLY", "LOADING", "MASTERDOWN", "context deadline exceeded", "all sentinels", "connection reset", "broken pipe"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}
