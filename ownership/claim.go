package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncd/syncd/store"
)

// ErrHeldOff reports a claim of a shard, or a lock of a name, held off
// after Redis lost its data; errors.As finds a *HoldError in the error
// that says for how long (for a lock: the longest any server holds it
// off, and the shard of the name).
var ErrHeldOff = store.ErrHeldOff

// HoldError is returned by the claim methods while a shard is held off
// (see Manager.Held). It is store.HoldError under ownership's name: the
// hold comes from Redis's epoch marker and means the same at both
// layers, so an alias needs no conversion, and callers that match either
// name keep working.
type HoldError = store.HoldError

// ClaimPickParams are the parameters of ClaimPick.
type ClaimPickParams struct {
	Shard int
	// Workers names the worker of each slot: up to len(Workers) items
	// are claimed, the i-th in due order for Workers[i] (recorded as its
	// owner).
	Workers []int
}

// ClaimPickResult is the outcome of ClaimPick.
type ClaimPickResult struct {
	// Leases are the claims won, in due order.
	Leases []*Lease
	// Head is the lowest due score left in the shard after the claim (ms,
	// Redis clock; in the future when nothing is due), store.NoDue when
	// the shard holds nothing but quarantined items. HeadKnown is false
	// when Redis's reply was lost.
	Head      int64
	HeadKnown bool
}

// ClaimPick claims up to len(Workers) of the shard's longest-waiting due
// items, found by Redis in the same call (store.ClaimPick). A claim whose
// reply was lost is resolved from the pick's receipt and the confirm
// read. It returns a *HoldError while the shard is held off after Redis
// lost its data. The result is non-nil whenever Redis answered the claim,
// even with an error from a later step: the shard's head is news either
// way.
func (m *Manager) ClaimPick(ctx context.Context, p ClaimPickParams) (*ClaimPickResult, error) {
	if err := m.checkHold(p.Shard); err != nil {
		return nil, err
	}
	if len(p.Workers) == 0 {
		return &ClaimPickResult{}, nil
	}
	c := m.newClaim(p.Shard, nil, p.Workers, true)
	var res *ClaimPickResult
	leases, err := m.claim(ctx, &c, func(ctx context.Context, recs []*store.Record) (claimReply, error) {
		r, err := m.st.ClaimPick(ctx, store.ClaimPickParams{Shard: p.Shard, Records: recs, TTL: m.cfg.TTL,
			MinReplicas: m.cfg.MinReplicas, ReplicaTimeout: m.cfg.ReplicaTimeout})
		if err != nil {
			return claimReply{}, err
		}
		res = &ClaimPickResult{Head: r.Head, HeadKnown: true}
		return claimReply{items: r.Items, replicas: r.Replicas}, nil
	})
	if res == nil && err == nil {
		res = &ClaimPickResult{} // the reply was lost, the claim resolved
	}
	if res != nil {
		res.Leases = leases
	}
	return res, err
}

// ClaimIDsParams are the parameters of ClaimIDs.
type ClaimIDsParams struct {
	Shard int
	IDs   []string
	// Workers names the worker each item is for (recorded as the owner);
	// nil means worker 0 for all.
	Workers []int
}

// ClaimIDs claims the named items of one shard that are in the due index
// and not quarantined, due or not (store.ClaimIDs), and returns a lease
// for each it won; items that are taken, unknown or lost in the settle
// window are left out. A claim whose reply was lost is resolved by the
// confirm read, never reported as not claimed while Redis holds it. It
// returns a *HoldError while the shard is held off.
func (m *Manager) ClaimIDs(ctx context.Context, p ClaimIDsParams) ([]*Lease, error) {
	return m.claimNamed(ctx, p.Shard, p.IDs, p.Workers, func(ctx context.Context, recs []*store.Record) (claimReply, error) {
		r, err := m.st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: p.Shard, IDs: p.IDs, Records: recs, TTL: m.cfg.TTL,
			MinReplicas: m.cfg.MinReplicas, ReplicaTimeout: m.cfg.ReplicaTimeout})
		if err != nil {
			return claimReply{}, err
		}
		return claimReply{items: r.Items, replicas: r.Replicas}, nil
	})
}

// ClaimBatchParams are the parameters of ClaimBatch.
type ClaimBatchParams struct {
	Shard int
	IDs   []string
	// Workers: see ClaimIDsParams.
	Workers []int
	// Since is the batch run's start (ms, Redis clock).
	Since int64
}

// ClaimBatch claims, for a batch run, the named items of one shard not
// synced since the run started (store.ClaimBatch), as ClaimIDs does.
func (m *Manager) ClaimBatch(ctx context.Context, p ClaimBatchParams) ([]*Lease, error) {
	return m.claimNamed(ctx, p.Shard, p.IDs, p.Workers, func(ctx context.Context, recs []*store.Record) (claimReply, error) {
		r, err := m.st.ClaimBatch(ctx, store.ClaimBatchParams{Shard: p.Shard, IDs: p.IDs, Records: recs, Since: p.Since,
			TTL: m.cfg.TTL, MinReplicas: m.cfg.MinReplicas, ReplicaTimeout: m.cfg.ReplicaTimeout})
		if err != nil {
			return claimReply{}, err
		}
		return claimReply{items: r.Items, replicas: r.Replicas}, nil
	})
}

// claimCall is a claim's store call, given the record templates.
type claimCall func(ctx context.Context, recs []*store.Record) (claimReply, error)

// claimNamed is ClaimIDs and ClaimBatch around their store call.
func (m *Manager) claimNamed(ctx context.Context, shard int, ids []string, workers []int, call claimCall) ([]*Lease, error) {
	if err := m.checkHold(shard); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if workers != nil && len(workers) != len(ids) {
		return nil, fmt.Errorf("ownership: %d workers for %d items", len(workers), len(ids))
	}
	c := m.newClaim(shard, ids, workers, false)
	return m.claim(ctx, &c, call)
}

// claim is one claim on its way through the protocol.
type claim struct {
	shard   int
	pick    bool
	tok     store.Token
	recs    []*store.Record // record templates: one per slot, or one for all
	workers []int           // worker of each slot; nil: worker 0
	ids     []string        // item of each slot; a pick learns them from its reply
	sent    time.Time       // the claims are trusted from here
	unknown bool            // the reply was lost
	won     []store.ItemClaim
}

// claimReply is what a store claim call answered, whichever the
// operation.
type claimReply struct {
	items    []store.ItemClaim
	replicas int
}

// newClaim prepares a claim with a fresh token and its record templates:
// one per slot (worker), or one for all when a claim by ids names no
// workers.
func (m *Manager) newClaim(shard int, ids []string, workers []int, pick bool) claim {
	c := claim{shard: shard, pick: pick, tok: store.NewToken(), workers: workers, ids: ids}
	state := store.StateSyncing
	if m.cfg.Settle > 0 {
		state = store.StateClaimed
	}
	n := len(workers)
	if workers == nil {
		n = 1
	}
	c.recs = make([]*store.Record, n)
	for i := range n {
		w := 0
		if workers != nil {
			w = workers[i]
		}
		c.recs[i] = &store.Record{Version: store.RecordVersion, Token: c.tok, State: state, Owner: m.Owner(w)}
	}
	return c
}

// claim runs c through the protocol: send the claim (send), resolve a
// lost reply (resolveLost), quarantine what was won under an id that is
// not valid (quarantineBadIDs), keep the rest (keepWon), check the
// replicas (checkReplicas), settle and confirm (settle, confirm, with
// recover after a lost reply), and build the leases (leases).
func (m *Manager) claim(ctx context.Context, c *claim, call claimCall) ([]*Lease, error) {
	reply, err := m.send(ctx, c, call)
	if errors.Is(err, store.ErrEpochMissing) {
		if err := m.markEpoch(ctx, c.shard); err != nil {
			return nil, err
		}
		reply, err = m.send(ctx, c, call)
	}
	if err != nil {
		if !lostReply(ctx, err) {
			return nil, err
		}
		if reply, err = m.resolveLost(ctx, c, err); err != nil {
			return nil, err
		}
	}
	if bad := m.keepWon(c, reply.items); len(bad) > 0 {
		m.quarantineBadIDs(c, bad)
	}
	if len(c.won) == 0 {
		return nil, nil
	}
	if err := m.checkReplicas(c, reply.replicas); err != nil {
		return nil, err
	}
	if m.cfg.Settle > 0 || c.unknown {
		if err := m.settle(ctx, c); err != nil {
			return nil, err
		}
		if err := m.confirm(ctx, c); err != nil {
			return nil, err
		}
	}
	return m.leases(c), nil
}

// send makes the claim call and remembers a hold-off that Redis reports.
func (m *Manager) send(ctx context.Context, c *claim, call claimCall) (claimReply, error) {
	c.sent = time.Now()
	reply, err := call(ctx, c.recs)
	if errors.Is(err, store.ErrHeldOff) {
		var hold *store.HoldError
		if errors.As(err, &hold) {
			m.setHold(hold)
		}
	}
	return reply, err
}

// lostReply reports whether a claim's error means its reply was lost, not
// the claim: Redis may hold it. A cancelled ctx means we gave up, unless
// its deadline passed, which is a timeout like any other.
func lostReply(ctx context.Context, err error) bool {
	return store.IsUnavailable(err) && (ctx.Err() == nil || errors.Is(err, context.DeadlineExceeded))
}

// resolveLost makes a claim whose reply was lost a set of claims to
// confirm: the ids it named or, for a pick, what its receipt lists (what
// the script took, if it ran).
func (m *Manager) resolveLost(ctx context.Context, c *claim, err error) (claimReply, error) {
	c.unknown = true
	maybe := c.ids
	if c.pick {
		var rerr error
		if maybe, rerr = m.st.ClaimReceipt(ctx, c.shard, c.tok); rerr != nil {
			// The records, if any, expire by themselves.
			return claimReply{}, fmt.Errorf("ownership: pick claim of shard %d: reply lost (%w), receipt unreadable: %w", c.shard, err, rerr)
		}
	}
	m.stats.ClaimsUnknown.Add(int64(len(maybe)))
	m.log.Warn().Err(err).Int(keyShard, c.shard).Int("items", len(maybe)).Msg("claim reply lost; confirming")
	reply := claimReply{items: make([]store.ItemClaim, len(maybe))}
	for i, id := range maybe {
		reply.items[i] = store.ItemClaim{ID: id, Code: store.ClaimOK}
	}
	return reply, nil
}

// keepWon keeps the items the claim won; a pick's fill its slots in
// order. It counts the items lost and warns of foreign records and
// damaged fences. It returns the items won whose ids are not valid
// (store.ValidateID: read back from Redis, they are input too): they
// fill their slots but are not kept.
func (m *Manager) keepWon(c *claim, items []store.ItemClaim) (bad []store.ItemClaim) {
	if c.pick {
		c.ids = make([]string, 0, len(items))
	}
	for _, r := range items {
		switch {
		case r.Code == store.ClaimOK:
			if c.pick {
				c.ids = append(c.ids, r.ID)
			}
			if store.ValidateID(r.ID) != nil || m.st.Keys().Shard(r.ID) != c.shard {
				bad = append(bad, r)
			} else {
				c.won = append(c.won, r)
			}
			continue
		case r.Code == store.ClaimForeign:
			// Reported by the one claim that finds it (the item then
			// leaves the due range until the record is gone).
			m.log.Warn().Str(keyID, shownID(r.ID)).Int(keyShard, c.shard).Int64("ttl_ms", m.cfg.TTL.Milliseconds()).
				Msg("item held by a record syncd did not write (no expiry, corrupt, oversized or another type): treated as another owner's claim until it expires; one without expiry now expires after one ttl")
		case r.Code == store.ClaimDamaged:
			m.damagedFence(c, r) // quarantined by the claim: found once
		}
		if !c.pick {
			m.stats.ClaimsLost.Add(1)
		}
	}
	return bad
}

// checkReplicas hands the claims back when fewer than MinReplicas
// replicas acknowledged them (WAIT). A claim whose reply was lost has no
// count: its confirm read decides.
func (m *Manager) checkReplicas(c *claim, replicas int) error {
	if c.unknown || m.cfg.MinReplicas == 0 || replicas >= m.cfg.MinReplicas {
		return nil
	}
	m.handBack(c.won, c.tok, c.shard)
	return fmt.Errorf("%w: %d of %d", ErrReplicas, replicas, m.cfg.MinReplicas)
}

// settle waits out the settle delay, so that a claim lost meanwhile (a
// failover replaced it) shows in the confirm read; if ctx ends first the
// claims are handed back.
func (m *Manager) settle(ctx context.Context, c *claim) error {
	if m.cfg.Settle <= 0 {
		return nil
	}
	t := time.NewTimer(m.cfg.Settle)
	defer t.Stop()
	select {
	case <-ctx.Done():
		m.handBack(c.won, c.tok, c.shard)
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// confirm re-reads the claims won (compare the token, mark syncing,
// extend) and keeps those still ours, with the fence Redis holds. A
// confirmed claim is trusted from the confirm's send time at the latest.
// After a lost reply, recover reads back what the reply carried.
func (m *Manager) confirm(ctx context.Context, c *claim) error {
	reqs := make([]store.ExtendRequest, len(c.won))
	due := m.st.Keys().Due(c.shard) // held until the extended lease ends, as the heartbeat holds it
	for i, r := range c.won {
		reqs[i] = store.ExtendRequest{Key: m.st.Keys().Record(c.shard, r.ID), Token: c.tok, Due: due, ID: r.ID}
	}
	sent := time.Now()
	res, err := m.st.Extend(ctx, m.cfg.TTL, store.StateSyncing, reqs)
	if err != nil {
		// Unknown again: the records, if any, expire by themselves.
		return fmt.Errorf("ownership: confirm claims of shard %d: %w", c.shard, err)
	}
	if c.unknown {
		c.sent = sent
	}
	ours := c.won[:0]
	for i, r := range c.won {
		if res[i].Code == store.ExtendOK {
			r.Fence = res[i].Fence
			ours = append(ours, r)
			continue
		}
		m.stats.ClaimsLost.Add(1)
		msg := "claim not confirmed after settle"
		if c.unknown {
			msg = "claim whose reply was lost is not ours"
		}
		m.log.Info().Str(keyID, r.ID).Int(keyShard, c.shard).Msg(msg)
	}
	c.won = ours
	if c.unknown {
		m.recover(ctx, c)
	}
	return nil
}

// recover learns what a lost reply carried for the claims the confirm
// proved ours: the claim script, run again with the same token
// (store.ClaimIDs), is idempotent for them and returns attempt and
// lastSync. A claim it cannot read back is handed back: started, its
// sink would be told the item never synced (found by tests/fault with
// 60% of replies delayed).
func (m *Manager) recover(ctx context.Context, c *claim) {
	got := map[string]store.ItemClaim{}
	if len(c.won) > 0 {
		p := store.ClaimIDsParams{Shard: c.shard, IDs: make([]string, len(c.won)), Records: c.recs, TTL: m.cfg.TTL}
		if len(c.recs) > 1 {
			p.Records = make([]*store.Record, len(c.won))
		}
		for i, r := range c.won {
			p.IDs[i] = r.ID
			if len(c.recs) > 1 {
				p.Records[i] = c.recs[indexOf(c.ids, r.ID, 0)]
			}
		}
		if res, err := m.st.ClaimIDs(ctx, p); err == nil {
			for _, r := range res.Items {
				if r.Code == store.ClaimOK {
					r.PrevDue = 0 // moved by our own claim; a hand-back makes it due now
					got[r.ID] = r
				}
			}
		}
	}
	kept := c.won[:0]
	var unread []store.ItemClaim
	for _, r := range c.won {
		rc, ok := got[r.ID]
		if !ok {
			unread = append(unread, r)
			continue
		}
		r.Attempt, r.LastSync, r.PrevDue = rc.Attempt, rc.LastSync, rc.PrevDue
		kept = append(kept, r)
	}
	c.won = kept
	if len(unread) > 0 {
		m.log.Warn().Int(keyShard, c.shard).Int("items", len(unread)).
			Msg("claims whose reply was lost are ours, but their state could not be read back: handed back")
		m.handBack(unread, c.tok, c.shard)
	}
}

// leases builds a lease for each claim kept, for the worker of its slot,
// trusted from c.sent, and heartbeats them.
func (m *Manager) leases(c *claim) []*Lease {
	leases := make([]*Lease, 0, len(c.won))
	for i, r := range c.won {
		w := 0
		if c.workers != nil {
			w = c.workers[indexOf(c.ids, r.ID, i)]
		}
		l := newLease(m.base, r.ID, c.shard, m.st.Keys().Record(c.shard, r.ID), c.tok, m.Owner(w), r.Fence, m.cfg.TTL, m.cfg.Margin, c.sent)
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
	return leases
}

// indexOf returns the slot of id, looking from hint first.
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
