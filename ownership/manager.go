package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/syncd/syncd/store"
)

// Store is what ownership needs from Redis; *store.Store implements it.
type Store interface {
	Keys() store.Keys
	Claim(ctx context.Context, req store.ClaimRequest) (*store.ClaimResponse, error)
	ClaimReceipt(ctx context.Context, shard int, tok store.Token) ([]string, error)
	MarkEpoch(ctx context.Context, shard int, ttl time.Duration) (time.Duration, error)
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

	mu     sync.Mutex
	hold   map[int]time.Time // shard -> no claims before
	closed bool

	stats Stats
}

// Stats are counters of a Manager, safe to read at any time.
type Stats struct {
	ClaimsWon, ClaimsLost, ClaimsUnknown  atomic.Int64
	Heartbeats, HeartbeatErrors           atomic.Int64
	LostTaken, LostDeleted                atomic.Int64
	LostExpired, LostUnreachable          atomic.Int64
	Released, ReleasedNotHeld, ReleaseErr atomic.Int64
}

// New returns a Manager over st. Close it to stop its heartbeats.
func New(st Store, cfg Config) (*Manager, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	m := &Manager{st: st, cfg: c, log: c.Logger.With().Str("component", "ownership").Logger(), hold: map[int]time.Time{}}
	m.base, m.close = context.WithCancel(context.Background())
	m.hb = newHeartbeater(c.Heartbeat, m.extend, m.log)
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

// ClaimRequest asks for items of one shard.
type ClaimRequest struct {
	Shard int
	IDs   []string
	// Workers names the worker each item is for (recorded as the owner);
	// nil means worker 0 for all.
	Workers []int
	// OnlyDue skips items that are not due yet.
	OnlyDue bool
	// Since > 0 selects batch mode (see store.ClaimRequest.Since).
	Since int64
	// Pick > 0 claims up to Pick of the shard's longest-waiting due items,
	// found by Redis in the same call (store.ClaimRequest.Pick); IDs must
	// be empty and Workers, if set, names the worker of each of the Pick
	// slots. The leases come in due order.
	Pick int
	// OnHead, for a pick claim that Redis answered, is called with the
	// lowest due score left in the shard (store.ClaimResponse.Head).
	OnHead func(ms int64)
}

// Claim claims the items it can and returns a lease for each; items that
// are taken, not due or lost in the settle window are left out. The
// claim is SET NX PX with a fresh fence; after Settle the claim is
// re-read (compare the token) before it is trusted. A claim whose reply
// was lost is resolved by that re-read, never reported as not claimed
// while Redis holds it. It returns a *store.HoldError while the shard is
// held off after Redis lost its data.
func (m *Manager) Claim(ctx context.Context, req ClaimRequest) ([]*Lease, error) {
	if err := m.checkHold(req.Shard); err != nil {
		return nil, err
	}
	slots := len(req.IDs)
	if req.Pick > 0 {
		if len(req.IDs) > 0 {
			return nil, errors.New("ownership: a pick claim names no ids")
		}
		slots = req.Pick
	}
	if slots == 0 {
		return nil, nil
	}
	if req.Workers != nil && len(req.Workers) != slots {
		return nil, fmt.Errorf("ownership: %d workers for %d items", len(req.Workers), slots)
	}
	tok := store.NewToken()
	state := store.StateSyncing
	if m.cfg.Settle > 0 {
		state = store.StateClaimed
	}
	// One record template per slot (worker); a claim by ids that names no
	// workers writes one template for all.
	n := slots
	if req.Workers == nil && req.Pick == 0 {
		n = 1
	}
	recs := make([]*store.Record, 0, n)
	for i := range n {
		w := 0
		if req.Workers != nil {
			w = req.Workers[i]
		}
		recs = append(recs, &store.Record{Version: store.RecordVersion, Token: tok, State: state, Owner: m.Owner(w)})
	}
	sreq := store.ClaimRequest{Shard: req.Shard, IDs: req.IDs, Records: recs, TTL: m.cfg.TTL, OnlyDue: req.OnlyDue, Since: req.Since,
		Pick: req.Pick > 0, MinReplicas: m.cfg.MinReplicas, ReplicaTimeout: m.cfg.ReplicaTimeout}
	sent := time.Now()
	resp, err := m.st.Claim(ctx, sreq)
	if errors.Is(err, store.ErrEpochMissing) {
		if err := m.markEpoch(ctx, req.Shard); err != nil {
			return nil, err
		}
		sent = time.Now()
		resp, err = m.st.Claim(ctx, sreq)
	}
	var hold *store.HoldError
	if errors.As(err, &hold) {
		m.setHold(req.Shard, hold.For)
		return nil, err
	}
	if err == nil && req.OnHead != nil {
		req.OnHead(resp.Head)
	}
	unknown := false
	if err != nil {
		if !store.IsUnavailable(err) || ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		// The reply is lost, not the claim: Redis may hold it. Resolve it
		// with the confirm read below.
		unknown = true
		maybe := req.IDs
		if req.Pick > 0 {
			// What the script took, if it ran, is on its receipt.
			var rerr error
			if maybe, rerr = m.st.ClaimReceipt(ctx, req.Shard, tok); rerr != nil {
				// The records, if any, expire by themselves.
				return nil, fmt.Errorf("ownership: pick claim of shard %d: reply lost (%w), receipt unreadable: %w", req.Shard, err, rerr)
			}
		}
		m.stats.ClaimsUnknown.Add(int64(len(maybe)))
		m.log.Warn().Err(err).Int(keyShard, req.Shard).Int("items", len(maybe)).Msg("claim reply lost; confirming")
		resp = &store.ClaimResponse{Results: make([]store.ClaimResult, len(maybe))}
		for i, id := range maybe {
			resp.Results[i] = store.ClaimResult{ID: id, Code: store.ClaimOK}
		}
	}
	// ids[i] is the item of slot i (record template i, worker i): a pick
	// claim fills the slots in order.
	ids := req.IDs
	if req.Pick > 0 {
		ids = make([]string, 0, len(resp.Results))
	}
	var won []store.ClaimResult
	for _, r := range resp.Results {
		switch {
		case r.Code == store.ClaimOK:
			won = append(won, r)
			if req.Pick > 0 {
				ids = append(ids, r.ID)
			}
			continue
		case r.Code == store.ClaimForeign:
			// Reported by the one claim that finds it (the item then
			// leaves the due range until the record is gone).
			m.log.Warn().Str(keyID, r.ID).Int(keyShard, req.Shard).Dur("ttl", m.cfg.TTL).
				Msg("item held by a record syncd did not write (no expiry, corrupt, oversized or another type): treated as another owner's claim until it expires; one without expiry now expires after one ttl")
		}
		if req.Pick == 0 {
			m.stats.ClaimsLost.Add(1)
		}
	}
	if len(won) == 0 {
		return nil, nil
	}
	if !unknown && m.cfg.MinReplicas > 0 && resp.Replicas < m.cfg.MinReplicas {
		m.handBack(won, tok, req.Shard)
		return nil, fmt.Errorf("%w: %d of %d", ErrReplicas, resp.Replicas, m.cfg.MinReplicas)
	}
	if m.cfg.Settle > 0 || unknown {
		if m.cfg.Settle > 0 {
			t := time.NewTimer(m.cfg.Settle)
			select {
			case <-ctx.Done():
				t.Stop()
				m.handBack(won, tok, req.Shard)
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		// Confirm: compare the token, mark syncing, extend. A confirmed
		// claim is trusted from the confirm's send time at the latest.
		reqs := make([]store.ExtendRequest, len(won))
		for i, r := range won {
			reqs[i] = store.ExtendRequest{Key: m.st.Keys().Record(req.Shard, r.ID), Token: tok}
		}
		csent := time.Now()
		res, err := m.st.Extend(ctx, m.cfg.TTL, store.StateSyncing, reqs)
		if err != nil {
			// Unknown again: the records, if any, expire by themselves.
			return nil, fmt.Errorf("ownership: confirm claims of shard %d: %w", req.Shard, err)
		}
		if unknown {
			sent = csent
		}
		recovered := map[string]store.ClaimResult{}
		if unknown {
			// The confirm proved which claims are ours; the claim script,
			// run again with the same token, is idempotent for them and
			// returns what the lost reply carried: attempt and lastSync.
			var ours []string
			for i, r := range won {
				if res[i].Code == store.ExtendOK {
					ours = append(ours, r.ID)
				}
			}
			again := sreq
			again.IDs, again.MinReplicas, again.OnlyDue, again.Since, again.Pick = ours, 0, false, 0, false
			if req.Workers != nil || req.Pick > 0 {
				again.Records = nil
				for _, id := range ours {
					again.Records = append(again.Records, recs[indexOf(ids, id, 0)])
				}
			}
			if len(ours) > 0 {
				if r2, err := m.st.Claim(ctx, again); err == nil {
					for _, r := range r2.Results {
						if r.Code == store.ClaimOK {
							r.PrevDue = 0 // moved by our own claim; a hand-back makes it due now
							recovered[r.ID] = r
						}
					}
				}
			}
		}
		kept := won[:0]
		var unread []store.ClaimResult
		for i, r := range won {
			if res[i].Code == store.ExtendOK {
				r.Fence = res[i].Fence
				if rc, ok := recovered[r.ID]; ok {
					r.Attempt, r.LastSync, r.PrevDue = rc.Attempt, rc.LastSync, rc.PrevDue
				} else if unknown {
					// Ours, but what the lost reply carried (lastSync,
					// attempt) could not be read back: the sink would be
					// told the item never synced. Hand it back instead
					// (found by tests/fault with 60% of replies delayed).
					unread = append(unread, r)
					continue
				}
				kept = append(kept, r)
			} else {
				m.stats.ClaimsLost.Add(1)
				msg := "claim not confirmed after settle"
				if unknown {
					msg = "claim whose reply was lost is not ours"
				}
				m.log.Info().Str(keyID, r.ID).Int(keyShard, req.Shard).Msg(msg)
			}
		}
		won = kept
		if len(unread) > 0 {
			m.log.Warn().Int(keyShard, req.Shard).Int("items", len(unread)).
				Msg("claims whose reply was lost are ours, but their state could not be read back: handed back")
			m.handBack(unread, tok, req.Shard)
		}
	}
	leases := make([]*Lease, 0, len(won))
	for i, r := range won {
		w := 0
		if req.Workers != nil {
			w = req.Workers[indexOf(ids, r.ID, i)]
		}
		l := newLease(m.base, r.ID, req.Shard, m.st.Keys().Record(req.Shard, r.ID), tok, m.Owner(w), r.Fence, m.cfg.TTL, m.cfg.Margin, sent)
		l.attempt, l.last, l.prevDue = r.Attempt, r.LastSync, r.PrevDue
		l.onLose = m.countLoss
		l.arm()
		if l.attempt == 0 {
			l.attempt = 1
		}
		m.hb.add(l)
		leases = append(leases, l)
	}
	m.stats.ClaimsWon.Add(int64(len(leases)))
	return leases, nil
}

func indexOf(ids []string, id string, hint int) int {
	for i := hint; i < len(ids); i++ {
		if ids[i] == id {
			return i
		}
	}
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return 0
}

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
	if hold > 0 {
		m.log.Warn().Int(keyShard, shard).Dur("hold_off", hold).
			Msg("redis has no epoch marker for this shard (new deployment on a fresh redis, or redis lost its data): holding off claims until any earlier lease has expired")
	}
	return nil
}

func (m *Manager) checkHold(shard int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if until, ok := m.hold[shard]; ok {
		if left := time.Until(until); left > 0 {
			return &store.HoldError{Shard: shard, For: left}
		}
		delete(m.hold, shard)
	}
	return nil
}

func (m *Manager) setHold(shard int, d time.Duration) {
	m.mu.Lock()
	m.hold[shard] = time.Now().Add(d)
	m.mu.Unlock()
}

// handBack releases claims that were won but will not be used.
func (m *Manager) handBack(won []store.ClaimResult, tok store.Token, shard int) {
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
		reqs[i] = store.ExtendRequest{Key: l.key, Token: l.token}
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

// Outcome says how a sync ended, for Release.
type Outcome struct {
	Kind store.ReleaseKind
	// Delay until the item is due again (synced: the interval; failed:
	// the backoff).
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
		r := store.ReleaseRequest{ID: l.id, Token: l.token, Kind: o.Kind, Delay: o.Delay, DueAt: l.prevDue}
		if o.Err != nil {
			r.Error = o.Err.Error()
		}
		if !l.trusted() {
			r.Kind = store.ReleaseHandBack
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
