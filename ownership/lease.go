package ownership

import (
	"context"
	"sync"
	"time"

	"github.com/syncd/syncd/store"
)

// Lease is ownership of one item or lock, trusted until its window closes.
//
// The trust window ends at (time the last successful claim or heartbeat
// was SENT) + TTL - Margin, on this process's monotonic clock. Redis
// cannot expire the record before TTL after the send, so while the window
// is open no one else can hold it. When the window closes, or a heartbeat
// finds the record gone or someone else's, Context is cancelled with a
// *LeaseLostError and Done is closed.
type Lease struct {
	id      string
	shard   int // -1 for a standalone lock
	key     string
	token   store.Token
	owner   store.Owner
	fence   uint64
	attempt int
	last    time.Time
	prevDue int64
	ttl     time.Duration
	margin  time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	until   time.Time // end of the trust window, monotonic
	timer   *time.Timer
	ended   bool
	lastErr error // last heartbeat error, for the loss reason
	// releasing is set once a release of the lease is about to be sent:
	// a heartbeat that finds the record gone or another's from then on
	// may have run after the release, and says nothing (see beatLost).
	releasing bool

	onLose func(Reason) // set before the lease is shared; may be nil
}

func newLease(parent context.Context, id string, shard int, key string, tok store.Token, owner store.Owner,
	fence uint64, ttl, margin time.Duration, sent time.Time) *Lease {
	l := &Lease{id: id, shard: shard, key: key, token: tok, owner: owner, fence: fence, ttl: ttl, margin: margin}
	l.ctx, l.cancel = context.WithCancelCause(parent)
	l.until = sent.Add(ttl - margin)
	return l
}

// LeaseParams describe a lease made by NewLease.
type LeaseParams struct {
	ID       string
	Shard    int
	Owner    store.Owner
	Fence    uint64
	Attempt  int
	LastSync time.Time
	// Due is when the item was due before the claim (see Lease.Due).
	Due int64
	// TTL is how long the lease is trusted from now.
	TTL time.Duration
}

// NewLease returns a lease that no Manager holds: nothing renews it, it
// is trusted for p.TTL from now (then lost with ReasonExpired), and it
// ends when parent ends, with parent's cause. It is for fakes of the
// Manager in other packages' tests, such as the engine's scheduler tests;
// a Manager cannot release it.
func NewLease(parent context.Context, p LeaseParams) *Lease {
	l := newLease(parent, p.ID, p.Shard, "", store.Token{}, p.Owner, p.Fence, p.TTL, 0, time.Now())
	l.attempt, l.last, l.prevDue = max(p.Attempt, 1), p.LastSync, p.Due
	l.arm()
	return l
}

// arm starts the trust-window timer; call it once the lease is set up.
func (l *Lease) arm() {
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(l.until), l.expire)
	l.mu.Unlock()
}

// ID returns the item ID or lock name.
func (l *Lease) ID() string { return l.id }

// Fence returns the claim's fencing token. Fences of one item rise
// strictly from claim to claim; pass it to whatever you write so that it
// can reject a stale owner.
func (l *Lease) Fence() uint64 { return l.fence }

// Owner returns the owner written in the record.
func (l *Lease) Owner() store.Owner { return l.owner }

// Token returns the claim's random token.
func (l *Lease) Token() store.Token { return l.token }

// Attempt counts consecutive attempts at the item, from 1.
func (l *Lease) Attempt() int { return l.attempt }

// LastSync is when the item last synced (Redis clock), zero if never.
func (l *Lease) LastSync() time.Time { return l.last }

// Due returns when the item was due before this claim (ms, Redis
// clock): its place in line, where a hand-back puts it. 0 when unknown
// (the claim's reply was lost), and for a standalone lock.
func (l *Lease) Due() int64 { return l.prevDue }

// Shard returns the item's shard, -1 for a lock.
func (l *Lease) Shard() int { return l.shard }

// Context is cancelled when the lease ends: with a *LeaseLostError cause
// when it was lost, with ErrReleased after a release.
func (l *Lease) Context() context.Context { return l.ctx }

// Done is closed when the lease ends.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is held, then why it ended.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Expiry returns the end of the trust window as a wall-clock time.
func (l *Lease) Expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// extended moves the window to sent + TTL - Margin, never backwards and
// never past what the send time allows: a late reply to an early
// heartbeat buys only what its send time covers. A window already
// closed stays closed, though its timer has not run yet: the exec sink's
// supervisor stops the command at the end it was told and nothing brings
// that back, and a paused process whose heartbeat won the race with the
// timer on resume went on with a lease whose command had been stopped
// (an outside trial: the stopped command then counted as the item's
// failure). expire ends it.
func (l *Lease) extended(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || !time.Now().Before(l.until) {
		return
	}
	l.lastErr = nil
	until := sent.Add(l.ttl - l.margin)
	if !until.After(l.until) {
		return
	}
	l.until = until
	l.timer.Reset(time.Until(until))
}

func (l *Lease) noteErr(err error) {
	l.mu.Lock()
	l.lastErr = err
	l.mu.Unlock()
}

// expire runs when the trust window closes.
func (l *Lease) expire() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if wait := time.Until(l.until); wait > 0 { // extended meanwhile
		l.timer.Reset(wait)
		l.mu.Unlock()
		return
	}
	reason := ReasonExpired
	if l.lastErr != nil {
		reason = ReasonUnreachable
	}
	err := l.lastErr
	l.mu.Unlock()
	l.lose(reason, err)
}

// lose ends the lease with a *LeaseLostError cause. It reports whether
// this call ended it.
func (l *Lease) lose(reason Reason, err error) bool {
	if !l.end(&LeaseLostError{ID: l.id, Fence: l.fence, Reason: reason, Err: err}) {
		return false
	}
	if l.onLose != nil {
		l.onLose(reason)
	}
	return true
}

func (l *Lease) end(cause error) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended = true
	l.timer.Stop()
	l.mu.Unlock()
	l.cancel(cause)
	return true
}

// startRelease marks the lease as being released. The release ends it,
// whatever Redis says.
func (l *Lease) startRelease() {
	l.mu.Lock()
	l.releasing = true
	l.mu.Unlock()
}

// beatLost ends the lease with a loss a heartbeat reported, and reports
// whether this call ended it. A lease whose release was sent is left
// alone: a heartbeat whose snapshot predates the release can reach Redis
// after it and find the record deleted (or, by then, another owner's),
// which is the release's doing, not a loss; the release ends the lease.
// A reply read before the release was marked came from a heartbeat that
// ran before the release was sent, so it is a loss.
func (l *Lease) beatLost(reason Reason, err error) bool {
	return !l.inRelease() && l.lose(reason, err)
}

// inRelease reports whether a release of the lease was sent.
func (l *Lease) inRelease() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releasing
}

// trusted reports whether the window is still open.
func (l *Lease) trusted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.ended && time.Now().Before(l.until)
}
