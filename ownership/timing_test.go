package ownership

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The timing tests run in synctest bubbles: time is fake, so a 30 s
// lease is tested in microseconds and every assertion is exact.

const (
	ttl    = 3 * time.Second
	margin = 300 * time.Millisecond
	beat   = time.Second
)

func newTestManager(t *testing.T, st Store, settle time.Duration) *Manager {
	t.Helper()
	m, err := New(st, Config{TTL: ttl, Margin: margin, Heartbeat: beat, Settle: settle,
		Owner: store.Owner{Host: "h", PID: 1, Run: "r"}, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func claimOne(t *testing.T, m *Manager, id string) *Lease {
	t.Helper()
	leases, err := m.ClaimIDs(t.Context(), ClaimIDsParams{IDs: []string{id}})
	if err != nil || len(leases) != 1 {
		t.Fatalf("Claim(%q) = %v, %v", id, leases, err)
	}
	return leases[0]
}

func lostReason(t *testing.T, l *Lease) Reason {
	t.Helper()
	var lost *LeaseLostError
	if !errors.As(l.Err(), &lost) || !errors.Is(context.Cause(l.Context()), ErrLeaseLost) {
		t.Fatalf("lease ended with %v, want a *LeaseLostError", l.Err())
	}
	return lost.Reason
}

func TestHeartbeatCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		m := newTestManager(t, v, 0)
		start := time.Now()
		l := claimOne(t, m, "a")
		time.Sleep(10*beat + beat/2)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost with heartbeats working: %v", err)
		}
		if n := len(v.calls()); n != 10 {
			t.Errorf("%d heartbeats in 10.5 intervals, want 10", n)
		}
		for i, at := range v.calls() {
			if want := start.Add(time.Duration(i+1) * beat); !at.Equal(want) {
				t.Errorf("heartbeat %d at +%v, want +%v", i, at.Sub(start), want.Sub(start))
			}
		}
		if got, want := l.Expiry(), start.Add(10*beat+ttl-margin); !got.Equal(want) {
			t.Errorf("trusted until +%v, want +%v", got.Sub(start), want.Sub(start))
		}
		if got := m.Stats().Heartbeats.Load(); got != 10 {
			t.Errorf("stats count %d heartbeats", got)
		}
	})
}

func TestTrustWindowClosesWhileRedisUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		m := newTestManager(t, v, 0)
		start := time.Now()
		l := claimOne(t, m, "a")
		v.mu.Lock()
		v.extendErr = errUnreachable
		v.mu.Unlock()
		<-l.Done()
		if got, want := time.Since(start), ttl-margin; got != want {
			t.Errorf("lease ended after %v, want exactly ttl - margin = %v", got, want)
		}
		if r := lostReason(t, l); r != ReasonUnreachable {
			t.Errorf("reason %q, want %q", r, ReasonUnreachable)
		}
		if !errors.Is(l.Err(), errUnreachable) {
			t.Errorf("cause %v does not carry the Redis error", l.Err())
		}
		if got := m.Stats().LostUnreachable.Load(); got != 1 {
			t.Errorf("stats: %d lost unreachable", got)
		}
	})
}

// A heartbeat whose reply comes late buys only what its send time
// allows (River's rule): the window is sent + ttl - margin, not
// received + ttl - margin.
func TestLateHeartbeatCountsFromSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		v.extendDelay = 700 * time.Millisecond
		m := newTestManager(t, v, 0)
		start := time.Now()
		l := claimOne(t, m, "a")
		time.Sleep(beat + 800*time.Millisecond) // first beat sent at +1s, answered at +1.7s
		if got, want := l.Expiry(), start.Add(beat+ttl-margin); !got.Equal(want) {
			t.Errorf("trusted until +%v, want +%v (send time + ttl - margin)", got.Sub(start), want.Sub(start))
		}
	})
}

// A holder whose heartbeats stop is cancelled before anyone else can
// claim the item, and the next claim has a larger fence.
func TestPausedHolderStopsBeforeNextClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		va, vb := f.view(), f.view()
		a, b := newTestManager(t, va, 0), newTestManager(t, vb, 0)
		la := claimOne(t, a, "a")
		va.mu.Lock()
		va.blockExtend = true
		va.mu.Unlock()
		var aDone time.Time
		go func() { <-la.Done(); aDone = time.Now() }()
		for {
			leases, err := b.ClaimIDs(t.Context(), ClaimIDsParams{IDs: []string{"a"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(leases) == 1 {
				synctest.Wait()
				if aDone.IsZero() || !aDone.Before(time.Now()) {
					t.Fatalf("B claimed at %v while A was still trusted (A done %v)", time.Now(), aDone)
				}
				if leases[0].Fence() <= la.Fence() {
					t.Errorf("new fence %d not above the old %d", leases[0].Fence(), la.Fence())
				}
				if r := lostReason(t, la); r != ReasonExpired && r != ReasonUnreachable {
					t.Errorf("reason %q", r)
				}
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
}

func TestTakenAndDeletedReasons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a", "b")
		v := f.view()
		m := newTestManager(t, v, 0)
		la, lb := claimOne(t, m, "a"), claimOne(t, m, "b")
		f.steal("a")
		f.mu.Lock()
		delete(f.recs, f.keys.Record(0, "b"))
		f.mu.Unlock()
		time.Sleep(beat + time.Millisecond)
		if r := lostReason(t, la); r != ReasonTaken {
			t.Errorf("a: %q, want %q", r, ReasonTaken)
		}
		if r := lostReason(t, lb); r != ReasonDeleted {
			t.Errorf("b: %q, want %q", r, ReasonDeleted)
		}
		res := m.Release(t.Context(), []*Lease{la, lb}, []Outcome{{Kind: store.ReleaseSynced}, {Kind: store.ReleaseSynced}})
		if res[0].Code != store.HeldByOther || res[0].Recorded {
			t.Errorf("release of a taken lease = %+v, want held by other, not recorded", res[0])
		}
		if res[1].Code != store.NotHeld || res[1].Recorded {
			t.Errorf("release of a deleted lease = %+v", res[1])
		}
		for _, k := range f.releaseKinds() {
			if k != store.ReleaseHandBack {
				t.Errorf("a lost lease sent a %q release; only hand-backs are allowed", k)
			}
		}
	})
}

func TestReleaseEndsLeaseAndRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		m := newTestManager(t, v, 0)
		l := claimOne(t, m, "a")
		res := m.Release(t.Context(), []*Lease{l}, []Outcome{{Kind: store.ReleaseSynced, Delay: time.Minute}})
		if res[0].Code != store.Released || !res[0].Recorded {
			t.Errorf("release = %+v", res[0])
		}
		if !errors.Is(l.Err(), ErrReleased) {
			t.Errorf("lease after release: %v", l.Err())
		}
		n := len(v.calls())
		time.Sleep(3 * beat)
		if len(v.calls()) != n {
			t.Error("a released lease is still heartbeated")
		}
	})
}

// A heartbeat whose snapshot predates a release but that reaches Redis
// after it finds the record deleted: the release's doing, not a loss (an
// outside trial saw 96 "lease lost" warnings in 12 s of syncs that all
// succeeded). The lease ends released, and no loss is counted.
func TestHeartbeatAfterReleaseIsNoLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		m := newTestManager(t, v, 0)
		l := claimOne(t, m, "a")
		var res []ReleaseResult
		released := make(chan struct{})
		var once sync.Once
		v.mu.Lock()
		v.releaseDelay = 100 * time.Millisecond
		v.beforeExtend = func() {
			once.Do(func() {
				go func() {
					defer close(released)
					res = m.Release(context.Background(), []*Lease{l}, []Outcome{{Kind: store.ReleaseSynced}})
				}()
				synctest.Wait() // the release has deleted the record; its reply is late
			})
		}
		v.mu.Unlock()
		<-released
		if res[0].Code != store.Released || !res[0].Recorded {
			t.Errorf("release = %+v, want released and recorded", res[0])
		}
		if !errors.Is(l.Err(), ErrReleased) {
			t.Errorf("lease ended with %v, want %v", l.Err(), ErrReleased)
		}
		if n := m.Stats().LostDeleted.Load(); n != 0 {
			t.Errorf("%d losses counted for a released lease", n)
		}
	})
}

// A claim whose reply was lost is resolved by the confirm read: the
// caller gets the lease (with the right fence), not "not claimed".
func TestLostClaimReplyResolved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		v.loseClaims = 1
		m := newTestManager(t, v, 0)
		l := claimOne(t, m, "a")
		if l.Fence() != 1 {
			t.Errorf("fence %d, want 1 (read back by the confirm)", l.Fence())
		}
		if got := m.Stats().ClaimsUnknown.Load(); got != 1 {
			t.Errorf("stats: %d unknown claims", got)
		}
	})
}

// When the read-back after a lost reply fails too, the claim is ours but
// its lastSync and attempt are unknown: it is handed back, never started
// with a sink told the item never synced.
func TestLostClaimUnreadableIsHandedBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		v.loseClaims = 2 // the claim and its read-back
		m := newTestManager(t, v, 0)
		leases, err := m.ClaimIDs(t.Context(), ClaimIDsParams{IDs: []string{"a"}})
		if err != nil || len(leases) != 0 {
			t.Fatalf("Claim = %v, %v; want no lease", leases, err)
		}
		if !slices.Contains(f.kinds, store.ReleaseHandBack) {
			t.Errorf("release kinds %v, want a hand-back", f.kinds)
		}
		if l := claimOne(t, m, "a"); l.Fence() <= 1 {
			t.Errorf("next claim fence %d, want above the handed-back one", l.Fence())
		}
	})
}

// A pick claim whose reply was lost is resolved from its receipt: each
// item goes to the worker of its slot, and nothing stays claimed unseen.
func TestLostPickReplyResolved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a", "b", "c")
		v := f.view()
		v.loseClaims = 1
		m := newTestManager(t, v, 0)
		res, err := m.ClaimPick(t.Context(), ClaimPickParams{Workers: []int{7, 9}})
		if err != nil {
			t.Fatal(err)
		}
		if res.HeadKnown {
			t.Error("a pick whose reply was lost knows the shard's head")
		}
		leases := res.Leases
		if len(leases) != 2 || leases[0].ID() != "a" || leases[1].ID() != "b" {
			t.Fatalf("leases %v, want a and b", leases)
		}
		if leases[0].Owner().Worker != 7 || leases[1].Owner().Worker != 9 {
			t.Errorf("workers %d, %d, want 7, 9", leases[0].Owner().Worker, leases[1].Owner().Worker)
		}
		if got := m.Stats().ClaimsUnknown.Load(); got != 2 {
			t.Errorf("stats: %d unknown claims, want 2", got)
		}
		for _, r := range m.Release(t.Context(), leases, []Outcome{{}, {}}) {
			if r.Err != nil {
				t.Error(r.Err)
			}
		}
		if _, err := m.ClaimIDs(t.Context(), ClaimIDsParams{IDs: []string{"a"}, Workers: []int{1, 2}}); err == nil {
			t.Error("a claim with more workers than ids was accepted")
		}
	})
}

// A hold-off that Redis reports is remembered: Held says how long is
// left, claims of the shard fail at once without asking Redis again, the
// hold is logged once, and claims go on when it ends.
func TestHoldOffRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a")
		v := f.view()
		v.holdOff = 2 * time.Second
		var logs testutil.Buffer
		m, err := New(v, Config{TTL: ttl, Margin: margin, Heartbeat: beat, Logger: zerolog.New(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if d := m.Held(0); d != 0 {
			t.Fatalf("Held before any claim = %v", d)
		}
		for range 3 {
			_, err := m.ClaimIDs(t.Context(), ClaimIDsParams{IDs: []string{"a"}})
			var hold *HoldError
			if !errors.As(err, &hold) || !errors.Is(err, ErrHeldOff) || hold.For != 2*time.Second {
				t.Fatalf("claim of a held shard = %v, want a 2s *HoldError", err)
			}
		}
		if v.claimCalls != 1 {
			t.Errorf("%d claim calls reached the store, want 1: the hold is remembered", v.claimCalls)
		}
		if n := strings.Count(logs.String(), "shard held off"); n != 1 {
			t.Errorf("hold logged %d times, want once:\n%s", n, logs.String())
		}
		time.Sleep(1500 * time.Millisecond)
		if d := m.Held(0); d != 500*time.Millisecond {
			t.Errorf("Held after 1.5s = %v, want 500ms", d)
		}
		time.Sleep(500 * time.Millisecond)
		if d := m.Held(0); d != 0 {
			t.Errorf("Held after the hold = %v, want 0", d)
		}
		if l := claimOne(t, m, "a"); l.ID() != "a" {
			t.Errorf("claim after the hold: %v", l)
		}
	})
}

// With a settle delay, a claim lost in the window (a failover replaced
// it) is not trusted.
func TestSettleConfirmDropsLostClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		f.add("a", "b")
		v := f.view()
		m := newTestManager(t, v, 200*time.Millisecond)
		go func() {
			time.Sleep(100 * time.Millisecond)
			f.steal("a")
		}()
		start := time.Now()
		leases, err := m.ClaimIDs(t.Context(), ClaimIDsParams{IDs: []string{"a", "b"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(leases) != 1 || leases[0].ID() != "b" {
			t.Fatalf("leases %v, want only b", leases)
		}
		if time.Since(start) != 200*time.Millisecond {
			t.Errorf("claim took %v, want the settle delay", time.Since(start))
		}
	})
}

func TestLockerReentryAndWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStore()
		cfg := LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}
		a, err := NewLocker(LockerConfig{Config: cfg.Config, Reentrant: true}, f.view())
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, _ := NewLocker(cfg, f.view())
		defer b.Close()
		ctx := t.Context()
		la, err := a.TryLock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if again, err := a.TryLock(ctx, "job"); err != nil || again != la || la.Holds() != 2 {
			t.Fatalf("re-entry = %v, %v, holds %d", again, err, la.Holds())
		}
		if _, err := b.TryLock(ctx, "job"); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("b.TryLock = %v, want ErrNotObtained", err)
		}
		got := make(chan *Lock)
		go func() {
			l, err := b.Lock(ctx, "job")
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(5 * ttl) // the watchdog keeps a's lock alive meanwhile
		if la.Err() != nil {
			t.Fatalf("watchdog let the lock go: %v", la.Err())
		}
		if code, _ := la.Unlock(ctx); code != store.Released || la.Err() != nil {
			t.Fatalf("first unlock of two holds = %v, %v", code, la.Err())
		}
		start := time.Now()
		if code, _ := la.Unlock(ctx); code != store.Released {
			t.Fatalf("last unlock = %v", code)
		}
		lb := <-got
		if waited := time.Since(start); waited > 500*time.Millisecond {
			t.Errorf("waiter took %v after the unlock", waited)
		}
		if lb.Fence() <= la.Fence() {
			t.Errorf("fence %d after %d", lb.Fence(), la.Fence())
		}
		// Not re-entrant: the same locker cannot take it twice.
		if _, err := b.TryLock(ctx, "job"); !errors.Is(err, ErrNotObtained) {
			t.Errorf("non-reentrant second TryLock = %v", err)
		}
		lb.Unlock(ctx)
		ctx2, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := a.Lock(ctx2, "job"); err != nil {
			t.Errorf("Lock of a free lock: %v", err)
		}
	})
}

func TestQuorumMajority(t *testing.T) {
	for _, tt := range []struct{ n, down int }{{3, 0}, {3, 1}, {3, 2}, {5, 1}, {5, 2}, {5, 3}} {
		synctest.Test(t, func(t *testing.T) {
			var stores []Store
			var views []*view
			for range tt.n {
				v := newFakeStore().view()
				views, stores = append(views, v), append(stores, v)
			}
			for _, v := range views[:tt.down] {
				v.extendErr = errUnreachable
			}
			lk, err := NewLocker(LockerConfig{Config: Config{TTL: ttl, Margin: margin, Heartbeat: beat}}, stores...)
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Close()
			l, err := lk.TryLock(t.Context(), "q")
			ok := tt.n-tt.down > tt.n/2
			if ok != (err == nil) {
				t.Fatalf("%d of %d down: TryLock = %v, want ok=%v", tt.down, tt.n, err, ok)
			}
			if !ok {
				return
			}
			time.Sleep(3 * ttl)
			if l.Err() != nil {
				t.Fatalf("%d of %d down: renewals lost the lock: %v", tt.down, tt.n, l.Err())
			}
			// One more server down breaks the majority: the lock is lost
			// by the trust window.
			if tt.n-tt.down-1 <= tt.n/2 {
				views[tt.down].mu.Lock()
				views[tt.down].extendErr = errUnreachable
				views[tt.down].mu.Unlock()
				<-l.Done()
				var lost *LeaseLostError
				if !errors.As(l.Err(), &lost) {
					t.Fatalf("lock ended with %v", l.Err())
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{TTL: time.Millisecond}, "ttl"},
		{Config{TTL: time.Second, Heartbeat: time.Second}, "heartbeat"},
		{Config{TTL: time.Second, Settle: 950 * time.Millisecond}, "settle"},
		{Config{TTL: time.Second, Margin: 600 * time.Millisecond}, "margin"},
		{Config{MinReplicas: -1}, "min_replicas"},
		{Config{Owner: store.Owner{Host: "a/b"}}, "owner"},
	}
	for _, tt := range tests {
		var ce *ConfigError
		if err := tt.cfg.Validate(); !errors.As(err, &ce) || ce.Field != tt.field {
			t.Errorf("Validate(%+v) = %v, want field %s", tt.cfg, err, tt.field)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	var ce *ConfigError
	var st *store.Store
	for _, s := range []Store{nil, st} {
		if m, err := New(s, Config{}); !errors.As(err, &ce) || ce.Field != "store" || m != nil {
			t.Errorf("New(%#v) = %v, %v; want a ConfigError of store", s, m, err)
		}
	}
}

// A lease whose trust window closed stays closed, though its timer has
// not run yet: a process resumed after a pause (SIGSTOP) runs its
// heartbeat and the lease's timer at once, and when the heartbeat won,
// the lease went on while the exec sink's supervisor had stopped its
// command at the end it was told (an outside trial: the stopped command
// then counted as the item's failure). The heartbeat leaves it out, in
// Redis too, and a reply that comes after the window closed does not
// reopen it, whenever it was sent.
func TestClosedWindowStaysClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		l := newLease(context.Background(), "a", 0, "k", store.Token{}, store.Owner{}, 1, ttl, margin, start)
		l.timer = time.AfterFunc(time.Hour, l.expire) // the timer, late
		defer l.timer.Stop()
		time.Sleep(ttl) // past the window (ttl - margin)
		var sent [][]*Lease
		h := &heartbeater{every: beat, leases: map[*Lease]struct{}{l: {}}, log: zerolog.Nop(),
			extend: func(_ context.Context, leases []*Lease) []error {
				sent = append(sent, leases)
				return make([]error, len(leases))
			}}
		h.beat()
		if len(sent) != 0 {
			t.Errorf("heartbeat extended %d leases whose window closed", len(sent[0]))
		}
		l.extended(start.Add(beat)) // a reply to a beat sent in the window
		if got, want := l.Expiry(), start.Add(ttl-margin); !got.Equal(want) {
			t.Errorf("window reopened: trusted until +%v, want +%v", got.Sub(start), want.Sub(start))
		}
		if l.trusted() {
			t.Error("lease trusted after its window closed")
		}
	})
}
