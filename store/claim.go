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
// is out of the due range until the record is gone.
type ClaimCode int8

// Claim outcomes.
const (
	ClaimForeign ClaimCode = -2 // held by a record syncd did not write (see below)
	ClaimTaken   ClaimCode = -1 // another owner holds it
	ClaimSkipped ClaimCode = 0  // not due, unknown or quarantined
	ClaimOK      ClaimCode = 1  // claimed (or already ours with this token)
)

// ClaimRequest claims items of one shard.
type ClaimRequest struct {
	Shard int
	IDs   []string
	// Records are the templates written for the items, one per ID or a
	// single one for all: Token, Owner and State are taken from them;
	// fence, times and attempt are set by the script.
	Records []*Record
	TTL     time.Duration
	// OnlyDue claims only items whose due time has come.
	OnlyDue bool
	// Pick claims the shard's longest-waiting due items, as many as
	// there are Records, found by the script itself in the same call (IDs
	// must be empty): one round trip from the due index to the claims,
	// and concurrent picks never collide. Results list the items claimed,
	// in due order, Records[i] written for the i-th of them, and items
	// found held by a foreign record (ClaimForeign), which take no record.
	// The ids claimed are also kept under Keys.Receipt(Shard, token) for
	// TTL, for a caller whose reply was lost (see ClaimReceipt).
	Pick bool
	// Since > 0 selects batch mode: claim items whose lastSync is before
	// Since (ms, Redis clock), at once unless they are backing off after a
	// failure. OnlyDue is then ignored.
	Since int64
	// MinReplicas > 0 sends WAIT on the same connection after the claim.
	MinReplicas    int
	ReplicaTimeout time.Duration
}

// ClaimResult is the outcome for one item, in request order.
type ClaimResult struct {
	ID       string
	Code     ClaimCode
	Fence    uint64
	Attempt  int
	LastSync time.Time
	// PrevDue is the item's due time (ms, Redis clock) before the claim;
	// a hand-back restores it so the item keeps its place in line.
	PrevDue int64
}

// ClaimResponse is the outcome of a ClaimRequest.
type ClaimResponse struct {
	Results []ClaimResult
	// Replicas is what WAIT reported, when MinReplicas > 0.
	Replicas int
	// Head, after a pick claim, is the lowest due score left in the
	// shard (ms, Redis clock; in the future when nothing is due), 0 when
	// the shard holds nothing but quarantined items.
	Head int64
}

// Claim claims the given items of one shard in one script call. It
// returns ErrEpochMissing when Redis lost the shard's data (see
// MarkEpoch) and a *HoldError while the shard is held off.
func (s *Store) Claim(ctx context.Context, req ClaimRequest) (*ClaimResponse, error) {
	if req.MinReplicas > 0 && s.mini != nil {
		return nil, ErrNoReplicas
	}
	k := s.keys
	keys := make([]string, 0, 4+len(req.IDs))
	keys = append(keys, k.Due(req.Shard), k.Meta(req.Shard), k.Epoch(req.Shard))
	var args []any
	if req.Pick {
		if len(req.IDs) > 0 || len(req.Records) == 0 {
			return nil, fmt.Errorf("store: pick claim with %d ids and %d records", len(req.IDs), len(req.Records))
		}
		keys = append(keys, k.Receipt(req.Shard, req.Records[0].Token))
		args = make([]any, 0, 3+len(req.Records))
		args = append(args, req.TTL.Milliseconds(), "pick", 0)
		for _, r := range req.Records {
			args = append(args, MarshalRecord(r))
		}
	} else {
		if len(req.Records) != 1 && len(req.Records) != len(req.IDs) {
			return nil, fmt.Errorf("store: claim: %d records for %d ids", len(req.Records), len(req.IDs))
		}
		args = make([]any, 0, 3+2*len(req.IDs))
		mode := "any"
		switch {
		case req.Since > 0:
			mode = "batch"
		case req.OnlyDue:
			mode = "due"
		}
		args = append(args, req.TTL.Milliseconds(), mode, req.Since)
		var one []byte
		if len(req.Records) == 1 {
			one = MarshalRecord(req.Records[0])
		}
		for i, id := range req.IDs {
			keys = append(keys, k.Record(req.Shard, id))
			rec := one
			if rec == nil {
				rec = MarshalRecord(req.Records[i])
			}
			args = append(args, id, rec)
		}
	}
	resp := &ClaimResponse{}
	var reply any
	var err error
	if req.MinReplicas > 0 {
		reply, resp.Replicas, err = s.claimWait(ctx, keys, args, req)
	} else {
		reply, err = s.runScript(ctx, s.rdb, scriptClaim, keys, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("store: claim shard %d: %w", req.Shard, err)
	}
	arr, _ := reply.([]any)
	if len(arr) > 0 {
		if c, ok := arr[0].(int64); ok && c < 0 {
			v, err := ints(reply, -1)
			switch {
			case err != nil:
				return nil, err
			case len(v) == 1 && v[0] == -1:
				return nil, fmt.Errorf("%w: shard %d", ErrEpochMissing, req.Shard)
			case len(v) == 2 && v[0] == -2:
				return nil, &HoldError{Shard: req.Shard, For: time.Duration(v[1]) * time.Millisecond}
			}
		}
	}
	if req.Pick {
		resp.Results, resp.Head, err = pickResults(reply)
		return resp, err
	}
	v, err := ints(reply, -1)
	if err != nil {
		return nil, err
	}
	if len(v) != 5*len(req.IDs) {
		return nil, fmt.Errorf("store: claim replied %d values for %d items", len(v), len(req.IDs))
	}
	resp.Results = make([]ClaimResult, len(req.IDs))
	for i, id := range req.IDs {
		r := v[5*i : 5*i+5]
		resp.Results[i] = ClaimResult{ID: id, Code: ClaimCode(r[0]), Fence: uint64(r[1]),
			Attempt: int(r[2]), LastSync: fromMs(r[3]), PrevDue: r[4]}
	}
	return resp, nil
}

// pickResults decodes a pick claim's reply: id, fence, attempt,
// lastSyncMs, previous score per item claimed; a fence of -1 marks an
// item held by a foreign record.
func pickResults(reply any) ([]ClaimResult, int64, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr)%5 != 1 {
		return nil, 0, fmt.Errorf("store: unexpected pick claim reply %T of %d values", reply, len(arr))
	}
	head, ok := arr[len(arr)-1].(int64)
	if !ok {
		return nil, 0, fmt.Errorf("store: unexpected pick claim head %T", arr[len(arr)-1])
	}
	out := make([]ClaimResult, len(arr)/5)
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
		if n[0] < 0 {
			out[i] = ClaimResult{ID: id, Code: ClaimForeign}
			continue
		}
		out[i] = ClaimResult{ID: id, Code: ClaimOK, Fence: uint64(n[0]), Attempt: int(n[1]),
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
func (s *Store) claimWait(ctx context.Context, keys []string, args []any, req ClaimRequest) (any, int, error) {
	node, err := s.nodeFor(ctx, keys[0])
	if err != nil {
		return nil, 0, err
	}
	var eval *redis.Cmd
	var wait *redis.Cmd
	_, err = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT, and
		// this path waits for replicas anyway.
		eval = scriptClaim.Eval(ctx, p, keys, args...)
		wait = p.Do(ctx, "wait", req.MinReplicas, req.ReplicaTimeout.Milliseconds())
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

// MarkEpoch sets a shard's data-loss marker after Claim returned
// ErrEpochMissing and returns how long the shard stays held off: the part
// of ttl that the serving Redis has not been up for. An owner that claimed
// before Redis lost its data cannot hold a lease past that. A new
// deployment on a Redis that has run longer than ttl is not held off.
func (s *Store) MarkEpoch(ctx context.Context, shard int, ttl time.Duration) (time.Duration, error) {
	key := s.keys.Epoch(shard)
	hold := time.Duration(0)
	if s.mini == nil {
		node, err := s.nodeFor(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("store: mark epoch of shard %d: %w", shard, err)
		}
		text, err := node.Info(ctx, "server").Result()
		if err != nil {
			return 0, fmt.Errorf("store: mark epoch of shard %d: %w", shard, err)
		}
		// uptime_in_seconds is floor(now) - floor(start): it can read
		// 1 s a few milliseconds after the start. Take a second off, so
		// the hold errs long, never short (found by tests/fault).
		up := max(time.Duration(parseInfo(text).UptimeSeconds)*time.Second-time.Second, 0)
		if up < ttl {
			hold = ttl - up
		}
	}
	v, err := s.runScript(ctx, s.rdb, scriptEpoch, []string{key}, hold.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("store: mark epoch of shard %d: %w", shard, err)
	}
	left, _ := v.(int64)
	return time.Duration(left) * time.Millisecond, nil
}
