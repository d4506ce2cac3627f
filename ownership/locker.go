package ownership

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// Default false: a Locker is then an owner like any other, and
	// goroutines sharing it exclude each other.
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

	mu     sync.Mutex
	held   map[string]*Lock
	closed bool
}

// Lock is a held standalone lock.
type Lock struct {
	*Lease
	lk     *Locker
	name   string
	mu     sync.Mutex
	holds  int
	stores []bool // which stores granted it
}

// NewLocker returns a Locker over one store, or a quorum Locker over
// several independent ones.
func NewLocker(cfg LockerConfig, stores ...Store) (*Locker, error) {
	if len(stores) == 0 {
		return nil, &ConfigError{Field: "stores", Reason: "need at least one"}
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
		log: c.Logger.With().Str("component", "locker").Logger(), held: map[string]*Lock{}}
	lk.hb = newHeartbeater(c.Heartbeat, lk.extend, lk.log)
	return lk, nil
}

// TryLock makes one attempt to take the lock name. It returns an error
// wrapping ErrNotObtained when someone else holds it.
func (lk *Locker) TryLock(ctx context.Context, name string) (*Lock, error) {
	l, _, err := lk.try(ctx, name)
	return l, err
}

// Lock waits for the lock, retrying with jittered exponential backoff
// (never sleeping past the holder's remaining lease), until it is taken
// or ctx ends.
func (lk *Locker) Lock(ctx context.Context, name string) (*Lock, error) {
	backoff := lk.cfg.RetryMin
	for {
		l, wait, err := lk.try(ctx, name)
		if err == nil || !errors.Is(err, ErrNotObtained) && !store.IsUnavailable(err) {
			return l, err
		}
		d := backoff/2 + rand.N(backoff/2+1)
		if wait > 0 && wait < d {
			d = wait
		}
		backoff = min(2*backoff, lk.cfg.RetryMax)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("ownership: lock %q: %w", name, context.Cause(ctx))
		case <-t.C:
		}
	}
}

func (lk *Locker) try(ctx context.Context, name string) (*Lock, time.Duration, error) {
	if err := store.ValidateID(name); err != nil {
		return nil, 0, err
	}
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		return nil, 0, ErrClosed
	}
	cur := lk.held[name]
	lk.mu.Unlock()
	if cur != nil {
		if !lk.cfg.Reentrant {
			return nil, 0, fmt.Errorf("%w: %q is held by this locker", ErrNotObtained, name)
		}
		if ok, err := lk.reenter(ctx, cur); ok || err != nil {
			return cur, 0, err
		}
	}
	tok := store.NewToken()
	rec := &store.Record{Version: store.RecordVersion, Token: tok, State: store.StateSyncing, Owner: lk.cfg.Owner}
	sent := time.Now()
	type reply struct {
		res store.LockResult
		err error
	}
	replies := make([]reply, len(lk.stores))
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		res, err := st.Lock(ctx, name, rec, lk.cfg.TTL)
		replies[i] = reply{res, err}
	})
	granted := make([]bool, len(lk.stores))
	n, busy, fence, wait := 0, 0, uint64(0), time.Duration(0)
	var firstErr error
	for i, r := range replies {
		switch {
		case r.err != nil:
			if firstErr == nil {
				firstErr = r.err
			}
		case r.res.Acquired:
			granted[i] = true
			n++
			fence = max(fence, r.res.Fence)
		default:
			busy++
			wait = max(wait, r.res.Wait)
		}
	}
	// Validity: TTL - elapsed - margin must be left, or it is not a lock.
	valid := lk.cfg.TTL - time.Since(sent) - lk.cfg.Margin
	if n < lk.quorum || valid <= 0 {
		if n > 0 {
			lk.unlockOn(name, tok, granted)
		}
		if firstErr != nil && busy == 0 && n < lk.quorum && len(lk.stores)-busy >= lk.quorum {
			// Nobody else holds it; too many servers did not answer.
			return nil, 0, fmt.Errorf("ownership: lock %q: %w", name, firstErr)
		}
		return nil, wait, fmt.Errorf("%w: %q (%d of %d servers granted it, %d needed)", ErrNotObtained, name, n, len(lk.stores), lk.quorum)
	}
	if lk.cfg.Settle > 0 {
		if err := lk.settle(ctx, name, tok, granted); err != nil {
			return nil, 0, err
		}
	}
	l := &Lock{lk: lk, name: name, holds: 1, stores: granted}
	l.Lease = newLease(context.Background(), name, -1, lk.stores[0].Keys().Lock(name), tok, lk.cfg.Owner, fence, lk.cfg.TTL, lk.cfg.Margin, sent)
	l.Lease.arm()
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		lk.unlockOn(name, tok, granted)
		l.end(ErrClosed)
		return nil, 0, ErrClosed
	}
	lk.held[name] = l
	lk.mu.Unlock()
	lk.hb.add(l.Lease)
	return l, 0, nil
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
		return fmt.Errorf("%w: %q lost in the settle window", ErrNotObtained, name)
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
		return false, fmt.Errorf("ownership: lock %q: %w", l.name, err)
	}
	lk.forget(l)
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
	reqs := make([]store.ExtendRequest, len(leases))
	for i, l := range leases {
		reqs[i] = store.ExtendRequest{Key: l.key, Token: l.token}
	}
	type tally struct{ ok, missing, other int }
	counts := make([]tally, len(leases))
	errs := make([]error, len(lk.stores))
	var mu sync.Mutex
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		res, err := st.Extend(ctx, lk.cfg.TTL, 0, reqs)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs[i] = err
			return
		}
		for j, r := range res {
			switch r.Code {
			case store.ExtendOK:
				counts[j].ok++
			case store.ExtendMissing:
				counts[j].missing++
			default:
				counts[j].other++
			}
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
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Unlock gives back one hold; the last one deletes the lock (compare and
// delete on the token) and stops its watchdog. It reports what Redis
// said: Released, NotHeld (it had expired) or HeldByOther (someone else
// holds it now; nothing was changed). With a quorum, Released needs a
// majority.
func (l *Lock) Unlock(ctx context.Context) (store.ReleaseCode, error) {
	l.mu.Lock()
	if l.holds > 1 {
		l.holds--
		l.mu.Unlock()
		return store.Released, nil
	}
	l.holds = 0
	l.mu.Unlock()
	lk := l.lk
	lk.forget(l)
	l.end(ErrReleased)
	codes := make([]store.ReleaseCode, len(lk.stores))
	errs := make([]error, len(lk.stores))
	lk.each(ctx, func(ctx context.Context, i int, st Store) {
		codes[i], errs[i] = st.Unlock(ctx, l.name, l.token)
	})
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

// Close stops the watchdog and ends every lock still held (they are not
// unlocked in Redis; they expire). Close is idempotent.
func (lk *Locker) Close() error {
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		return nil
	}
	lk.closed = true
	held := lk.held
	lk.held = map[string]*Lock{}
	lk.mu.Unlock()
	lk.hb.close()
	for _, l := range held {
		l.lose(ReasonClosed, nil)
	}
	return nil
}
