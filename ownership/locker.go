package ownership

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/syncd/syncd/store"
)

// LockerConfig configures a Locker.
type LockerConfig struct {
	Config
	// Reentrant lets the Locker take a lock it already holds: the lease
	// is extended and the hold counted; each Unlock gives back one hold.
	// The owner is the Locker, not a goroutine: goroutines that share a
	// Reentrant Locker do NOT exclude each other (an API user's trial
	// counted 2,784 overlaps of 128 goroutines on 2 names); give each
	// its own Locker, or leave this off. Default false: a Locker is then
	// an owner like any other, and goroutines sharing it exclude each
	// other.
	Reentrant bool
	// RetryMin and RetryMax bound Lock's jittered exponential backoff
	// between attempts. Defaults 5ms and 500ms (never longer than what
	// the holder's lease has left).
	RetryMin, RetryMax time.Duration
	// NodeTimeout bounds each server's reply in quorum mode, so a dead
	// server costs little of the lease. Default TTL/20.
	NodeTimeout time.Duration
}

// Locker hands out standalone locks: the blog posts' "Redis lock", done
// safely. Each lock has a fence, a watchdog that renews it every
// Heartbeat until Unlock, and a context that is cancelled the moment it
// can no longer be trusted.
//
// With one Store it is a single-instance lock. With several independent
// Stores (never replicas of each other) it is a quorum lock (Redlock): a
// lock holds when a majority granted it and the validity left, TTL minus
// the time taken minus Margin, is positive; renewals also need a
// majority. Fences in quorum mode are the highest any granting server
// gave; see the package documentation for what that does and does not
// guarantee.
type Locker struct {
	stores []Store
	quorum int
	cfg    LockerConfig
	log    zerolog.Logger
	hb     *heartbeater

	// extendMu orders renewals: a Refresh that changes a lock's TTL
	// never interleaves with a watchdog renewal carrying the old one, so
	// the last write Redis applied is always the one the trust window
	// was computed from.
	extendMu sync.Mutex

	mu     sync.Mutex
	held   map[string]*Lock
	closed bool
	// waits: per name, the Lock calls of this Locker waiting for it,
	// woken when this Locker gives it back (see waitFor).
	waits map[string]*waiters
	// handoff: the names given back to woken waiters whose first try
	// has not yet ended, until when: a Lock call not among them waits
	// its turn (see Lock). The time bounds the wait for a woken waiter
	// that never tries (its ctx ended as it was woken): RetryMax.
	handoff map[string]time.Time
}

// waiters are the Lock calls of one Locker waiting for one name: ch is
// closed, and the entry dropped, when the Locker gives the name back
// (see Lock), so they try again at once rather than after
// their backoff, as goroutines waiting on a sync.Mutex would. n counts
// the calls, so the last to leave drops the entry of a name never given
// back here (held elsewhere).
type waiters struct {
	ch    chan struct{}
	n     int
	woken bool // ch is closed by a give-back (wake), not by Close
}

// Lock is a held standalone lock. Unlock, Refresh and TTL may be called
// on a nil *Lock (what a failed TryLock or Lock returns): they report
// ErrNotHeld, so `defer l.Unlock(ctx)` before the error check is safe.
type Lock struct {
	*Lease
	lk       *Locker
	name     string
	metadata string
	mu       sync.Mutex
	holds    int
	stores   []bool // which stores granted it
}

// LockOption adjusts one TryLock or Lock call.
type LockOption func(*lockOptions)

type lockOptions struct {
	tries    int
	metadata string
}

// LimitTries makes Lock give up after n attempts, with an error wrapping
// ErrNotObtained (redislock's LimitRetry, redsync's WithTries). n <= 0,
// the default, means no limit: Lock tries until its context ends.
// TryLock makes one attempt whatever the limit.
func LimitTries(n int) LockOption {
	return func(o *lockOptions) { o.tries = n }
}

// WithMetadata stores md with the lock, at most store.MaxMetadataLen
// bytes: the holder reads it with Lock.Metadata, anyone with
// Locker.Inspect. A re-entrant hold keeps the metadata of the first.
func WithMetadata(md string) LockOption {
	return func(o *lockOptions) { o.metadata = md }
}

// LockInfo is a lock as Redis holds it (see Locker.Inspect).
type LockInfo struct {
	Owner    store.Owner
	Fence    uint64
	Metadata string
	// Since is when the lock was taken, on Redis's clock.
	Since time.Time
	// TTL is how long Redis keeps the lock if no renewal comes (with a
	// quorum: how long a majority keeps it).
	TTL time.Duration
}

// lockReader reads a lock back; *store.Store has it. Lock.TTL and
// Locker.Inspect need it.
type lockReader interface {
	ReadLock(ctx context.Context, name string) (*store.Record, time.Duration, error)
}

// NewLocker returns a Locker over one store, or a quorum Locker over
// several independent ones.
//
// Each store must be its own server: a server listed twice (the same
// Store, or two Stores of one address) would cast two votes, and two
// Lockers could then both hold a name. NewLocker refuses that, as it can
// see it: it cannot tell two names of one host apart (localhost and
// 127.0.0.1), or replicas of one master.
func NewLocker(cfg LockerConfig, stores ...Store) (*Locker, error) {
	if len(stores) == 0 {
		return nil, &ConfigError{Field: "stores", Reason: "need at least one"}
	}
	if err := distinct(stores); err != nil {
		return nil, err
	}
	c, err := cfg.Config.resolve()
	if err != nil {
		return nil, err
	}
	cfg.Config = c
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 5 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 500 * time.Millisecond
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = c.TTL / 20
	}
	switch {
	case cfg.RetryMin < 0 || cfg.RetryMax < cfg.RetryMin:
		return nil, &ConfigError{Field: "retry", Reason: "need 0 < retry_min <= retry_max"}
	case cfg.NodeTimeout < 0 || cfg.NodeTimeout >= c.TTL-c.Margin:
		return nil, &ConfigError{Field: "node_timeout", Reason: "must be positive and below ttl - margin"}
	case c.MinReplicas > 0:
		return nil, &ConfigError{Field: "min_replicas", Reason: "not supported by the standalone lock"}
	}
	lk := &Locker{stores: stores, quorum: len(stores)/2 + 1, cfg: cfg,
		log: c.Logger.With().Str("component", "locker").Logger(), held: map[string]*Lock{}, waits: map[string]*waiters{},
		handoff: map[string]time.Time{}}
	lk.hb = newHeartbeater(c.Heartbeat, lk.extend, lk.log)
	lk.hb.onLeft = c.ObserveHeartbeat
	return lk, nil
}

// TryLock makes one attempt to take the lock name. It returns an error
// wrapping ErrNotObtained when someone else holds it. If ctx ends during
// the round trip, TryLock (and Lock) waits for Redis's answer, within the
// store's read timeout (NodeTimeout with several servers), and gives
// back what Redis granted: nothing is left held. With a single
// server, a Redis error is returned as it is; with a quorum, servers that
// fail count against the majority, and their errors are wrapped with
// ErrNotObtained.
func (lk *Locker) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	l, _, err := lk.try(ctx, name, options(opts))
	return l, err
}

// Lock waits for the lock, retrying with jittered exponential backoff
// (never sleeping past the holder's remaining lease), until it is taken,
// ctx ends, or LimitTries attempts failed. Either way it gives up with an
// error wrapping ErrNotObtained, and also ctx's cause or the last error.
// A name this Locker holds (and is not Reentrant) is waited for like any
// other, as with a sync.Mutex: another goroutine's Unlock lets it in, but
// a goroutine that locks a name it holds waits until ctx ends.
//
// When this Locker gives the name back (an Unlock, or a Refresh or
// re-entry that finds its lock lost), a waiting Lock tries again at once
// instead of sleeping out its backoff. A lock the watchdog finds lost
// stays this Locker's until its holder calls Unlock, as a sync.Mutex
// stays locked until Unlock: its goroutine may still be working. A
// holder elsewhere (another Locker or process) is polled: after at most
// RetryMax, or just after its lease ends.
//
// A name given back goes to this Locker's waiters first: a Lock call
// that was not waiting when it was given back (a goroutine that unlocks
// and locks again at once) waits until one of them has tried, where it
// used to take the name again before they could (an API user's trial: a
// waiter got its turn after 1 to 20 of the other's). Among the waiters
// there is no order. TryLock does not wait, and may still take a name
// before a waiter does, as sync.Mutex's TryLock.
func (lk *Locker) Lock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	o := options(opts)
	backoff := lk.cfg.RetryMin
	woken := false
	for try := 1; ; {
		l, again, w, tried, err := lk.attempt(ctx, name, o, try, &backoff, woken)
		if !again {
			return l, err
		}
		if tried {
			try++ // a call that waited its turn without trying is not a try (LimitTries)
		}
		woken = w
	}
}

// attempt is one of Lock's tries and, when it is refused, the wait
// before the next (again; woken when a give-back ended it). It listens
// for a give-back before trying: one between a refused try and the wait
// still wakes it. An attempt that was not woken, while the name is
// handed to woken waiters, waits without trying (tried false).
//
// wake is whether a give-back found this attempt waiting, whichever way
// its wait ended: one whose backoff ran out as the name was given back
// is as much a woken waiter as one the give-back ended (an outside
// trial: such a waiter, and its Unlock-and-Lock caller, both queued
// behind a hand-off nobody took, for up to RetryMax). A woken attempt
// that ends Lock without trying after its wake (its ctx ended) ends the
// hand-off itself, so that the calls queued behind it try at once.
func (lk *Locker) attempt(ctx context.Context, name string, o lockOptions, try int, backoff *time.Duration, woken bool) (l *Lock, again, wake, tried bool, err error) {
	w, queued := lk.waitFor(name, woken)
	defer func() { wake = lk.leave(name, w, !again, l != nil) }()
	wait := time.Duration(-1)
	if !queued {
		tried = true
		l, wait, err = lk.try(ctx, name, o)
		if woken {
			lk.tried(name, err == nil)
		}
	} else {
		err = notObtained(name, errors.New("handed to the waiters first"))
	}
	switch {
	case err == nil:
		return l, false, false, tried, nil
	case ctx.Err() != nil:
		return nil, false, false, tried, notObtained(name, context.Cause(ctx))
	case !errors.Is(err, ErrNotObtained) && !store.IsUnavailable(err):
		return nil, false, false, tried, err
	case tried && o.tries > 0 && try >= o.tries:
		n := fmt.Sprintf("%d tries", try)
		if try == 1 {
			n = "1 try"
		}
		return nil, false, false, tried, notObtained(name, fmt.Errorf("%s, the last: %w", n, unnamed(err)))
	}
	d := *backoff/2 + rand.N(*backoff/2+1)
	if wait >= 0 {
		// Come back just after the holder's lease ends. Redis rounds
		// its PTTL down: 0 means "within this millisecond", not
		// "unknown" (issue #15).
		d = min(d, wait+time.Millisecond)
	}
	*backoff = min(2**backoff, lk.cfg.RetryMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, false, false, tried, notObtained(name, context.Cause(ctx))
	case <-t.C:
	case <-w.ch:
	}
	return nil, true, false, tried, nil
}

// waitFor registers a Lock call waiting for name (see waiters); leave
// ends it. queued: the name is handed to woken waiters and this call,
// not woken, is to wait its turn without trying.
func (lk *Locker) waitFor(name string, woken bool) (w *waiters, queued bool) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	w = lk.waits[name]
	if w == nil {
		w = &waiters{ch: make(chan struct{})}
		lk.waits[name] = w
	}
	w.n++
	if until, ok := lk.handoff[name]; ok && !time.Now().Before(until) {
		delete(lk.handoff, name)
	}
	_, handed := lk.handoff[name]
	return w, !woken && handed && !lk.closed
}

// tried ends a hand-off of name with a woken waiter's first try: taken
// (ok), the name is its; refused (held elsewhere, or an error), the
// waiters queued behind it try now instead of after their backoff.
func (lk *Locker) tried(name string, ok bool) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.triedLocked(name, ok)
}

func (lk *Locker) triedLocked(name string, ok bool) {
	if _, handed := lk.handoff[name]; !handed {
		return
	}
	delete(lk.handoff, name)
	if !ok {
		lk.wakeLocked(name)
	}
}

// leave ends a waitFor; woken: the name was given back while it
// waited (w was woken). A woken call that ends there (ended: Lock
// returns, with the lock if got) ends the hand-off as its try would
// have (tried).
func (lk *Locker) leave(name string, w *waiters, ended, got bool) (woken bool) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if w.n--; w.n == 0 && lk.waits[name] == w {
		delete(lk.waits, name)
	}
	if w.woken && ended {
		lk.triedLocked(name, got)
	}
	return w.woken
}

// wake lets the Lock calls waiting for name try again now, ahead of any
// that come later (handoff).
func (lk *Locker) wake(name string) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.wakeLocked(name)
}

func (lk *Locker) wakeLocked(name string) {
	if w := lk.waits[name]; w != nil {
		close(w.ch)
		w.woken = true
		delete(lk.waits, name)
		now := time.Now()
		if len(lk.handoff) >= maxHandoffs {
			// Entries a woken waiter never ended (see handoff).
			maps.DeleteFunc(lk.handoff, func(_ string, until time.Time) bool { return !now.Before(until) })
		}
		lk.handoff[name] = now.Add(lk.cfg.RetryMax)
	}
}

// maxHandoffs is how many hand-offs may be pending before wake drops
// those past their time.
const maxHandoffs = 1024

func options(opts []LockOption) lockOptions {
	if len(opts) == 0 {
		return lockOptions{} // without the allocation that f(o) costs
	}
	o := new(lockOptions)
	for _, f := range opts {
		f(o)
	}
	return *o
}

// notObtained wraps ErrNotObtained and why Lock gave up, so that both
// errors.Is(err, ErrNotObtained) and errors.Is(err, context.DeadlineExceeded)
// (say) hold. A why that names the lock already (a try's error) is
// taken without its name (see lockError).
func notObtained(name string, why error) error {
	return &lockError{name: name, notObtained: true, err: unnamed(why)}
}

// lockError is an error of a Locker about the lock name, and the only
// layer that names it: a store's error, each of a quorum's, and the
// last try's of a Lock that gave up are said without the name, which
// came two to four times over (`ownership: lock "x": store: lock "x":
// dial tcp ...`, and a line `store: lock "x": ...` per server of a
// quorum). With notObtained it wraps ErrNotObtained too.
type lockError struct {
	name        string
	notObtained bool
	err         error // why, without the name
}

func (e *lockError) Error() string {
	if e.notObtained {
		return fmt.Sprintf("%v: %q: %v", ErrNotObtained, e.name, e.err)
	}
	return fmt.Sprintf("ownership: lock %q: %v", e.name, e.err)
}

func (e *lockError) Unwrap() []error {
	if e.notObtained {
		return []error{ErrNotObtained, e.err}
	}
	return []error{e.err}
}

// unnamed is err without the name of the lock, when err is a
// lockError: its why, with ErrNotObtained kept in it if it held that.
func unnamed(err error) error {
	le, ok := err.(*lockError)
	switch {
	case !ok:
		return err
	case le.notObtained && !errors.Is(le.err, ErrNotObtained):
		return notObtainedWhy{le.err}
	}
	return le.err
}

// notObtainedWhy is why a lock was not obtained, without its name, that
// still matches ErrNotObtained: what unnamed gives of a try's refusal.
type notObtainedWhy struct{ error }

func (e notObtainedWhy) Unwrap() []error { return []error{ErrNotObtained, e.error} }

// try makes one attempt. The duration it returns is how long the holder
// has left when someone holds the lock, -1 when that is not known.
func (lk *Locker) try(ctx context.Context, name string, o lockOptions) (*Lock, time.Duration, error) {
	if cur, err := lk.precheck(ctx, name, o); cur != nil || err != nil {
		return cur, -1, err
	}
	tok := store.NewToken()
	rec := &store.Record{Version: store.RecordVersion, Token: tok, State: store.StateSyncing, Owner: lk.cfg.Owner, Metadata: o.metadata}
	sent := time.Now()
	v := lk.vote(roundTrip(ctx), name, rec)
	// Validity: TTL - elapsed - margin must be left, or it is not a lock.
	valid := lk.cfg.TTL - time.Since(sent) - lk.cfg.Margin
	if v.n < lk.quorum || valid <= 0 || ctx.Err() != nil {
		switch {
		case v.maybe != nil && (v.n > 0 || len(v.errs) > 0):
			// As Redlock says: also where no answer came, which may
			// have granted it, or the name stays taken there for a TTL
			// (an API user's trial). The unlock carries this attempt's
			// token: it deletes nothing of anyone else's.
			lk.unlockOn(name, tok, v.maybe)
		case v.n > 0:
			lk.unlockOn(name, tok, v.granted)
		case len(v.errs) > 0:
			// One server that gave no answer (ctx ended during the
			// round trip, a timeout) may have granted it all the same:
			// the name stayed taken for a TTL with no Lock to unlock it
			// (an outside trial: a TryLock whose ctx ended held it 5 s).
			lk.unlockOn(name, tok, nil)
		}
		if ctx.Err() != nil {
			return nil, -1, notObtained(name, context.Cause(ctx))
		}
		return nil, v.wait, lk.refused(name, v)
	}
	if lk.cfg.Settle > 0 {
		if err := lk.settle(ctx, name, tok, v.granted); err != nil {
			return nil, -1, err
		}
	}
	l, err := lk.hold(name, o, tok, v, sent)
	if err != nil {
		return nil, -1, err
	}
	return l, 0, nil
}

// roundTrip is the context of an attempt's round trip: ctx's values
// without its end, so that the attempt learns what Redis did and gives
// back what it got, within the store's own timeouts (its read timeout;
// NodeTimeout with several servers). Ended with ctx, the call returned
// while its command could still go out after the unlock that was to
// undo it (auto-pipelined, in a later batch), and the name stayed held
// for a TTL by nobody (an outside trial: 1 to 14 in 250). A ctx that
// cannot end is used as it is. (A context that ended NodeTimeout after
// ctx cost 9 allocations and a quarter of a cycle's client CPU in the
// lock benchmark.)
func roundTrip(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// precheck refuses a bad name or metadata and a closed Locker, and
// handles a name this Locker already holds: refused, or re-entered (the
// held lock is returned) when Reentrant.
func (lk *Locker) precheck(ctx context.Context, name string, o lockOptions) (*Lock, error) {
	if err := lockName(name); err != nil {
		return nil, err
	}
	if len(o.metadata) > store.MaxMetadataLen {
		return nil, &lockError{name: name, err: fmt.Errorf("metadata of %d bytes, the limit is %d", len(o.metadata), store.MaxMetadataLen)}
	}
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		return nil, ErrClosed
	}
	cur := lk.held[name]
	lk.mu.Unlock()
	if cur == nil {
		return nil, nil
	}
	if !lk.cfg.Reentrant {
		return nil, notObtained(name, errors.New("held by this locker"))
	}
	ok, err := lk.reenter(ctx, cur)
	if ok && err == nil {
		return cur, nil
	}
	return nil, err
}

// distinct refuses a nil store and a server listed twice (see NewLocker).
func distinct(stores []Store) error {
	addrs := map[string]int{}
	for i, st := range stores {
		if isNil(st) {
			return &ConfigError{Field: "stores", Reason: fmt.Sprintf("store %d is nil", i+1)}
		}
		for j := range i {
			if stores[j] == st {
				return &ConfigError{Field: "stores", Reason: fmt.Sprintf("stores %d and %d are the same store: each server would vote twice", j+1, i+1)}
			}
		}
		a, ok := st.(interface{ Addr() string })
		if !ok || a.Addr() == store.EmbeddedAddr {
			continue // an embedded store is a server of its own
		}
		if j, dup := addrs[a.Addr()]; dup {
			return &ConfigError{Field: "stores", Reason: fmt.Sprintf("stores %d and %d are both %s: each server would vote twice", j+1, i+1, a.Addr())}
		}
		addrs[a.Addr()] = i
	}
	return nil
}

// isNil reports whether st is nil, or a nil pointer in the interface (a
// *store.Store not opened): either would panic at its first call.
func isNil(st Store) bool {
	v := reflect.ValueOf(st)
	return st == nil || v.Kind() == reflect.Pointer && v.IsNil()
}

// lockName checks a lock name by the rules of item IDs, and says "lock
// name" when it refuses one (errors.Is(err, store.ErrInvalidID) holds).
func lockName(name string) error {
	var ide *store.IDError
	if err := store.ValidateID(name); errors.As(err, &ide) {
		return fmt.Errorf("ownership: invalid lock name %q: %s (%w)", ide.ID, ide.Reason, store.ErrInvalidID)
	} else if err != nil {
		return err
	}
	return nil
}

// votes is what the servers answered one lock attempt.
type votes struct {
	granted []bool // per server
	// maybe: granted, or no answer (a timeout, a dropped connection),
	// which may have granted it; per server, with several.
	maybe   []bool
	n, busy int
	fence   uint64
	wait    time.Duration // the longest a holder has left, -1 unknown
	heldOff bool          // a server holds the name off after data loss
	errs    []error
}

// voteReply is one server's answer to a lock attempt.
type voteReply struct {
	res store.LockResult
	err error
}

// oneServer holds the granted slices of a single-server Locker's votes,
// shared and never written: not granted, granted.
var oneServer = [2][]bool{{false}, {true}}

// vote asks every server for the lock at once. With one server it asks
// in the caller's goroutine and allocates nothing of its own (a lock
// attempt is a hot path).
func (lk *Locker) vote(ctx context.Context, name string, rec *store.Record) votes {
	var one [1]voteReply
	replies := one[:]
	if len(lk.stores) == 1 {
		one[0].res, one[0].err = lk.stores[0].Lock(ctx, name, rec, lk.cfg.TTL)
	} else {
		replies = lk.voteEach(ctx, name, rec)
	}
	v := votes{wait: -1}
	if len(lk.stores) > 1 {
		v.granted, v.maybe = make([]bool, len(lk.stores)), make([]bool, len(lk.stores))
	}
	for i, r := range replies {
		switch {
		case r.err != nil:
			v.errs = append(v.errs, r.err)
			if v.maybe != nil {
				v.maybe[i] = true
			}
		case r.res.Acquired:
			if v.granted != nil {
				v.granted[i], v.maybe[i] = true, true
			}
			v.n++
			v.fence = max(v.fence, r.res.Fence)
		default:
			v.busy++
			v.wait = max(v.wait, r.res.Wait)
			v.heldOff = v.heldOff || r.res.HeldOff
		}
	}
	if v.granted == nil {
		v.granted = oneServer[v.n]
	}
	return v
}

// voteEach asks every server at once, each bounded by NodeTimeout.
func (lk *Locker) voteEach(ctx context.Context, name string, rec *store.Record) []voteReply {
	replies := make([]voteReply, len(lk.stores))
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		res, err := st.Lock(ctx, name, rec, lk.cfg.TTL)
		replies[i] = voteReply{res, err}
	})
	return replies
}

// heldOffError is a refusal in which a server held the name off after
// Redis lost its data: errors.Is matches ErrHeldOff as well as
// ErrNotObtained, so a caller can try again once the hold ends (at most
// a TTL) instead of treating the name as busy.
type heldOffError struct {
	error
	hold *HoldError // for how long: errors.As finds it, as for a claim
}

func (e heldOffError) Unwrap() []error { return []error{e.error, e.hold} }

// refused is the error of an attempt without a majority (or validity).
func (lk *Locker) refused(name string, v votes) error {
	if len(v.errs) > 0 && len(lk.stores) == 1 {
		return &lockError{name: name, err: v.errs[0]}
	}
	why := ""
	if v.heldOff {
		why = ", held off: Redis lost its data, or the deployment is new"
	}
	err := fmt.Errorf("%d of %d servers granted it, %d needed%s", v.n, len(lk.stores), lk.quorum, why)
	if v.heldOff {
		err = heldOffError{err, &HoldError{Shard: lk.stores[0].Keys().Shard(name), For: max(v.wait, 0)}}
	}
	if len(v.errs) > 0 {
		// Keep the cause visible: servers that failed are why there is
		// no majority.
		err = fmt.Errorf("%w: %w", err, errors.Join(v.errs...))
	}
	return notObtained(name, err)
}

// hold makes the Lock of a granted attempt, arms its lease and starts its
// heartbeats; a Locker closed meanwhile hands it back.
func (lk *Locker) hold(name string, o lockOptions, tok store.Token, v votes, sent time.Time) (*Lock, error) {
	l := &Lock{lk: lk, name: name, metadata: o.metadata, holds: 1, stores: v.granted}
	l.Lease = newLease(context.Background(), name, -1, lk.stores[0].Keys().Lock(name), tok, lk.cfg.Owner, v.fence, lk.cfg.TTL, lk.cfg.Margin, sent)
	l.Lease.arm()
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		lk.unlockOn(name, tok, v.granted)
		l.end(ErrClosed)
		return nil, ErrClosed
	}
	lk.held[name] = l
	lk.mu.Unlock()
	lk.hb.add(l.Lease)
	return l, nil
}

// settle waits, then re-reads the lock on the granting servers.
func (lk *Locker) settle(ctx context.Context, name string, tok store.Token, granted []bool) error {
	t := time.NewTimer(lk.cfg.Settle)
	select {
	case <-ctx.Done():
		t.Stop()
		lk.unlockOn(name, tok, granted)
		return ctx.Err()
	case <-t.C:
	}
	var mu sync.Mutex
	ok := 0
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		if !granted[i] {
			return
		}
		key := st.Keys().Lock(name)
		res, err := st.Extend(ctx, lk.cfg.TTL, 0, []store.ExtendRequest{{Key: key, Token: tok}})
		if err == nil && res[0].Code == store.ExtendOK {
			mu.Lock()
			ok++
			mu.Unlock()
		}
	})
	if ok < lk.quorum {
		lk.unlockOn(name, tok, granted)
		return notObtained(name, errors.New("lost in the settle window"))
	}
	return nil
}

// reenter extends a lock this Locker holds and counts the hold. It
// reports false when the held lock turned out to be lost.
func (lk *Locker) reenter(ctx context.Context, l *Lock) (bool, error) {
	sent := time.Now()
	errs := lk.extend(ctx, []*Lease{l.Lease})
	switch err := errs[0].(type) {
	case nil:
		l.extended(sent)
		if !l.trusted() {
			break
		}
		l.mu.Lock()
		l.holds++
		l.mu.Unlock()
		return true, nil
	case *LeaseLostError:
		l.lose(err.Reason, err.Err)
	default:
		return false, &lockError{name: l.name, err: err}
	}
	lk.forget(l)
	lk.wake(l.name)
	return false, nil
}

func (lk *Locker) forget(l *Lock) {
	lk.mu.Lock()
	if lk.held[l.name] == l {
		delete(lk.held, l.name)
	}
	lk.mu.Unlock()
	lk.hb.remove(l.Lease)
}

// each runs f for every store at once, each bounded by NodeTimeout when
// there are several.
func (lk *Locker) each(ctx context.Context, f func(ctx context.Context, i int, st Store)) {
	if len(lk.stores) == 1 {
		f(ctx, 0, lk.stores[0])
		return
	}
	var wg sync.WaitGroup
	for i, st := range lk.stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(ctx, lk.cfg.NodeTimeout)
			defer cancel()
			f(c, i, st)
		}()
	}
	wg.Wait()
}

func (lk *Locker) unlockOn(name string, tok store.Token, granted []bool) []store.ReleaseCode {
	ctx, cancel := context.WithTimeout(context.Background(), lk.cfg.Heartbeat)
	defer cancel()
	codes := make([]store.ReleaseCode, len(lk.stores))
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		if granted != nil && !granted[i] {
			codes[i] = store.NotHeld
			return
		}
		code, err := st.Unlock(ctx, name, tok)
		if err != nil {
			code = store.NotHeld
		}
		codes[i] = code
	})
	return codes
}

// extend renews locks on every store; a lock stays trusted only while a
// majority renews it.
func (lk *Locker) extend(ctx context.Context, leases []*Lease) []error {
	lk.extendMu.Lock()
	defer lk.extendMu.Unlock()
	return lk.extendLocked(ctx, leases)
}

// ttlGroup is the leases of one TTL: Refresh can give a lock its own.
type ttlGroup struct {
	ttl  time.Duration
	idx  []int // into the leases
	reqs []store.ExtendRequest
}

// byTTL groups leases by their TTL, one extend call per group.
func byTTL(leases []*Lease) []*ttlGroup {
	var groups []*ttlGroup
	for i, l := range leases {
		l.mu.Lock()
		ttl := l.ttl
		l.mu.Unlock()
		var g *ttlGroup
		for _, c := range groups {
			if c.ttl == ttl {
				g = c
			}
		}
		if g == nil {
			g = &ttlGroup{ttl: ttl}
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.reqs = append(g.reqs, store.ExtendRequest{Key: l.key, Token: l.token})
	}
	return groups
}

// extendLocked is extend with extendMu held. Each lock is renewed with
// its own TTL (see Refresh): one Extend call per distinct TTL, which is
// one call unless Refresh changed some.
func (lk *Locker) extendLocked(ctx context.Context, leases []*Lease) []error {
	groups := byTTL(leases)
	type tally struct{ ok, missing, other int }
	counts := make([]tally, len(leases))
	errs := make([]error, len(lk.stores))
	var mu sync.Mutex
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		for _, g := range groups {
			res, err := st.Extend(ctx, g.ttl, 0, g.reqs)
			mu.Lock()
			if err != nil {
				errs[i] = err
				mu.Unlock()
				return
			}
			for k, r := range res {
				switch j := g.idx[k]; r.Code {
				case store.ExtendOK:
					counts[j].ok++
				case store.ExtendMissing:
					counts[j].missing++
				default:
					counts[j].other++
				}
			}
			mu.Unlock()
		}
	})
	var firstErr error
	for _, e := range errs {
		if e != nil {
			firstErr = e
			break
		}
	}
	out := make([]error, len(leases))
	for j, l := range leases {
		c := counts[j]
		switch {
		case c.ok >= lk.quorum:
		case c.other > 0 && len(lk.stores)-c.other < lk.quorum:
			out[j] = &LeaseLostError{ID: l.id, Fence: l.fence, Reason: ReasonTaken}
		case len(lk.stores)-c.other-c.missing < lk.quorum:
			out[j] = &LeaseLostError{ID: l.id, Fence: l.fence, Reason: ReasonDeleted}
		case firstErr != nil:
			out[j] = firstErr
		default:
			out[j] = fmt.Errorf("ownership: %d of %d servers renewed %q", c.ok, len(lk.stores), l.id)
		}
	}
	return out
}

// Holds returns how many times the lock is held (re-entry counts).
func (l *Lock) Holds() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds
}

// Name returns the lock's name ("" for a nil *Lock).
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Metadata returns what the lock was taken with (WithMetadata; "" for a
// nil *Lock).
func (l *Lock) Metadata() string {
	if l == nil {
		return ""
	}
	return l.metadata
}

// Refresh renews the lock now, for ttl (0: the TTL it has), and the
// watchdog renews it with that TTL from then on. ttl must exceed the
// Locker's Heartbeat plus the margin for ttl (Margin scaled by ttl/TTL).
// Refresh returns an error wrapping ErrNotHeld, with the
// *LeaseLostError, when the lock is gone or someone else's (its Context
// is then cancelled), and another error when Redis did not answer: the
// lock is then trusted for what the last renewal covers, and for no more
// than ttl if that is shorter.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return fmt.Errorf("%w: refresh of a nil lock", ErrNotHeld)
	}
	if ttl < 0 {
		return fmt.Errorf("ownership: refresh %q: ttl %v is negative (0: the lock's own ttl)", l.name, ttl)
	}
	lk := l.lk
	l.Lease.mu.Lock()
	if ttl == 0 {
		ttl = l.ttl
	}
	l.Lease.mu.Unlock()
	ttl = ttl.Truncate(time.Millisecond) // what Redis is sent
	margin := lk.marginFor(ttl)
	if ttl-margin <= lk.cfg.Heartbeat {
		return fmt.Errorf("ownership: refresh %q: ttl %v leaves %v past the margin, not more than the heartbeat (%v)",
			l.name, ttl, ttl-margin, lk.cfg.Heartbeat)
	}
	lk.extendMu.Lock()
	defer lk.extendMu.Unlock()
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrNotHeld, l.name, err)
	}
	sent := time.Now()
	l.Lease.mu.Lock()
	l.ttl, l.margin = ttl, margin
	// A shorter TTL shortens the trust window at once, whatever the
	// outcome: Redis may apply it even if the reply is lost.
	if until := sent.Add(ttl - margin); until.Before(l.until) && !l.ended {
		l.until = until
		l.timer.Reset(time.Until(until))
	}
	l.Lease.mu.Unlock()
	switch err := lk.extendLocked(ctx, []*Lease{l.Lease})[0].(type) {
	case nil:
		l.extended(sent)
		return nil
	case *LeaseLostError:
		l.lose(err.Reason, err.Err)
		lk.forget(l)
		lk.wake(l.name)
		return fmt.Errorf("%w: %q: %w", ErrNotHeld, l.name, err)
	default:
		l.noteErr(err)
		return fmt.Errorf("ownership: refresh %q: %w", l.name, err)
	}
}

// marginFor is the trust-window margin of a lock with this TTL: Margin
// covers drift, which grows with the TTL, so it scales with it.
func (lk *Locker) marginFor(ttl time.Duration) time.Duration {
	if ttl == lk.cfg.TTL {
		return lk.cfg.Margin
	}
	return time.Duration(float64(lk.cfg.Margin) * float64(ttl) / float64(lk.cfg.TTL))
}

// TTL returns how long Redis keeps the lock if no renewal comes: Redis's
// PTTL of this lock's record (with a quorum, what a majority keeps), 0
// when the lock is no longer held. It reads Redis; the local trust
// window is Expiry.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, fmt.Errorf("%w: ttl of a nil lock", ErrNotHeld)
	}
	ttls, err := l.lk.read(ctx, l.name)
	if err != nil {
		return 0, err
	}
	var mine []time.Duration
	for _, r := range ttls {
		if r.rec != nil && r.rec.Token == l.token {
			mine = append(mine, max(r.ttl, 0))
		}
	}
	return l.lk.majorityTTL(mine), nil
}

// majorityTTL is the longest time a majority of servers keeps a lock,
// given what each server that has it reported: the quorum-th longest.
func (lk *Locker) majorityTTL(ttls []time.Duration) time.Duration {
	if len(ttls) < lk.quorum {
		return 0
	}
	slices.Sort(ttls)
	return ttls[len(ttls)-lk.quorum]
}

type readReply struct {
	rec *store.Record
	ttl time.Duration
}

// read reads the lock name on every server. It fails unless a majority
// answered.
func (lk *Locker) read(ctx context.Context, name string) ([]readReply, error) {
	out := make([]readReply, len(lk.stores))
	errs := make([]error, len(lk.stores))
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		r, ok := st.(lockReader)
		if !ok {
			errs[i] = fmt.Errorf("ownership: %T cannot read locks", st)
			return
		}
		out[i].rec, out[i].ttl, errs[i] = r.ReadLock(ctx, name)
	})
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if len(lk.stores)-failed < lk.quorum {
		return nil, fmt.Errorf("ownership: read lock %q: %w", name, errors.Join(errs...))
	}
	return out, nil
}

// Inspect reads the lock name from Redis: who holds it, its fence, its
// metadata, since when and for how long more. It returns nil and no
// error when nobody holds it (with a quorum: no holder on a majority).
func (lk *Locker) Inspect(ctx context.Context, name string) (*LockInfo, error) {
	if err := lockName(name); err != nil {
		return nil, err
	}
	replies, err := lk.read(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, r := range replies {
		if r.rec == nil {
			continue
		}
		var ttls []time.Duration
		fence := uint64(0)
		for _, o := range replies {
			if o.rec != nil && o.rec.Token == r.rec.Token {
				ttls = append(ttls, max(o.ttl, 0))
				fence = max(fence, o.rec.Fence)
			}
		}
		if len(ttls) >= lk.quorum {
			// The holder's fence is the highest its servers issued
			// (vote), not the first server's.
			return &LockInfo{Owner: r.rec.Owner, Fence: fence, Metadata: r.rec.Metadata,
				Since: r.rec.ClaimedAt, TTL: lk.majorityTTL(ttls)}, nil
		}
	}
	return nil, nil
}

// Unlock gives back one hold; the last one deletes the lock (compare and
// delete on the token) and stops its watchdog. It reports what Redis
// said: Released, NotHeld (it had expired) or HeldByOther (someone else
// holds it now; nothing was changed). With a quorum, Released needs a
// majority. An unlock that go-redis re-sent after a dropped connection
// still reports Released when its first send released the lock; a second
// Unlock of the same Lock reports NotHeld. On a nil *Lock it returns
// NotHeld and ErrNotHeld. With an error (a server that did not answer in
// time, without a majority that did), what Redis did is unknown: the code
// is NotHeld and means no more than that; a lock left in Redis expires
// within its TTL, and its lease has ended here either way.
func (l *Lock) Unlock(ctx context.Context) (store.ReleaseCode, error) {
	if l == nil {
		return store.NotHeld, fmt.Errorf("%w: unlock of a nil lock", ErrNotHeld)
	}
	l.mu.Lock()
	switch {
	case l.holds > 1:
		l.holds--
		l.mu.Unlock()
		return store.Released, nil
	case l.holds == 0:
		// Unlocked before: nothing to ask Redis (which would call this
		// unlock a re-sent one while the name's released tokens still
		// hold it, unlock.lua, and say released).
		l.mu.Unlock()
		return store.NotHeld, nil
	}
	l.holds = 0
	l.mu.Unlock()
	lk := l.lk
	lk.forget(l)
	// Waiters of this Locker try again once Redis has it back.
	defer lk.wake(l.name)
	l.end(ErrReleased)
	var code1 [1]store.ReleaseCode
	var err1 [1]error
	codes, errs := code1[:], err1[:]
	if len(lk.stores) == 1 {
		// One server: in this goroutine, nothing allocated.
		code1[0], err1[0] = lk.stores[0].Unlock(ctx, l.name, l.token)
	} else {
		codes, errs = lk.unlockEach(ctx, l.name, l.token)
	}
	n := map[store.ReleaseCode]int{}
	var firstErr error
	for i, c := range codes {
		if errs[i] != nil {
			if firstErr == nil {
				firstErr = errs[i]
			}
			continue
		}
		n[c]++
	}
	switch {
	case n[store.Released] >= lk.quorum:
		return store.Released, nil
	case n[store.HeldByOther] > 0:
		return store.HeldByOther, nil
	case firstErr != nil && n[store.NotHeld] < lk.quorum:
		return store.NotHeld, fmt.Errorf("ownership: unlock %q: %w", l.name, firstErr)
	}
	return store.NotHeld, nil
}

// unlockEach unlocks on every server at once, each bounded by
// NodeTimeout.
func (lk *Locker) unlockEach(ctx context.Context, name string, tok store.Token) ([]store.ReleaseCode, []error) {
	codes := make([]store.ReleaseCode, len(lk.stores))
	errs := make([]error, len(lk.stores))
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		codes[i], errs[i] = st.Unlock(ctx, name, tok)
	})
	return codes, errs
}

// Close stops the watchdog and ends every lock still held: their
// contexts are cancelled and nothing renews them, so they expire in
// Redis, unless their holders call Unlock, which still deletes them
// there. TryLock and Lock then return ErrClosed. Close is idempotent.
func (lk *Locker) Close() error {
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		return nil
	}
	lk.closed = true
	held := lk.held
	lk.held = map[string]*Lock{}
	for name, w := range lk.waits { // their next try ends with ErrClosed
		close(w.ch)
		delete(lk.waits, name)
	}
	lk.mu.Unlock()
	lk.hb.close()
	for _, l := range held {
		l.lose(ReasonClosed, nil)
	}
	return nil
}
