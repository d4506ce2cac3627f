package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// A permanent failure is a suspect like an unclassified one, and opens
// the breaker with other distinct items; it is the item's own (Own)
// only when the item failed before and is no longer a suspect (a
// success came since) or is the only one (it fails alone).
func TestTargetBreakerPermanent(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		perm := func(id string, failed bool) store.Report {
			t.Helper()
			r, err := s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetPermanent, ID: id, ProbeEvery: time.Second,
				Failures: 3, Window: time.Minute, Reason: "status 401", FailedBefore: failed})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		other := func(id string) {
			t.Helper()
			if _, err := s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetItem, ID: id, ProbeEvery: time.Second,
				Failures: 3, Window: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		if r := perm("gone", false); r.Own || r.Open || r.Suspects != 1 {
			t.Fatalf("a first permanent failure: %+v, want a suspect", r)
		}
		other("x")
		if r := perm("gone", true); r.Own || r.Suspects != 2 {
			t.Fatalf("again, another item failing too and no success between: %+v, want still a suspect", r)
		}
		if _, err := s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetOK}); err != nil {
			t.Fatal(err)
		}
		if r := perm("gone", true); !r.Own || r.Open || r.Suspects != 0 {
			t.Fatalf("again after a success: %+v, want its own, not a suspect", r)
		}
		perm("lone", false)
		if r := perm("lone", true); !r.Own || r.Suspects != 0 {
			t.Fatalf("again with nothing else failing since: %+v, want its own (one item failing alone)", r)
		}
		perm("a", false)
		perm("b", false)
		if r := perm("c", false); !r.Open || r.Changed != 1 || r.Own {
			t.Fatalf("the third distinct item failing permanently: %+v, want the breaker opened", r)
		}
		if r := perm("d", true); !r.Open || r.Own {
			t.Fatalf("a permanent failure while open: %+v, want open, not its own", r)
		}
	})
}

// The breaker opens on a target failure, or on unclassified failures of
// `failures` distinct items with no success between them; one item
// failing again and again never opens it. While it is open, admission
// grants one probe per probe interval; a success closes it.
func TestTargetBreaker(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		item := func(id string) store.Report {
			t.Helper()
			r, err := s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetItem, ID: id, ProbeEvery: time.Second,
				Failures: 3, Window: time.Minute, Reason: "exit status 1"})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		for range 5 {
			if r := item("poison"); r.Open || r.Suspects != 1 {
				t.Fatalf("one item failing again: %+v, want closed with 1 suspect", r)
			}
		}
		item("a")
		r := item("b")
		if !r.Open || r.Changed != 1 || r.Suspects != 0 {
			t.Fatalf("third distinct item: %+v, want opened", r)
		}
		if r := item("c"); !r.Open || r.Changed != 0 {
			t.Fatalf("a failure while open: %+v", r)
		}
		adm := func() store.Admission {
			t.Helper()
			a, err := s.TargetAdmit(ctx, store.AdmitParams{N: 8, Breaker: true, ProbeEvery: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		if a := adm(); a.Granted != 0 || a.Wait <= 0 || a.Wait > time.Second || !a.Breaker.Open {
			t.Fatalf("admit while open, before the probe time: %+v", a)
		}
		time.Sleep(time.Second)
		if a := adm(); a.Granted != 1 || !a.Probe {
			t.Fatalf("admit at the probe time: %+v, want one probe", a)
		}
		if a := adm(); a.Granted != 0 || a.Wait <= 0 || a.Wait > 200*time.Millisecond {
			t.Fatalf("a second admit right after the probe: %+v, want a wait of up to the probe interval", a)
		}
		st, err := s.TargetState(ctx)
		if err != nil || !st.Open || st.Opens != 1 || st.Reason == "" {
			t.Fatalf("state = %+v, %v", st, err)
		}
		r, err = s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetOK})
		if err != nil || r.Open || r.Changed != -1 {
			t.Fatalf("ok: %+v, %v, want closed", r, err)
		}
		if a := adm(); a.Granted != 8 || a.Probe {
			t.Fatalf("admit after close: %+v", a)
		}
		// Retry-After keeps it open that long, capped.
		r, err = s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetFailed, RetryAfter: 10 * time.Second, ProbeEvery: time.Second})
		if err != nil || !r.Open || r.Next-r.Now < 9900 || r.Next-r.Now > 10000 {
			t.Fatalf("retry after 10s: %+v, %v", r, err)
		}
		r, _ = s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetFailed, RetryAfter: 1000 * time.Hour, ProbeEvery: time.Second})
		if got := time.Duration(r.Next-r.Now) * time.Millisecond; got > store.TargetRetryCap {
			t.Errorf("retry after 1000h kept it open %v, want at most %v", got, store.TargetRetryCap)
		}
	})
}

// Permits cap syncs fleet-wide; they expire unless extended, and come
// back when released.
func TestTargetPermits(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		adm := func(base string, n int) store.Admission {
			t.Helper()
			a, err := s.TargetAdmit(ctx, store.AdmitParams{N: n, MaxInFlight: 4, TTL: 500 * time.Millisecond, Base: base})
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		a := adm("d1", 3)
		b := adm("d2", 3)
		if a.Granted != 3 || b.Granted != 1 || len(b.Permits) != 1 {
			t.Fatalf("grants %d and %d (%v), want 3 and 1", a.Granted, b.Granted, b.Permits)
		}
		if c := adm("d3", 1); c.Granted != 0 || c.Wait <= 0 || c.Wait > 500*time.Millisecond {
			t.Fatalf("admit at the cap: %+v", c)
		}
		if err := s.TargetRelease(ctx, b.Permits...); err != nil {
			t.Fatal(err)
		}
		if c := adm("d3", 2); c.Granted != 1 {
			t.Fatalf("after a release: %+v, want 1", c)
		}
		// d1 extends its permits, d3 does not: d3's come back.
		time.Sleep(300 * time.Millisecond)
		if gone, err := s.TargetExtend(ctx, a.Permits, 500*time.Millisecond); err != nil || gone != 0 {
			t.Fatalf("extend = %d, %v", gone, err)
		}
		time.Sleep(300 * time.Millisecond)
		if c := adm("d4", 4); c.Granted != 1 {
			t.Fatalf("after d3's permit expired: %+v, want 1", c)
		}
		if gone, _ := s.TargetExtend(ctx, []string{"d3:1"}, time.Second); gone != 1 {
			t.Errorf("extending an expired permit: gone = %d, want 1", gone)
		}
	})
}

// The rate limit grants a burst, then one per emission interval.
func TestTargetRate(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		p := store.AdmitParams{N: 8, Every: 50 * time.Millisecond, Burst: 5}
		a, err := s.TargetAdmit(ctx, p)
		if err != nil || a.Granted != 5 {
			t.Fatalf("first admit = %+v, %v; want the burst of 5", a, err)
		}
		a, _ = s.TargetAdmit(ctx, p)
		if a.Granted != 0 || a.Wait <= 0 || a.Wait > 50*time.Millisecond {
			t.Fatalf("second admit = %+v, want a wait of up to 50ms", a)
		}
		// Over one second, 20 more: the rate, whatever the callers ask.
		start, got := time.Now(), 0
		for time.Since(start) < time.Second {
			a, _ := s.TargetAdmit(ctx, p)
			got += a.Granted
			time.Sleep(5 * time.Millisecond)
		}
		if got < 18 || got > 21 {
			t.Errorf("granted %d in one second at 20/s", got)
		}
	})
}

// Keys made by hand never stop admission: another type is replaced, and
// values no daemon wrote (a probe time or a permit far ahead, garbage
// in the rate key) read as ones that let work go on.
func TestTargetHostileKeys(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		k, c := s.Keys(), s.Client()
		p := store.AdmitParams{N: 2, Breaker: true, ProbeEvery: time.Second, MaxInFlight: 2, TTL: time.Second, Base: "d",
			Every: time.Millisecond, Burst: 10}
		for _, plant := range []func(){
			func() {
				c.Set(ctx, k.Target("state"), "x", 0)
				c.HSet(ctx, k.Target("permits"), "a", 1)
				c.LPush(ctx, k.Target("rate"), 1)
			},
			func() { c.HSet(ctx, k.Target("state"), "open", 1, "next", "1e300", "since", "nan") },
			func() { c.HSet(ctx, k.Target("state"), "open", 1, "next", "garbage") },
			func() {
				c.ZAdd(ctx, k.Target("permits"), redisZ("inf", "x"), redisZ("1e300", "y"))
				c.Set(ctx, k.Target("rate"), "1e300", 0)
			},
			func() { c.Set(ctx, k.Target("rate"), "abc", 0) },
		} {
			c.Del(ctx, k.Target("state"), k.Target("permits"), k.Target("rate"), k.Target("suspects"))
			plant()
			a, err := s.TargetAdmit(ctx, p)
			if err != nil || a.Granted < 1 {
				t.Errorf("admit over planted keys = %+v, %v", a, err)
			}
			s.TargetRelease(ctx, a.Permits...)
			if _, err := s.TargetState(ctx); err != nil {
				t.Errorf("state over planted keys: %v", err)
			}
			c.Set(ctx, k.Target("suspects"), "x", 0)
			if _, err := s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetItem, ID: "a", Failures: 3, Window: time.Second}); err != nil {
				t.Errorf("report over planted keys: %v", err)
			}
		}
	})
}

func redisZ(score, member string) redis.Z {
	var f float64
	fmt.Sscan(score, &f)
	return redis.Z{Score: f, Member: member}
}

// Permits and rate tokens the caller holds count towards a grant: only
// the rest are taken. Tokens taken ahead are charged from AheadFor on,
// never with a probe.
func TestTargetHeldAndAhead(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{})
		adm := func(p store.AdmitParams) store.Admission {
			t.Helper()
			a, err := s.TargetAdmit(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		cap4 := store.AdmitParams{MaxInFlight: 4, TTL: time.Second, Base: "d"}
		p := cap4
		p.N = 3
		if a := adm(p); a.Granted != 3 || len(a.Permits) != 3 {
			t.Fatalf("first admit: %+v, want 3 new permits", a)
		}
		p.N, p.HeldPermits, p.Base = 3, 3, "e"
		if a := adm(p); a.Granted != 3 || len(a.Permits) != 0 {
			t.Fatalf("admit with 3 held: %+v, want 3 granted, no new permit", a)
		}
		p.N, p.HeldPermits, p.Base = 5, 3, "f"
		if a := adm(p); a.Granted != 4 || len(a.Permits) != 1 {
			t.Fatalf("admit of 5 with 3 held at max 4: %+v, want 4 granted, 1 new permit", a)
		}
		p.N, p.HeldPermits, p.Base = 2, 0, "g"
		if a := adm(p); a.Granted != 0 || a.Wait <= 0 {
			t.Fatalf("admit at the cap with none held: %+v, want a wait", a)
		}

		// 1/s, burst 10: a tolerance of 10 s. Ahead tokens are charged
		// from 5 s on: 5 fit after the 2 of the grant. (At 100/s, a loaded
		// machine's 20 ms between two calls refilled 2 tokens.)
		r := store.AdmitParams{N: 2, Every: time.Second, Burst: 10, Ahead: 20, AheadFor: 5 * time.Second}
		if a := adm(r); a.Granted != 2 || a.Ahead != 5 {
			t.Fatalf("admit with ahead: %+v, want 2 granted and 5 ahead", a)
		}
		r.Ahead = 0
		if a := adm(r); a.Granted != 0 || a.Wait <= 0 {
			t.Fatalf("admit after the ahead tokens: %+v, want a wait", a)
		}
		r.HeldTokens = 2
		if a := adm(r); a.Granted != 2 {
			t.Fatalf("admit with the tokens held: %+v, want 2", a)
		}
		// An open breaker grants one probe, with no token ahead.
		s.TargetReport(ctx, store.ReportParams{Outcome: store.TargetFailed, ProbeEvery: time.Second})
		k := s.Keys()
		s.Client().HSet(ctx, k.Target("state"), "next", 0)
		s.Client().Del(ctx, k.Target("rate"))
		r = store.AdmitParams{N: 4, Breaker: true, ProbeEvery: time.Second, Every: 10 * time.Millisecond, Burst: 10,
			Ahead: 5, AheadFor: 50 * time.Millisecond}
		if a := adm(r); !a.Probe || a.Granted != 1 || a.Ahead != 0 {
			t.Fatalf("admit of a probe: %+v, want 1 probe and nothing ahead", a)
		}
	})
}
