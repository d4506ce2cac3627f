package store

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// The target's state is fleet-wide and lives in Redis beside the items:
// a circuit breaker (open while the target is down; one probe sync per
// probe interval across the fleet), permits that cap the syncs running
// against it at once (leases, so a dead daemon's come back within a ttl),
// and a rate limit (GCRA). Its keys share one slot (Keys.Target). The
// engine decides when to call these; see package engine.

// TargetRetryCap bounds how long the breaker stays open without a probe,
// whatever a target's Retry-After says.
const TargetRetryCap = time.Hour

// BreakerState is the target's breaker as Redis has it.
type BreakerState struct {
	Open bool
	// Since is when it opened (open) or closed last (closed, zero if
	// never), and Next the earliest time of the next probe; ms, Redis's
	// clock.
	Since, Next int64
	// Now is Redis's clock at the read.
	Now int64
}

// TargetState is everything Redis holds about the target, for status.
type TargetState struct {
	BreakerState
	// Suspects is how many distinct items failed, unclassified, with no
	// success since.
	Suspects int
	// InFlight is how many permits are held (with max_in_flight).
	InFlight int
	// Opens and Closes count the breaker's transitions, fleet-wide.
	Opens, Closes int64
	// Reason is the error that opened the breaker last.
	Reason string
}

// AdmitParams asks to start up to N syncs.
type AdmitParams struct {
	N int
	// Breaker: honour the breaker; ProbeEvery is its probe interval.
	Breaker    bool
	ProbeEvery time.Duration
	// MaxInFlight caps permits fleet-wide (0: no cap). Permits are named
	// Base + ":" + i and last TTL unless extended.
	MaxInFlight int
	TTL         time.Duration
	Base        string
	// Every is the rate's emission interval (0: no limit) and Burst how
	// many may start at once after a quiet spell.
	Every time.Duration
	Burst int
	// HeldPermits and HeldTokens are the permits and rate tokens the
	// caller already holds for these syncs: only the rest are taken.
	HeldPermits, HeldTokens int
	// Ahead asks for up to Ahead rate tokens beyond N, best effort and
	// never with a probe, which the caller uses within AheadFor or not at
	// all. They are charged as if taken AheadFor from now, so that the
	// fleet's starts keep within the rate and the burst however late in
	// that span they are used.
	Ahead    int
	AheadFor time.Duration
}

// Admission is what TargetAdmit granted.
type Admission struct {
	// Granted syncs may start; with MaxInFlight, each holds a permit:
	// one of the caller's HeldPermits or one of Permits, the new ones,
	// which the caller releases when its sync ends.
	Granted int
	Permits []string
	// Ahead is how many rate tokens were taken beyond Granted.
	Ahead int
	// Probe: the grant is the fleet's probe of an open breaker.
	Probe bool
	// Wait is when to ask again, when nothing was granted.
	Wait    time.Duration
	Breaker BreakerState
}

// TargetAdmit asks the breaker, the permits and the rate limit, in one
// script call, how many of p.N syncs may start now.
func (s *Store) TargetAdmit(ctx context.Context, p AdmitParams) (Admission, error) {
	k := s.keys
	keys := []string{k.Target("state"), k.Target("permits"), k.Target("rate")}
	every := float64(p.Every) / float64(time.Millisecond)
	v, err := s.runScript(ctx, s.rdb, scriptTargetAdmit, keys, p.N, flag(p.Breaker), p.ProbeEvery.Milliseconds(),
		TargetRetryCap.Milliseconds(), p.MaxInFlight, p.TTL.Milliseconds(), p.Base, strconv.FormatFloat(every, 'f', -1, 64), p.Burst,
		max(p.HeldPermits, 0), max(p.HeldTokens, 0), max(p.Ahead, 0), p.AheadFor.Milliseconds())
	if err != nil {
		return Admission{}, fmt.Errorf("store: target admit: %w", err)
	}
	r, err := ints(v, 9)
	if err != nil {
		return Admission{}, err
	}
	a := Admission{Granted: int(r[0]), Probe: r[1] == 1, Wait: time.Duration(max(r[2], 0)) * time.Millisecond,
		Breaker: BreakerState{Open: r[3] == 1, Since: r[4], Next: r[5], Now: r[6]}, Ahead: int(r[8])}
	if a.Granted < 0 || a.Granted > p.N || r[7] < 0 || r[7] > int64(a.Granted) || a.Ahead < 0 || a.Ahead > max(p.Ahead, 0) {
		return Admission{}, fmt.Errorf("store: target admit: unexpected reply %v", r)
	}
	for i := 1; i <= int(r[7]); i++ {
		a.Permits = append(a.Permits, p.Base+":"+strconv.Itoa(i))
	}
	return a, nil
}

// TargetOutcome is how a sync ended, as the breaker sees it.
type TargetOutcome string

// Target outcomes.
const (
	TargetOK     TargetOutcome = "ok"     // the target worked: close the breaker
	TargetFailed TargetOutcome = "target" // the target failed: open it
	TargetItem   TargetOutcome = "item"   // an unclassified failure: a suspect
	// TargetPermanent is a permanent failure: the item's own when it
	// failed before and a success came since, or it is still the only
	// suspect (Report.Own); else a suspect, as TargetItem.
	TargetPermanent TargetOutcome = "permanent"
)

// ReportParams tells the breaker how one sync ended.
type ReportParams struct {
	Outcome TargetOutcome
	ID      string
	// RetryAfter (TargetFailed) keeps the breaker open at least that
	// long; ProbeEvery is the least it stays open.
	RetryAfter, ProbeEvery time.Duration
	// Failures distinct suspects open the breaker (0: never); a suspect
	// is remembered for Window.
	Failures int
	Window   time.Duration
	Reason   string
	// FailedBefore (TargetPermanent): the item's last attempt failed.
	FailedBefore bool
}

// Report is the breaker after TargetReport.
type Report struct {
	BreakerState
	// Changed is 1 when this report opened the breaker, -1 when it
	// closed it.
	Changed  int
	Suspects int
	// Own (TargetPermanent): the failure is the item's own, not a
	// suspect: it failed before, and the target worked since or no
	// other item failed since.
	Own bool
}

// TargetReport tells the breaker how a sync ended, in one script call.
func (s *Store) TargetReport(ctx context.Context, p ReportParams) (Report, error) {
	k := s.keys
	reason := p.Reason
	if len(reason) > 512 {
		reason = reason[:512]
	}
	v, err := s.runScript(ctx, s.rdb, scriptTargetReport, []string{k.Target("state"), k.Target("suspects")},
		string(p.Outcome), p.ID, p.RetryAfter.Milliseconds(), p.ProbeEvery.Milliseconds(), p.Failures,
		max(p.Window.Milliseconds(), 1), reason, TargetRetryCap.Milliseconds(), flag(p.FailedBefore))
	if err != nil {
		return Report{}, fmt.Errorf("store: target report: %w", err)
	}
	r, err := ints(v, 7)
	if err != nil {
		return Report{}, err
	}
	return Report{BreakerState: BreakerState{Open: r[0] == 1, Since: r[2], Next: r[3], Now: r[5]},
		Changed: int(r[1]), Suspects: int(r[4]), Own: r[6] == 1}, nil
}

// TargetExtend extends the permits held by ttl from now and returns how
// many were gone.
func (s *Store) TargetExtend(ctx context.Context, permits []string, ttl time.Duration) (int, error) {
	args := make([]any, 0, 1+len(permits))
	args = append(args, ttl.Milliseconds())
	for _, p := range permits {
		args = append(args, p)
	}
	v, err := s.runScript(ctx, s.rdb, scriptTargetExtend, []string{s.keys.Target("permits")}, args...)
	if err != nil {
		return 0, fmt.Errorf("store: target extend: %w", err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("store: unexpected script reply %T", v)
	}
	return int(n), nil
}

// TargetRelease gives permits back.
func (s *Store) TargetRelease(ctx context.Context, permits ...string) error {
	if len(permits) == 0 {
		return nil
	}
	members := make([]any, len(permits))
	for i, p := range permits {
		members[i] = p
	}
	if err := s.rdb.ZRem(ctx, s.keys.Target("permits"), members...).Err(); err != nil && !isDamageReply(err) {
		return fmt.Errorf("store: target release: %w", err)
	}
	return nil
}

// TargetState reads the target's state.
func (s *Store) TargetState(ctx context.Context) (TargetState, error) {
	k := s.keys
	v, err := s.runScript(ctx, s.rdb, scriptTargetState,
		[]string{k.Target("state"), k.Target("suspects"), k.Target("permits")}, TargetRetryCap.Milliseconds())
	if err != nil {
		return TargetState{}, fmt.Errorf("store: target state: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 10 {
		return TargetState{}, fmt.Errorf("store: unexpected target state reply %v", v)
	}
	r, err := ints(arr[:9], 9)
	if err != nil {
		return TargetState{}, err
	}
	reason, _ := arr[9].(string)
	since := r[1]
	if r[0] == 0 {
		since = r[7]
	}
	return TargetState{BreakerState: BreakerState{Open: r[0] == 1, Since: since, Next: r[2], Now: r[8]},
		Suspects: int(r[3]), InFlight: int(r[4]), Opens: r[5], Closes: r[6], Reason: reason}, nil
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}
