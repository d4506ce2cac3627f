package ownership_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

var prefixes atomic.Int64

func openStore(t *testing.T, addr, prefix string) *store.Store {
	t.Helper()
	if prefix == "" {
		prefix = fmt.Sprintf("o%d", prefixes.Add(1))
	}
	s, err := store.Open(context.Background(), store.Config{Addrs: []string{addr}, KeyPrefix: prefix, Shards: 1,
		ReadTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func manager(t *testing.T, st ownership.Store, ttl time.Duration) *ownership.Manager {
	t.Helper()
	m, err := ownership.New(st, ownership.Config{TTL: ttl, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// claimUntil claims id, riding out a hold-off after (simulated) data loss.
func claimUntil(t *testing.T, m *ownership.Manager, id string, within time.Duration) *ownership.Lease {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		leases, err := m.ClaimIDs(context.Background(), ownership.ClaimIDsParams{IDs: []string{id}})
		var hold *ownership.HoldError
		switch {
		case errors.As(err, &hold):
			time.Sleep(hold.For)
			continue
		case store.IsUnavailable(err):
			time.Sleep(20 * time.Millisecond)
			continue
		case err != nil:
			t.Fatal(err)
		}
		if len(leases) == 1 {
			return leases[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("could not claim %q within %v", id, within)
	return nil
}

// 100 goroutines race for one key, 200 times: exactly one wins each time,
// for the standalone lock and for the engine's claim path.
func TestRaceExactlyOneWinner(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	const racers, runs = 100, 200
	lockers := make([]*ownership.Locker, racers)
	managers := make([]*ownership.Manager, racers)
	for i := range racers {
		lk, err := ownership.NewLocker(ownership.LockerConfig{Config: ownership.Config{TTL: 10 * time.Second}}, st)
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Close()
		lockers[i] = lk
		managers[i] = manager(t, st, 10*time.Second)
	}
	ctx := context.Background()
	// A new deployment on a fresh Redis: nobody can hold an earlier lease.
	if _, err := st.MarkEpoch(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	for run := range runs {
		name := "race-" + strconv.Itoa(run)
		st.Add(ctx, name)
		var locks, claims atomic.Int32
		var winner *ownership.Lock
		var lease *ownership.Lease
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if l, err := lockers[i].TryLock(ctx, name); err == nil {
					locks.Add(1)
					mu.Lock()
					winner = l
					mu.Unlock()
				} else if !errors.Is(err, ownership.ErrNotObtained) {
					t.Error(err)
				}
				ls, err := managers[i].ClaimIDs(ctx, ownership.ClaimIDsParams{IDs: []string{name}})
				if err != nil {
					t.Error(err)
				}
				claims.Add(int32(len(ls)))
				if len(ls) == 1 {
					mu.Lock()
					lease = ls[0]
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := locks.Load(); n != 1 {
			t.Fatalf("run %d: %d lock winners", run, n)
		}
		if claims.Load() != 1 {
			t.Fatalf("run %d: %d claim winners", run, claims.Load())
		}
		if code, err := winner.Unlock(ctx); code != store.Released || err != nil {
			t.Fatalf("run %d: unlock = %v, %v", run, code, err)
		}
		if lease != nil {
			managers[0].Release(ctx, []*ownership.Lease{lease}, []ownership.Outcome{{Kind: store.ReleaseSynced, Delay: time.Hour}})
		}
	}
}

// blocking wraps a store and, when told, hangs every Extend until its
// context ends: the holder's heartbeats stop as if it were paused.
type blocking struct {
	*store.Store
	block atomic.Bool
}

func (b *blocking) Extend(ctx context.Context, ttl time.Duration, s store.State, reqs []store.ExtendRequest) ([]store.ExtendResult, error) {
	if b.block.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Store.Extend(ctx, ttl, s, reqs)
}

// A holder whose heartbeats stop is cancelled before another claimer can
// succeed; the new claim has a strictly larger fence; the stale holder
// can neither extend nor release the new claim.
func TestPausedHolderAgainstRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	st.Add(context.Background(), "item")
	wa := &blocking{Store: st}
	const ttl = 600 * time.Millisecond
	a, b := manager(t, wa, ttl), manager(t, st, ttl)
	la := claimUntil(t, a, "item", 5*time.Second)
	wa.block.Store(true)
	aDone := make(chan time.Time, 1)
	go func() { <-la.Done(); aDone <- time.Now() }()
	lb := claimUntil(t, b, "item", 5*time.Second)
	claimedAt := time.Now()
	select {
	case at := <-aDone:
		if !at.Before(claimedAt) {
			t.Fatalf("holder cancelled at %v, after the new claim at %v", at, claimedAt)
		}
	default:
		t.Fatal("new claim succeeded while the paused holder was not cancelled")
	}
	if lb.Fence() <= la.Fence() {
		t.Errorf("new fence %d not above %d", lb.Fence(), la.Fence())
	}
	if !errors.Is(la.Err(), ownership.ErrLeaseLost) {
		t.Errorf("stale holder's cause: %v", la.Err())
	}
	// The stale holder cannot extend or release the new claim.
	ex, err := st.Extend(context.Background(), time.Minute, 0, []store.ExtendRequest{{Key: st.Keys().Record(0, "item"), Token: la.Token()}})
	if err != nil || ex[0].Code != store.ExtendOther {
		t.Errorf("stale extend = %+v, %v", ex, err)
	}
	res := a.Release(context.Background(), []*ownership.Lease{la}, []ownership.Outcome{{Kind: store.ReleaseSynced}})
	if res[0].Code != store.HeldByOther || res[0].Recorded {
		t.Errorf("stale release = %+v", res[0])
	}
	if lb.Err() != nil {
		t.Errorf("new owner lost its lease: %v", lb.Err())
	}
}

// A holder whose record is taken over (an admin force release, then a
// new claim) learns it at the next heartbeat, with the reason.
func TestStaleHolderLearnsReason(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	ctx := context.Background()
	st.Add(ctx, "x", "y")
	a, b := manager(t, st, 900*time.Millisecond), manager(t, st, 900*time.Millisecond)
	lx, ly := claimUntil(t, a, "x", 5*time.Second), claimUntil(t, a, "y", 5*time.Second)
	st.ForceRelease(ctx, "x")
	st.ForceRelease(ctx, "y")
	claimUntil(t, b, "x", time.Second)
	for _, tt := range []struct {
		l    *ownership.Lease
		want ownership.Reason
	}{{lx, ownership.ReasonTaken}, {ly, ownership.ReasonDeleted}} {
		select {
		case <-tt.l.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: lease not ended", tt.l.ID())
		}
		var lost *ownership.LeaseLostError
		if !errors.As(tt.l.Err(), &lost) || lost.Reason != tt.want {
			t.Errorf("%s: %v, want reason %q", tt.l.ID(), tt.l.Err(), tt.want)
		}
	}
}

// Fences rise strictly per item across claims, processes and crashes of
// an AOF-backed Redis, and even across a restart that lost everything.
func TestFencesRiseAcrossProcessesAndRestarts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, &redistest.Options{AOF: true})
	const prefix = "fences"
	var fences []uint64
	claimHere := func() {
		st := openStore(t, srv.Addr(), prefix)
		st.Add(context.Background(), "f")
		m := manager(t, st, time.Second)
		l := claimUntil(t, m, "f", 10*time.Second)
		fences = append(fences, l.Fence())
		m.Release(context.Background(), []*ownership.Lease{l}, []ownership.Outcome{{Kind: store.ReleaseSynced}})
	}
	claimThere := func() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperClaimProcess$")
		cmd.Env = append(os.Environ(), "SYNCD_HELPER_ADDR="+srv.Addr(), "SYNCD_HELPER_PREFIX="+prefix)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper process: %v\n%s", err, out)
		}
		_, v, ok := strings.Cut(string(out), "FENCE=")
		f, err := strconv.ParseUint(strings.Fields(v + " ")[0], 10, 64)
		if !ok || err != nil {
			t.Fatalf("helper printed no fence:\n%s", out)
		}
		fences = append(fences, f)
	}
	claimHere()
	claimThere()
	claimHere()
	srv.Kill(t) // crash: AOF everysec
	srv.Restart(t)
	claimThere()
	claimHere()
	srv.Kill(t)
	os.RemoveAll(srv.Dir() + "/appendonlydir") // lose everything
	srv.Restart(t)
	claimHere()
	claimThere()
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences %v: %d is not above %d", fences, fences[i], fences[i-1])
		}
	}
}

// TestHelperClaimProcess is run as a separate process by the test above.
func TestHelperClaimProcess(t *testing.T) {
	addr := os.Getenv("SYNCD_HELPER_ADDR")
	if addr == "" {
		t.Skip("run as a helper process only")
	}
	st := openStore(t, addr, os.Getenv("SYNCD_HELPER_PREFIX"))
	st.Add(context.Background(), "f")
	m := manager(t, st, time.Second)
	l := claimUntil(t, m, "f", 10*time.Second)
	fmt.Printf("FENCE=%d\n", l.Fence())
	m.Release(context.Background(), []*ownership.Lease{l}, []ownership.Outcome{{Kind: store.ReleaseSynced}})
}

// Quorum locks over 3 and 5 independent servers, with one and two down.
func TestQuorumAgainstRedis(t *testing.T) {
	for _, tt := range []struct{ n, down int }{{3, 1}, {3, 2}, {5, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("%d-servers-%d-down", tt.n, tt.down), func(t *testing.T) {
			t.Parallel()
			var srvs []*redistest.Server
			var stores []ownership.Store
			for range tt.n {
				s := redistest.Start(t, nil)
				srvs = append(srvs, s)
				st := openStore(t, s.Addr(), "q")
				st.MarkEpoch(t.Context(), 0, 0) // a new deployment: no lock is held off
				stores = append(stores, st)
			}
			cfg := ownership.LockerConfig{Config: ownership.Config{TTL: time.Second}}
			lk, err := ownership.NewLocker(cfg, stores...)
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Close()
			other, _ := ownership.NewLocker(cfg, stores...)
			defer other.Close()
			ctx := context.Background()
			for _, s := range srvs[:tt.down] {
				s.Kill(t)
			}
			l, err := lk.TryLock(ctx, "job")
			majority := tt.n-tt.down > tt.n/2
			if majority != (err == nil) {
				t.Fatalf("TryLock = %v, want success=%v", err, majority)
			}
			if !majority {
				return
			}
			if _, err := other.TryLock(ctx, "job"); !errors.Is(err, ownership.ErrNotObtained) {
				t.Fatalf("second owner: %v, want ErrNotObtained", err)
			}
			// Each server issued its own fence; the lock's is the highest,
			// and so is what Inspect reports (it gave the first server's).
			if info, err := other.Inspect(ctx, "job"); err != nil || info == nil || info.Fence != l.Fence() {
				t.Errorf("Inspect = %+v, %v; want the lock's fence %d", info, err, l.Fence())
			}
			time.Sleep(2 * time.Second) // the watchdog renews on the majority
			if l.Err() != nil {
				t.Fatalf("lock lost with a majority up: %v", l.Err())
			}
			if code, err := l.Unlock(ctx); code != store.Released {
				t.Errorf("Unlock = %v, %v", code, err)
			}
			l2, err := other.TryLock(ctx, "job")
			if err != nil || l2.Fence() <= l.Fence() {
				t.Fatalf("relock = %v; fence after %d", err, l.Fence())
			}
			l2.Unlock(ctx)
			for _, s := range srvs[:tt.down] {
				s.Restart(t) // let go-redis's dial retries end before goleak looks
			}
		})
	}
}

// A record syncd did not write is logged once, by the claim that finds
// it, and the pick claim goes on to the next item.
func TestForeignRecordLoggedOnce(t *testing.T) {
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	var logs testutil.Buffer
	m, err := ownership.New(st, ownership.Config{TTL: time.Second, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := t.Context()
	if _, err := st.Add(ctx, "a-corrupt", "b-fine"); err != nil {
		t.Fatal(err)
	}
	st.Client().Set(ctx, st.Keys().Record(0, "a-corrupt"), "\x9bcorrupt", 0)
	var got []string
	for range 3 {
		res, err := m.ClaimPick(ctx, ownership.ClaimPickParams{Workers: []int{0, 1, 2, 3}})
		var hold *ownership.HoldError
		if errors.As(err, &hold) {
			time.Sleep(hold.For)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !res.HeadKnown {
			t.Error("the pick's reply carried no head")
		}
		for _, l := range res.Leases {
			got = append(got, l.ID())
			if l.Owner().Worker != 0 {
				t.Errorf("%s went to worker %d, want the first slot's", l.ID(), l.Owner().Worker)
			}
		}
	}
	if len(got) != 1 || got[0] != "b-fine" {
		t.Errorf("claimed %v, want only b-fine", got)
	}
	if n := strings.Count(logs.String(), "record syncd did not write"); n != 1 {
		t.Errorf("foreign record logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestObserveHeartbeat: each heartbeat that extends a lease reports how
// long its trust window still had to run, which is positive and at most
// TTL - Margin. The TTL leaves a loaded machine room: a heartbeat that
// fails (each is bounded by the interval, a third of it) and the window
// closes, and no later one reopens it.
func TestObserveHeartbeat(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	lefts := make(chan time.Duration, 100)
	const ttl = 1500 * time.Millisecond
	m, err := ownership.New(st, ownership.Config{TTL: ttl, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		ObserveHeartbeat: func(left time.Duration) {
			select {
			case lefts <- left:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st.Add(t.Context(), "hb")
	l := claimUntil(t, m, "hb", 5*time.Second)
	window := ttl - m.Config().Margin
	for i := range 3 {
		select {
		case left := <-lefts:
			if left <= 0 || left > window {
				t.Errorf("heartbeat %d: left %v, want in (0, %v]", i, left, window)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no heartbeat observed after %d", i)
		}
	}
	if l.Err() != nil {
		t.Fatalf("lease lost: %v", l.Err())
	}
	m.Release(t.Context(), []*ownership.Lease{l}, []ownership.Outcome{{Kind: ownership.OutcomeHandBack}})
}

// The hold-off of a deployment this process created logs one calm "new
// deployment" line; a later one is a data loss and says so (the Store's
// Fresh, set once at Open, had it logged "new deployment" after a
// FLUSHALL, a user's check found).
func TestNewDeploymentLineOnlyAtFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), "")
	if !st.Fresh() {
		t.Fatal("a store on an empty Redis is not Fresh")
	}
	var log testutil.Buffer
	m, err := ownership.New(st, ownership.Config{TTL: 300 * time.Millisecond, Logger: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st.Add(t.Context(), "a")
	m.Release(t.Context(), []*ownership.Lease{claimUntil(t, m, "a", 5*time.Second)}, []ownership.Outcome{{Kind: store.ReleaseSynced}})
	if !strings.Contains(log.String(), "new deployment: claims start after one ttl") {
		t.Fatalf("no new-deployment line for the first hold-off:\n%s", log.String())
	}
	time.Sleep(1500 * time.Millisecond) // past the first hold-off's window (ttl + 1 s)
	srv.Client(t).FlushAll(t.Context())
	st.Add(t.Context(), "a")
	claimUntil(t, m, "a", 5*time.Second)
	if n := strings.Count(log.String(), "new deployment: claims start after one ttl"); n != 1 || !strings.Contains(log.String(), "redis has no epoch marker") {
		t.Errorf("after a FLUSHALL: %d new-deployment lines and no data-loss line?\n%s", n, log.String())
	}
}

// A daemon that joins a new deployment in its first ttl waits out the
// same hold-off as the one that created it, and says so as that one
// does: no warning of a data loss (an operator's trial saw every daemon
// but the first warn "shard held off" when a fleet started).
func TestJoinerOfNewDeploymentIsNotWarned(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	const ttl = 2 * time.Second
	first := openStore(t, srv.Addr(), "join")
	m1, err := ownership.New(first, ownership.Config{TTL: ttl, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	first.Add(t.Context(), "a", "b")
	if _, err := m1.ClaimIDs(t.Context(), ownership.ClaimIDsParams{IDs: []string{"a"}}); err == nil {
		t.Fatal("the first claim of a new deployment was not held off")
	}
	second := openStore(t, srv.Addr(), "join")
	var log testutil.Buffer
	m2, err := ownership.New(second, ownership.Config{TTL: ttl, Logger: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	_, err = m2.ClaimIDs(t.Context(), ownership.ClaimIDsParams{IDs: []string{"b"}})
	var hold *ownership.HoldError
	if !errors.As(err, &hold) {
		t.Fatalf("the joiner's claim in the first ttl = %v, want a hold-off", err)
	}
	if strings.Contains(log.String(), `"level":"warn"`) || !strings.Contains(log.String(), "new deployment") {
		t.Errorf("the joiner's log:\n%s", log.String())
	}
}

// A quorum with one server paused (SIGSTOP: it accepts connections and
// never answers) still locks and keeps its lock on the majority, each
// server's wait bounded by NodeTimeout, not by the store's ReadTimeout.
func TestQuorumServerPaused(t *testing.T) {
	var srvs []*redistest.Server
	var stores []ownership.Store
	for range 3 {
		s := redistest.Start(t, nil)
		srvs = append(srvs, s)
		st := openStore(t, s.Addr(), "q")
		st.MarkEpoch(t.Context(), 0, 0)
		stores = append(stores, st)
	}
	const nodeTimeout = 100 * time.Millisecond
	cfg := ownership.LockerConfig{Config: ownership.Config{TTL: time.Second}, NodeTimeout: nodeTimeout}
	lk, err := ownership.NewLocker(cfg, stores...)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	ctx := t.Context()
	srvs[0].Pause(t)
	defer srvs[0].Resume(t)
	start := time.Now()
	l, err := lk.TryLock(ctx, "job")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("TryLock with 2 of 3 answering = %v after %v", err, took)
	}
	if took > 5*nodeTimeout {
		t.Errorf("TryLock took %v with NodeTimeout %v", took, nodeTimeout)
	}
	time.Sleep(2 * time.Second) // the watchdog renews on the majority
	if l.Err() != nil {
		t.Fatalf("lock lost with a majority answering: %v", l.Err())
	}
	start = time.Now()
	if code, err := l.Unlock(ctx); code != store.Released {
		t.Errorf("Unlock = %v, %v", code, err)
	}
	if took := time.Since(start); took > 5*nodeTimeout {
		t.Errorf("Unlock took %v with NodeTimeout %v", took, nodeTimeout)
	}
}

// slowFirstConn is a TCP proxy to addr that passes requests on at once
// and holds each reply of its first connection back for delay: a server
// that does what it is asked and answers too late, once (the client then
// drops that connection; later ones answer in time).
func slowFirstConn(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			d := time.Duration(0)
			if first {
				d = delay
			}
			wg.Go(func() { io.Copy(s, c); s.Close() })
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						time.Sleep(d)
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// A quorum attempt that fails unlocks where it was granted and where no
// answer came in time, which may have granted it (Redlock): a server that
// took the lock and answered late no longer keeps the name for a TTL.
func TestQuorumFailureUnlocksUnanswered(t *testing.T) {
	t.Parallel()
	var srvs []*redistest.Server
	for range 3 {
		s := redistest.Start(t, nil)
		srvs = append(srvs, s)
		openStore(t, s.Addr(), "q").MarkEpoch(t.Context(), 0, 0)
	}
	cfg := ownership.LockerConfig{Config: ownership.Config{TTL: 10 * time.Second}, NodeTimeout: 50 * time.Millisecond}
	// The third server's lock is someone else's: no majority.
	other, err := ownership.NewLocker(cfg, openStore(t, srvs[2].Addr(), "q"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.TryLock(t.Context(), "job"); err != nil {
		t.Fatal(err)
	}
	late := openStore(t, slowFirstConn(t, srvs[1].Addr(), 150*time.Millisecond), "q")
	lk, err := ownership.NewLocker(cfg, openStore(t, srvs[0].Addr(), "q"), late, openStore(t, srvs[2].Addr(), "q"))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if _, err := lk.TryLock(t.Context(), "job"); !errors.Is(err, ownership.ErrNotObtained) {
		t.Fatalf("TryLock = %v, want ErrNotObtained (1 granted, 1 late, 1 busy)", err)
	}
	key := late.Keys().Lock("job")
	for _, s := range srvs[:2] {
		testutil.WaitFor(t, time.Second, 10*time.Millisecond, "the failed attempt's lock gone from "+s.Addr(), func() bool {
			return s.Client(t).Exists(t.Context(), key).Val() == 0
		})
	}
}
