package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClaimCode is the outcome of claiming one item. ClaimForeign is a
// record that syncd does not write: no expiry, not a record (corrupt,
// oversized) or a key of another type, put there by hand or by another
// program. It is treated as another owner's claim until it expires; one
// without expiry is given the claim's TTL, so it cannot block the item
// for ever. The claim that finds it reports it once: afterwards the item
// is out of the due range until the record is gone. ClaimDamaged is an
// item whose stored fence is at or past MaxFence: the claim quarantined
// it, with why and how to fix it as its error, and reports it once.
type ClaimCode int8

// Claim outcomes of one item.
const (
	ClaimDamaged ClaimCode = -3 // quarantined: its fence cannot be raised (see above)
	ClaimForeign ClaimCode = -2 // held by a record syncd did not write (see above)
	ClaimTaken   ClaimCode = -1 // another owner holds it
	ClaimSkipped ClaimCode = 0  // not due, unknown or quarantined
	ClaimOK      ClaimCode = 1  // claimed (or already ours with this token)
)

// ItemClaim is the outcome of claiming one item.
type ItemClaim struct {
	ID       string
	Code     ClaimCode
	Fence    uint64
	Attempt  int
	LastSync time.Time
	// PrevDue is the item's due time (ms, Redis clock) before the claim;
	// a hand-back restores it so the item keeps its place in line.
	PrevDue int64
}

// ClaimPickParams are the parameters of ClaimPick.
type ClaimPickParams struct {
	Shard int
	// Records are the templates written for the items claimed, one per
	// slot, all with the same token: Records[i] for the i-th item
	// claimed. Token, Owner and State are taken from them; fence, times
	// and attempt are set by the script.
	Records []*Record
	TTL     time.Duration
	// MinReplicas > 0 sends WAIT on the same connection after the claim,
	// waiting at most ReplicaTimeout.
	MinReplicas    int
	ReplicaTimeout time.Duration
}

// ClaimPickResult is the outcome of ClaimPick.
type ClaimPickResult struct {
	// Items are the items claimed (ClaimOK), in due order, and items
	// found held by a foreign record (ClaimForeign) or quarantined now
	// (ClaimDamaged), which take no record template.
	Items []ItemClaim
	// Head is the lowest due score left in the shard (ms, Redis clock,
	// clamped to ±MaxDue; in the future when nothing is due), NoDue when
	// the shard holds nothing but quarantined items.
	Head int64
	// Replicas is what WAIT reported, when MinReplicas > 0.
	Replicas int
}

// ClaimPick claims the shard's longest-waiting due items, as many as
// there are Records, found by Redis in the same call: one round trip from
// the due index to the claims, and concurrent picks never collide. The
// ids claimed are also kept under Keys.Receipt(Shard, token) for TTL, for
// a caller whose reply was lost (see ClaimReceipt). It returns
// ErrEpochMissing when Redis lost the shard's data (see MarkEpoch) and a
// *HoldError while the shard is held off.
func (s *Store) ClaimPick(ctx context.Context, p ClaimPickParams) (*ClaimPickResult, error) {
	if len(p.Records) == 0 {
		return nil, fmt.Errorf("store: pick claim of shard %d with no records", p.Shard)
	}
	k := s.keys
	keys := []string{k.Due(p.Shard), k.Meta(p.Shard), k.Epoch(p.Shard), k.Receipt(p.Shard, p.Records[0].Token), k.Errors(p.Shard)}
	args := make([]any, 0, 2+len(p.Records))
	args = append(args, "pick", p.TTL.Milliseconds())
	for _, r := range p.Records {
		args = append(args, MarshalRecord(r))
	}
	reply, replicas, err := s.claim(ctx, scriptClaimPick, p.Shard, keys, args, replicaWait{p.MinReplicas, p.ReplicaTimeout})
	if err != nil {
		return nil, err
	}
	items, head, err := pickResults(reply)
	if err != nil {
		return nil, err
	}
	return &ClaimPickResult{Items: items, Head: head, Replicas: replicas}, nil
}

// ClaimIDsParams are the parameters of ClaimIDs.
type ClaimIDsParams struct {
	Shard int
	IDs   []string
	// Records are the templates written for the items, one per ID or a
	// single one for all (see ClaimPickParams.Records).
	Records []*Record
	TTL     time.Duration
	// MinReplicas and ReplicaTimeout: see ClaimPickParams.
	MinReplicas    int
	ReplicaTimeout time.Duration
}

// ClaimIDsResult is the outcome of ClaimIDs.
type ClaimIDsResult struct {
	// Items are the outcomes in IDs order.
	Items []ItemClaim
	// Replicas is what WAIT reported, when MinReplicas > 0.
	Replicas int
}

// ClaimIDs claims the named items of one shard that are in the due index
// and not quarantined, due or not. It is idempotent for a retried call
// with the same token: an item already claimed with it comes back as
// ClaimOK with its fence, attempt and lastSync, which is how a caller
// whose reply was lost learns them. Errors as ClaimPick.
func (s *Store) ClaimIDs(ctx context.Context, p ClaimIDsParams) (*ClaimIDsResult, error) {
	items, replicas, err := s.claimNamed(ctx, scriptClaimIDs, p.Shard, p.IDs, p.Records,
		[]any{"ids", p.TTL.Milliseconds()}, replicaWait{p.MinReplicas, p.ReplicaTimeout})
	if err != nil {
		return nil, err
	}
	return &ClaimIDsResult{Items: items, Replicas: replicas}, nil
}

// ClaimBatchParams are the parameters of ClaimBatch.
type ClaimBatchParams struct {
	Shard int
	IDs   []string
	// Records: see ClaimIDsParams.Records.
	Records []*Record
	// Since is the batch run's start (ms, Redis clock).
	Since int64
	TTL   time.Duration
	// MinReplicas and ReplicaTimeout: see ClaimPickParams.
	MinReplicas    int
	ReplicaTimeout time.Duration
}

// ClaimBatchResult is the outcome of ClaimBatch.
type ClaimBatchResult struct {
	// Items are the outcomes in IDs order.
	Items []ItemClaim
	// Replicas is what WAIT reported, when MinReplicas > 0.
	Replicas int
}

// ClaimBatch claims, for a batch run, the named items of one shard whose
// lastSync is before Since: at once, unless they are backing off after a
// failure and not due yet; quarantined items never. Idempotent for a
// retried call like ClaimIDs. Errors as ClaimPick.
func (s *Store) ClaimBatch(ctx context.Context, p ClaimBatchParams) (*ClaimBatchResult, error) {
	items, replicas, err := s.claimNamed(ctx, scriptClaimBatch, p.Shard, p.IDs, p.Records,
		[]any{"batch", p.TTL.Milliseconds(), p.Since}, replicaWait{p.MinReplicas, p.ReplicaTimeout})
	if err != nil {
		return nil, err
	}
	return &ClaimBatchResult{Items: items, Replicas: replicas}, nil
}

// claimNamed runs a claim script over named items: KEYS due, meta,
// epoch, err and the items' record keys; ARGV head, then id and record
// template per item. It returns one outcome per id, in order.
func (s *Store) claimNamed(ctx context.Context, sc *redis.Script, shard int, ids []string, recs []*Record,
	head []any, w replicaWait) ([]ItemClaim, int, error) {
	if len(recs) != 1 && len(recs) != len(ids) {
		return nil, 0, fmt.Errorf("store: claim: %d records for %d ids", len(recs), len(ids))
	}
	k := s.keys
	keys := make([]string, 0, 4+len(ids))
	keys = append(keys, k.Due(shard), k.Meta(shard), k.Epoch(shard), k.Errors(shard))
	args := make([]any, 0, len(head)+2*len(ids))
	args = append(args, head...)
	var one []byte
	if len(recs) == 1 {
		one = MarshalRecord(recs[0])
	}
	for i, id := range ids {
		keys = append(keys, k.Record(shard, id))
		rec := one
		if rec == nil {
			rec = MarshalRecord(recs[i])
		}
		args = append(args, id, rec)
	}
	reply, replicas, err := s.claim(ctx, sc, shard, keys, args, w)
	if err != nil {
		return nil, 0, err
	}
	items, err := namedResults(reply, ids)
	return items, replicas, err
}

// replicaWait asks a claim to WAIT for min replicas, at most timeout.
type replicaWait struct {
	min     int
	timeout time.Duration
}

// claim runs one claim script call, followed by WAIT when w asks for
// replicas, and turns the replies that refuse the whole shard into
// errors: ErrEpochMissing and *HoldError (see claim_gate in prelude.lua),
// a *DamageError when a key of the shard is damaged, and a
// *PermissionError when Redis refused a command to syncd's user.
func (s *Store) claim(ctx context.Context, sc *redis.Script, shard int, keys []string, args []any, w replicaWait) (any, int, error) {
	if w.min > 0 && s.mini != nil {
		return nil, 0, ErrNoReplicas
	}
	var reply any
	var replicas int
	var err error
	if w.min > 0 {
		reply, replicas, err = s.claimWait(ctx, sc, keys, args, w)
	} else {
		reply, err = s.runHot(ctx, sc, keys, args...)
	}
	if err != nil {
		if err := s.shardErr(ctx, shard, err); errors.Is(err, ErrDamaged) {
			return nil, 0, err
		}
		return nil, 0, Permission(fmt.Errorf("store: claim shard %d: %w", shard, err))
	}
	if err := gateError(reply, shard); err != nil {
		return nil, 0, err
	}
	return reply, replicas, nil
}

// gateError decodes a claim script's refusal of the whole shard: {-1},
// the epoch marker is missing; {-2, ms}, the shard is held off; {-2, ms,
// 1}, held off after a damaged marker was rewritten. Any other reply is
// the claim's and gives nil (none has 1 to 3 values and a negative
// first one).
func gateError(reply any, shard int) error {
	arr, _ := reply.([]any)
	if len(arr) == 0 || len(arr) > 3 {
		return nil
	}
	if c, ok := arr[0].(int64); !ok || c >= 0 {
		return nil
	}
	v, err := ints(reply, -1)
	switch {
	case err != nil:
		return err
	case len(v) == 1 && v[0] == -1:
		return fmt.Errorf("%w: shard %d", ErrEpochMissing, shard)
	case len(v) >= 2 && v[0] == -2:
		return &HoldError{Shard: shard, For: time.Duration(v[1]) * time.Millisecond, Rewritten: len(v) == 3}
	}
	return nil
}

// namedResults decodes the reply of a claim of named items: 5 integers
// per item, code, fence, attempt, lastSyncMs and previous score.
func namedResults(reply any, ids []string) ([]ItemClaim, error) {
	v, err := ints(reply, -1)
	if err != nil {
		return nil, err
	}
	if len(v) != 5*len(ids) {
		return nil, fmt.Errorf("store: claim replied %d values for %d items", len(v), len(ids))
	}
	out := make([]ItemClaim, len(ids))
	for i, id := range ids {
		r := v[5*i : 5*i+5]
		out[i] = ItemClaim{ID: id, Code: ClaimCode(r[0]), Fence: uint64(r[1]),
			Attempt: int(r[2]), LastSync: fromMs(r[3]), PrevDue: r[4]}
	}
	return out, nil
}

// pickResults decodes a pick claim's reply: id, fence, attempt,
// lastSyncMs, previous score per item claimed; a fence of -1 marks an
// item held by a foreign record, -2 one quarantined now (ClaimDamaged).
// The shard's new head ends it: 1 and the head, or 0, 0 for none.
func pickResults(reply any) ([]ItemClaim, int64, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr)%5 != 2 {
		return nil, 0, fmt.Errorf("store: unexpected pick claim reply %T of %d values", reply, len(arr))
	}
	has, ok1 := arr[len(arr)-2].(int64)
	head, ok2 := arr[len(arr)-1].(int64)
	if !ok1 || !ok2 {
		return nil, 0, fmt.Errorf("store: unexpected pick claim head %T, %T", arr[len(arr)-2], arr[len(arr)-1])
	}
	if has == 0 {
		head = NoDue
	}
	out := make([]ItemClaim, len(arr)/5)
	for i := range out {
		r := arr[5*i : 5*i+5]
		id, ok := r[0].(string)
		if !ok {
			return nil, 0, fmt.Errorf("store: unexpected pick claim id %T", r[0])
		}
		var n [4]int64
		for j := range n {
			if n[j], ok = r[1+j].(int64); !ok {
				return nil, 0, fmt.Errorf("store: unexpected pick claim value %T", r[1+j])
			}
		}
		switch n[0] {
		case -1:
			out[i] = ItemClaim{ID: id, Code: ClaimForeign}
			continue
		case -2:
			out[i] = ItemClaim{ID: id, Code: ClaimDamaged}
			continue
		}
		out[i] = ItemClaim{ID: id, Code: ClaimOK, Fence: uint64(n[0]), Attempt: int(n[1]),
			LastSync: fromMs(n[2]), PrevDue: n[3]}
	}
	return out, head, nil
}

// ClaimReceipt returns the ids a pick claim with token tok took on shard,
// in due order, or none if it took nothing (or its ttl has passed). A
// caller whose claim reply was lost reads it to learn what Redis holds in
// its name.
func (s *Store) ClaimReceipt(ctx context.Context, shard int, tok Token) ([]string, error) {
	v, err := s.rdb.Get(ctx, s.keys.Receipt(shard, tok)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: claim receipt of shard %d: %w", shard, err)
	}
	return strings.Split(v, "\n"), nil
}

// claimWait pipelines the claim with WAIT on one connection of the master
// that serves the shard, so WAIT counts the replicas that have the claim.
func (s *Store) claimWait(ctx context.Context, sc *redis.Script, keys []string, args []any, w replicaWait) (any, int, error) {
	node, err := s.nodeFor(ctx, keys[0])
	if err != nil {
		return nil, 0, err
	}
	var eval *redis.Cmd
	var wait *redis.Cmd
	_, err = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT, and
		// this path waits for replicas anyway.
		eval = sc.Eval(ctx, p, keys, args...)
		wait = p.Do(ctx, "wait", w.min, w.timeout.Milliseconds())
		return nil
	})
	if err := eval.Err(); err != nil {
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, err
	}
	n, err := wait.Int()
	if err != nil {
		return nil, 0, err
	}
	return eval.Val(), n, nil
}

// MarkEpoch sets a shard's data-loss marker after a claim returned
// ErrEpochMissing and returns how long the shard stays held off: one ttl
// from the first call that found the marker missing (the first caller's
// marker wins, see epoch.lua), so an owner that claimed before Redis lost
// its data cannot still hold a lease when the next claim is granted. A
// marker goes missing with Redis's data, and Redis tells nothing of how:
// a restart without persistence, but also a FLUSHALL on a Redis up for
// days, or a new deployment (whose first claims then wait one ttl, once).
// Never more than ttl: a marker already there that is not one syncd
// writes (see epoch.lua) is rewritten to hold the shard off one ttl. The
// embedded store's data never outlives its holders: no hold-off.
func (s *Store) MarkEpoch(ctx context.Context, shard int, ttl time.Duration) (time.Duration, error) {
	key := s.keys.Epoch(shard)
	hold := ttl
	if s.mini != nil {
		hold = 0
	}
	v, err := s.runScript(ctx, s.rdb, scriptEpoch, []string{key}, hold.Milliseconds(), ttl.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("store: mark epoch of shard %d: %w", shard, err)
	}
	left, _ := v.(int64)
	return min(time.Duration(left)*time.Millisecond, ttl), nil
}
