package engine

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// fakeOwn is an in-memory claimer and dueIndex with the semantics of the
// store's scripts and the Manager, for scheduler tests in
// testing/synctest bubbles (time is the bubble's clock, in ms). Items
// have due times per shard; a pick claims the longest-waiting due items
// of a shard and moves them to their lease expiry, as claim_pick.lua
// does, and reports the shard's new head; Release reschedules them as
// release.lua does; a hold-off is learned from a claim, as the Manager
// learns it from Redis, and refuses claims of the shard until it ends.
type fakeOwn struct {
	mu       sync.Mutex
	shards   int
	cfg      ownership.Config
	stats    ownership.Stats
	items    map[string]*fakeItem
	holds    map[int]time.Time     // shard -> held until
	holdNext map[int]time.Duration // shard -> hold learned at its next pick
	damaged  map[int]error         // shard -> the error its picks fail with
	away     map[int]error         // shard -> the error its reads and picks fail with (out of reach)
	reads    map[int][]time.Time   // shard -> when Oldest read it
	picks    []fakePick            // every ClaimPick, in order
	releases []fakeRelease         // every released lease, in order
}

type fakeItem struct {
	shard   int
	due     int64 // ms; quarantined: math.MaxInt64
	prevDue int64 // due before the claim in force
	fence   uint64
	end     context.CancelCauseFunc // ends the lease; nil when not claimed
}

// fakePick is one ClaimPick: when, of which shard, for how many workers,
// what it got; held when it found the shard held off.
type fakePick struct {
	at      time.Time
	shard   int
	n       int
	got     []string
	held    bool
	damaged bool
}

type fakeRelease struct {
	at   time.Time
	id   string
	kind ownership.OutcomeKind
}

func newFakeOwn(shards int) *fakeOwn {
	return &fakeOwn{shards: shards, cfg: ownership.Config{TTL: 30 * time.Second, Heartbeat: 10 * time.Second},
		items: map[string]*fakeItem{}, holds: map[int]time.Time{}, holdNext: map[int]time.Duration{}, damaged: map[int]error{},
		away: map[int]error{}, reads: map[int][]time.Time{}}
}

// unreachable makes the reads and picks of shard fail as those of a
// Cluster master out of reach do (nil: it answers again).
func (f *fakeOwn) unreachable(shard int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.away, shard)
		return
	}
	f.away[shard] = err
}

// readLog returns when Oldest read shard.
func (f *fakeOwn) readLog(shard int) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reads[shard])
}

// damage makes the picks of shard fail as a claim of a shard with a
// damaged key does (nil: they work again).
func (f *fakeOwn) damage(shard int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.damaged, shard)
		return
	}
	f.damaged[shard] = &store.DamageError{Shard: shard, Err: err}
}

func nowMs() int64 { return time.Now().UnixMilli() }

// add adds an item to shard, due at now + in (negative: waiting since).
func (f *fakeOwn) add(shard int, id string, in time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items[id] = &fakeItem{shard: shard, due: nowMs() + in.Milliseconds()}
}

// holdAtNextPick makes the next pick of shard find it held off for d.
func (f *fakeOwn) holdAtNextPick(shard int, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holdNext[shard] = d
}

func (f *fakeOwn) due(id string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.items[id].due
}

func (f *fakeOwn) pickLog() []fakePick {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.picks)
}

func (f *fakeOwn) releaseLog() []fakeRelease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.releases)
}

func (f *fakeOwn) Config() ownership.Config { return f.cfg }

func (f *fakeOwn) Owner(w int) store.Owner {
	return store.Owner{Host: "fake", PID: 1, Run: "run", Worker: w}
}

func (f *fakeOwn) Stats() *ownership.Stats { return &f.stats }

func (f *fakeOwn) Close() error { return nil }

func (f *fakeOwn) Held(shard int) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heldLocked(shard)
}

func (f *fakeOwn) heldLocked(shard int) time.Duration {
	return max(time.Until(f.holds[shard]), 0)
}

// ClaimPick claims as claim_pick.lua does; with cfg.Settle it then waits
// out the settle delay, as the Manager does, and hands the claims back if
// ctx ends first.
func (f *fakeOwn) ClaimPick(ctx context.Context, p ownership.ClaimPickParams) (*ownership.ClaimPickResult, error) {
	res, err := f.pick(p)
	if err != nil || f.cfg.Settle <= 0 || len(res.Leases) == 0 {
		return res, err
	}
	select {
	case <-time.After(f.cfg.Settle):
		return res, nil
	case <-ctx.Done():
		outs := make([]ownership.Outcome, len(res.Leases))
		for i := range outs {
			outs[i].Kind = ownership.OutcomeHandBack
		}
		f.Release(context.Background(), res.Leases, outs)
		return nil, ctx.Err()
	}
}

func (f *fakeOwn) pick(p ownership.ClaimPickParams) (*ownership.ClaimPickResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pick := fakePick{at: time.Now(), shard: p.Shard, n: len(p.Workers)}
	if d, ok := f.holdNext[p.Shard]; ok {
		delete(f.holdNext, p.Shard)
		f.holds[p.Shard] = time.Now().Add(d)
	}
	if left := f.heldLocked(p.Shard); left > 0 {
		pick.held = true
		f.picks = append(f.picks, pick)
		return nil, &ownership.HoldError{Shard: p.Shard, For: left}
	}
	if err := f.away[p.Shard]; err != nil {
		f.picks = append(f.picks, pick)
		return nil, err
	}
	if err := f.damaged[p.Shard]; err != nil {
		pick.damaged = true
		f.picks = append(f.picks, pick)
		return nil, err
	}
	now := nowMs()
	var cand []string
	for id, it := range f.items {
		// A claimed item is due again when its lease expires, as its
		// score is the lease expiry and the record expires with it.
		if it.shard == p.Shard && it.due <= now {
			cand = append(cand, id)
		}
	}
	// Longest waiting first; equal scores go by member, as in a ZSET.
	slices.SortFunc(cand, func(a, b string) int { return cmp.Or(cmp.Compare(f.items[a].due, f.items[b].due), cmp.Compare(a, b)) })
	res := &ownership.ClaimPickResult{HeadKnown: true}
	for i, id := range cand[:min(len(cand), len(p.Workers))] {
		it := f.items[id]
		if it.end != nil {
			it.end(nil) // its lease expired by itself
		}
		it.prevDue, it.due = it.due, now+f.cfg.TTL.Milliseconds()
		it.fence++
		var lctx context.Context
		lctx, it.end = context.WithCancelCause(context.Background())
		res.Leases = append(res.Leases, ownership.NewLease(lctx, ownership.LeaseParams{ID: id, Shard: p.Shard,
			Owner: f.Owner(p.Workers[i]), Fence: it.fence, Due: it.prevDue, TTL: f.cfg.TTL}))
		pick.got = append(pick.got, id)
	}
	res.Head = f.headLocked(p.Shard)
	f.picks = append(f.picks, pick)
	return res, nil
}

// headLocked is the shard's lowest due score, claimed items (at their
// lease expiry) included, quarantined ones not; store.NoDue when none.
func (f *fakeOwn) headLocked(shard int) int64 {
	head := store.NoDue
	for _, it := range f.items {
		if it.shard == shard && it.due != math.MaxInt64 {
			head = min(head, it.due)
		}
	}
	return head
}

func (f *fakeOwn) ClaimBatch(context.Context, ownership.ClaimBatchParams) ([]*ownership.Lease, error) {
	return nil, errors.New("fake: batch claims are not modelled")
}

func (f *fakeOwn) Release(ctx context.Context, leases []*ownership.Lease, outs []ownership.Outcome) []ownership.ReleaseResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := make([]ownership.ReleaseResult, len(leases))
	for i, l := range leases {
		it := f.items[l.ID()]
		if it == nil || it.end == nil || it.fence != l.Fence() {
			res[i] = ownership.ReleaseResult{Code: store.NotHeld}
			continue
		}
		it.end(ownership.ErrReleased)
		it.end = nil
		switch outs[i].Kind {
		case ownership.OutcomeSynced, ownership.OutcomeFailed:
			it.due = nowMs() + outs[i].Delay.Milliseconds()
		case ownership.OutcomeQuarantine:
			it.due = math.MaxInt64
		case ownership.OutcomeHandBack:
			it.due = it.prevDue
		}
		f.releases = append(f.releases, fakeRelease{at: time.Now(), id: l.ID(), kind: outs[i].Kind})
		res[i] = ownership.ReleaseResult{Code: store.Released, Recorded: true}
	}
	return res
}

func (f *fakeOwn) Keys() store.Keys { return store.NewKeys("fake", f.shards) }

func (f *fakeOwn) Oldest(_ context.Context, skip ...int) ([]store.ShardHead, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]store.ShardHead, f.shards)
	for sh := range out {
		out[sh].Due = store.NoDue
		if slices.Contains(skip, sh) {
			continue
		}
		f.reads[sh] = append(f.reads[sh], time.Now())
		if err := f.away[sh]; err != nil {
			out[sh].Err = err
			continue
		}
		out[sh].Due = f.headLocked(sh)
	}
	return out, nil
}

func (f *fakeOwn) Now(context.Context, ...int) (int64, error) { return nowMs(), nil }

// Backlog counts the due items of the shards not in skip, as the store's
// does (it counted every shard's, so a test of a shard out of reach could
// not tell whether the engine skipped it).
func (f *fakeOwn) Backlog(_ context.Context, skip ...int) (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	due, oldest, now := int64(0), store.NoDue, nowMs()
	for _, it := range f.items {
		if it.due <= now && !slices.Contains(skip, it.shard) {
			due++
			oldest = min(oldest, it.due)
		}
	}
	return due, oldest, nil
}

// claimed returns the items whose claim is in force.
func (f *fakeOwn) claimed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, it := range f.items {
		if it.end != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
