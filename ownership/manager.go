package ownership

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/syncd/syncd/store"
)

// Store is what ownership needs from Redis; *store.Store implements it.
type Store interface {
	Keys() store.Keys
	ClaimPick(ctx context.Context, p store.ClaimPickParams) (*store.ClaimPickResult, error)
	ClaimIDs(ctx context.Context, p store.ClaimIDsParams) (*store.ClaimIDsResult, error)
	ClaimBatch(ctx context.Context, p store.ClaimBatchParams) (*store.ClaimBatchResult, error)
	ClaimReceipt(ctx context.Context, shard int, tok store.Token) ([]string, error)
	MarkEpoch(ctx context.Context, shard int, ttl time.Duration) (time.Duration, error)
	// DeploymentAge is how old the deployment was when the store opened:
	// 0 when opening created it (see store.Store.DeploymentAge).
	DeploymentAge() time.Duration
	Extend(ctx context.Context, ttl time.Duration, state store.State, reqs []store.ExtendRequest) ([]store.ExtendResult, error)
	Release(ctx context.Context, shard int, reqs []store.ReleaseRequest) ([]store.ReleaseResult, error)
	Lock(ctx context.Context, name string, rec *store.Record, ttl time.Duration) (store.LockResult, error)
	Unlock(ctx context.Context, name string, tok store.Token) (store.ReleaseCode, error)
}

// Manager claims, heartbeats and releases items of the due index for one
// process. It is safe for concurrent use.
type Manager struct {
	st    Store
	cfg   Config
	log   zerolog.Logger
	hb    *heartbeater
	base  context.Context
	close context.CancelFunc

	mu   sync.Mutex
	hold map[int]time.Time // shard -> no claims before
	// marked is when a missing epoch marker was last logged: once per
	// ttl, not once per shard.
	marked time.Time
	// freshUntil ends the first hold-off of a new deployment (see
	// freshLocked); zero until that hold-off began. freshSaid: its line
	// was logged.
	freshUntil time.Time
	freshSaid  bool
	closed     bool

	stats Stats
}

// Stats are counters of a Manager, safe to read at any time.
type Stats struct {
	ClaimsWon, ClaimsLost, ClaimsUnknown  atomic.Int64
	Heartbeats, HeartbeatErrors           atomic.Int64
	LostTaken, LostDeleted                atomic.Int64
	LostExpired, LostUnreachable          atomic.Int64
	Released, ReleasedNotHeld, ReleaseErr atomic.Int64
	// DamagedFences, DamagedIDs and WrongShard count the items a claim
	// quarantined because their state in Redis is damaged: a fence at or
	// past store.MaxFence, an id that fails store.ValidateID, a valid id
	// in another shard than its own (planted by hand).
	DamagedFences, DamagedIDs, WrongShard atomic.Int64
}

// New returns a Manager over st. Close it to stop its heartbeats.
func New(st Store, cfg Config) (*Manager, error) {
	if isNil(st) {
		return nil, &ConfigError{Field: "store", Reason: "is nil"}
	}
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	m := &Manager{st: st, cfg: c, log: c.Logger.With().Str("component", "ownership").Logger(), hold: map[int]time.Time{}}
	m.base, m.close = context.WithCancel(context.Background())
	m.hb = newHeartbeater(c.Heartbeat, m.extend, m.log)
	m.hb.onLeft = c.ObserveHeartbeat
	m.hb.onBeat = func(n int, err error) {
		m.stats.Heartbeats.Add(1)
		if err != nil {
			m.stats.HeartbeatErrors.Add(1)
		}
	}
	return m, nil
}

// Config returns the configuration in force, defaults applied.
func (m *Manager) Config() Config { return m.cfg }

// Owner returns the owner identity of worker w.
func (m *Manager) Owner(w int) store.Owner {
	o := m.cfg.Owner
	o.Worker = w
	return o
}

// Stats returns the live counters.
func (m *Manager) Stats() *Stats { return &m.stats }

func (m *Manager) countLoss(r Reason) {
	switch r {
	case ReasonTaken:
		m.stats.LostTaken.Add(1)
	case ReasonDeleted:
		m.stats.LostDeleted.Add(1)
	case ReasonExpired:
		m.stats.LostExpired.Add(1)
	case ReasonUnreachable:
		m.stats.LostUnreachable.Add(1)
	}
}

func (m *Manager) markEpoch(ctx context.Context, shard int) error {
	hold, err := m.st.MarkEpoch(ctx, shard, m.cfg.TTL)
	if err != nil {
		return err
	}
	if hold <= 0 {
		return nil
	}
	m.mu.Lock()
	line := m.holdLineLocked()
	m.mu.Unlock()
	switch line {
	case holdQuiet:
		m.log.Debug().Int(keyShard, shard).Int64("hold_off_ms", hold.Milliseconds()).Msg("no epoch marker: shard held off")
	case holdNew:
		m.logNewDeployment(hold)
	default:
		m.log.Warn().Int(keyShard, shard).Int64("hold_off_ms", hold.Milliseconds()).
			Msg("redis has no epoch marker for this shard and others (redis lost its data, or a new deployment): holding off claims until any earlier lease has expired")
	}
	return nil
}

func (m *Manager) logNewDeployment(wait time.Duration) {
	m.log.Info().Int64("wait_ms", wait.Milliseconds()).
		Msg("new deployment: claims start after one ttl, in case a daemon from before still holds a lease (Redis cannot tell a new deployment from one whose data it lost)")
}

// The line a hold-off that begins is logged with: one per data loss, not
// one per shard, and no warning in a new deployment's first ttl.
const (
	holdQuiet = iota // said already: debug
	holdNew          // the first of a new deployment: info
	holdLoss         // the first of a data loss: warn
)

// holdLineLocked says which line a hold-off that begins is logged with.
// Called with m.mu held.
func (m *Manager) holdLineLocked() int {
	if m.freshLocked() {
		if m.freshSaid {
			return holdQuiet
		}
		m.freshSaid = true
		return holdNew
	}
	if time.Since(m.marked) < m.cfg.TTL {
		return holdQuiet
	}
	m.marked = time.Now()
	return holdLoss
}

// freshLocked reports whether a hold-off is the one every new deployment
// waits by design: the deployment was less than one ttl old when the
// store opened (Store.DeploymentAge: this process created it, or joined
// the fleet that did in its first ttl, whose hold-offs are no data loss
// either), and this is the first ttl since. The first call starts that
// window, the rest of the ttl (and a second of slack). A later hold-off
// is a data loss, which the age read once at Open would still call new
// (a user's check saw "new deployment" logged after a FLUSHALL). Called
// with m.mu held.
func (m *Manager) freshLocked() bool {
	age := m.st.DeploymentAge()
	if age >= m.cfg.TTL {
		return false
	}
	if m.freshUntil.IsZero() {
		m.freshUntil = time.Now().Add(m.cfg.TTL - age + time.Second)
	}
	return time.Now().Before(m.freshUntil)
}

// Held returns how long claims of shard stay held off after Redis lost
// its data (until every lease from before the loss has expired), 0 when
// they may go on. The Manager is the one place that tracks hold-offs: a
// claim of a held shard returns a *HoldError without asking Redis.
func (m *Manager) Held(shard int) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.heldLocked(shard)
}

func (m *Manager) heldLocked(shard int) time.Duration {
	until, ok := m.hold[shard]
	if !ok {
		return 0
	}
	left := time.Until(until)
	if left <= 0 {
		delete(m.hold, shard)
		return 0
	}
	return left
}

// checkHold returns ErrClosed, or a *HoldError while shard is held off.
func (m *Manager) checkHold(shard int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if left := m.heldLocked(shard); left > 0 {
		return &HoldError{Shard: shard, For: left}
	}
	return nil
}

// setHold holds h.Shard off for h.For, as Redis reported, but never
// longer than one TTL, which is all a lease from before a data loss can
// last (a reply that says more, or less than nothing, holds one TTL). A
// hold that begins is logged once.
func (m *Manager) setHold(h *store.HoldError) {
	d := h.For
	if d <= 0 || d > m.cfg.TTL {
		d = m.cfg.TTL
	}
	m.mu.Lock()
	begins := m.heldLocked(h.Shard) == 0
	m.hold[h.Shard] = time.Now().Add(d)
	line := holdQuiet
	if begins {
		line = m.holdLineLocked()
	}
	m.mu.Unlock()
	switch {
	case !begins:
	case h.Rewritten:
		m.log.Warn().Int(keyShard, h.Shard).Int64("for_ms", d.Milliseconds()).
			Msg("shard held off: its epoch marker was not a time syncd writes (planted, or what is left after redis lost data); rewritten to hold the shard off one ttl")
	case line == holdQuiet:
		m.log.Debug().Int(keyShard, h.Shard).Int64("for_ms", d.Milliseconds()).Msg("shard held off")
	case line == holdNew:
		m.logNewDeployment(d)
	default:
		m.log.Warn().Int(keyShard, h.Shard).Int64("for_ms", d.Milliseconds()).
			Msg("shard held off: no claims until every lease from before could have expired (redis lost its data, or the deployment is new)")
	}
}

// handBack releases claims that were won but will not be used.
func (m *Manager) handBack(won []store.ItemClaim, tok store.Token, shard int) {
	reqs := make([]store.ReleaseRequest, len(won))
	for i, r := range won {
		reqs[i] = store.ReleaseRequest{ID: r.ID, Token: tok, Kind: store.ReleaseHandBack, DueAt: r.PrevDue}
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Heartbeat)
	defer cancel()
	if _, err := m.st.Release(ctx, shard, reqs); err != nil {
		m.log.Warn().Err(err).Int(keyShard, shard).Msg("hand back unused claims; they expire by themselves")
	}
}

// extend is the heartbeater's batch: one store call for all leases.
func (m *Manager) extend(ctx context.Context, leases []*Lease) []error {
	reqs := make([]store.ExtendRequest, len(leases))
	for i, l := range leases {
		// Due and ID: the extend holds the item in its due index until the
		// new lease end, as the claim did; else, past one ttl, an item in
		// flight reads as due (status, metrics) while no claim round runs.
		reqs[i] = store.ExtendRequest{Key: l.key, Token: l.token, Due: m.st.Keys().Due(l.shard), ID: l.id}
	}
	errs := make([]error, len(leases))
	res, err := m.st.Extend(ctx, m.cfg.TTL, 0, reqs)
	for i, l := range leases {
		switch {
		case err != nil:
			errs[i] = err
		case res[i].Code == store.ExtendMissing:
			errs[i] = &LeaseLostError{ID: l.id, Fence: l.fence, Reason: ReasonDeleted}
		case res[i].Code == store.ExtendOther:
			errs[i] = &LeaseLostError{ID: l.id, Fence: l.fence, Reason: ReasonTaken}
		}
	}
	return errs
}

// OutcomeKind says what a release records. It is store.ReleaseKind under
// ownership's name: the kinds are the release script's, one for one, so
// an alias needs no conversion that could drift, and callers of the
// Manager need not import store for them.
type OutcomeKind = store.ReleaseKind

// Outcome kinds.
const (
	OutcomeSynced     = store.ReleaseSynced     // lastSync = now; due again after Delay
	OutcomeFailed     = store.ReleaseFailed     // attempts + 1; due again after Delay
	OutcomeQuarantine = store.ReleaseQuarantine // attempts + 1; not claimed until requeued
	OutcomeHandBack   = store.ReleaseHandBack   // nothing recorded; due where it was, or after Delay
)

// Outcome says how a sync ended, for Release.
type Outcome struct {
	Kind OutcomeKind
	// Delay until the item is due again (synced: the interval; failed:
	// the backoff; a hand-back: 0 keeps its place in line).
	Delay time.Duration
	// Err is recorded as the item's last error (failed, quarantine).
	Err error
}

// ReleaseResult is the outcome of releasing one lease.
type ReleaseResult struct {
	// Code is what Redis said: released, not held (expired or lost), or
	// held by another owner (nothing was changed).
	Code store.ReleaseCode
	// Recorded reports whether the outcome (lastSync, backoff,
	// quarantine) was written. It is false when the lease's trust window
	// had closed: such an attempt is handed back, never recorded.
	Recorded bool
	// Err is the Redis error, if the release could not be sent.
	Err error
}

// Release ends leases and records their outcomes, one script call per
// shard. A lease whose trust window has closed cannot record its outcome
// (that attempt's lastSync is never written): it is handed back instead.
// Every lease ends, whatever Redis says.
func (m *Manager) Release(ctx context.Context, leases []*Lease, outs []Outcome) []ReleaseResult {
	results := make([]ReleaseResult, len(leases))
	byShard := map[int][]int{}
	for i, l := range leases {
		byShard[l.shard] = append(byShard[l.shard], i)
	}
	if len(byShard) == 1 {
		for shard, idx := range byShard {
			m.releaseShard(ctx, shard, idx, leases, outs, results)
		}
		return results
	}
	// Shards are separate script calls; send them at once.
	var wg sync.WaitGroup
	for shard, idx := range byShard {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.releaseShard(ctx, shard, idx, leases, outs, results)
		}()
	}
	wg.Wait()
	return results
}

func (m *Manager) releaseShard(ctx context.Context, shard int, idx []int, leases []*Lease, outs []Outcome, results []ReleaseResult) {
	reqs := make([]store.ReleaseRequest, len(idx))
	for j, i := range idx {
		l, o := leases[i], outs[i]
		m.hb.remove(l)
		l.startRelease()
		r := store.ReleaseRequest{ID: l.id, Token: l.token, Kind: o.Kind, Delay: o.Delay, DueAt: l.prevDue}
		if o.Kind == OutcomeHandBack && o.Delay > 0 {
			r.DueAt = 0 // due after Delay, not where it was
		}
		if o.Err != nil {
			r.Error = o.Err.Error()
		}
		if !l.trusted() {
			r.Kind, r.Delay, r.DueAt = store.ReleaseHandBack, 0, l.prevDue
		}
		reqs[j] = r
	}
	res, err := m.st.Release(ctx, shard, reqs)
	for j, i := range idx {
		leases[i].end(ErrReleased)
		if err != nil {
			results[i] = ReleaseResult{Code: store.NotHeld, Err: err}
			m.stats.ReleaseErr.Add(1)
			continue
		}
		results[i] = ReleaseResult{Code: res[j].Code, Recorded: res[j].Code == store.Released && reqs[j].Kind == outs[i].Kind}
		if res[j].Code == store.Released {
			m.stats.Released.Add(1)
		} else {
			m.stats.ReleasedNotHeld.Add(1)
		}
	}
}

// Close stops heartbeats and ends every lease still held with
// ReasonClosed, without releasing it in Redis (release first to hand
// claims back). Close is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	for _, l := range m.hb.close() {
		l.lose(ReasonClosed, nil)
	}
	m.close()
	return nil
}
