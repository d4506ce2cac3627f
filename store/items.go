package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// ExtendCode is the outcome of extending one record.
type ExtendCode int8

// Extend outcomes.
const (
	ExtendOther   ExtendCode = -1 // another owner's record is there
	ExtendMissing ExtendCode = 0  // no record: expired, released or lost
	ExtendOK      ExtendCode = 1
)

// ExtendRequest names one record to extend.
type ExtendRequest struct {
	Key   string // Keys.Record or Keys.Lock
	Token Token
}

// ExtendResult is the outcome for one request.
type ExtendResult struct {
	Code  ExtendCode
	Fence uint64
}

// Extend compares the token of each record and, when it matches, sets its
// heartbeat time and expiry (and state, unless 0). Requests are grouped by
// hash slot, one script call per group, all pipelined in one round trip.
func (s *Store) Extend(ctx context.Context, ttl time.Duration, state State, reqs []ExtendRequest) ([]ExtendResult, error) {
	type group struct {
		keys []string
		args []any
		idx  []int
	}
	groups := map[string]*group{}
	var order []string
	for i, r := range reqs {
		tag := hashTag(r.Key)
		g := groups[tag]
		if g == nil {
			g = &group{args: []any{ttl.Milliseconds(), int(state)}}
			groups[tag] = g
			order = append(order, tag)
		}
		g.keys = append(g.keys, r.Key)
		g.args = append(g.args, string(r.Token[:]))
		g.idx = append(g.idx, i)
	}
	out := make([]ExtendResult, len(reqs))
	run := func(p redis.Pipeliner) []*redis.Cmd {
		cmds := make([]*redis.Cmd, len(order))
		for i, tag := range order {
			g := groups[tag]
			cmds[i] = scriptExtend.EvalSha(ctx, p, g.keys, g.args...)
		}
		return cmds
	}
	var cmds []*redis.Cmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { cmds = run(p); return nil })
	if isNoScript(err) {
		if err := loadScripts(ctx, s.rdb); err != nil {
			return nil, fmt.Errorf("store: extend: %w", err)
		}
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { cmds = run(p); return nil })
	}
	if err != nil {
		return nil, fmt.Errorf("store: extend: %w", err)
	}
	for i, tag := range order {
		g := groups[tag]
		v, err := ints(cmds[i].Val(), 2*len(g.keys))
		if err != nil {
			return nil, err
		}
		for j, at := range g.idx {
			out[at] = ExtendResult{Code: ExtendCode(v[2*j]), Fence: uint64(v[2*j+1])}
		}
	}
	return out, nil
}

// hashTag returns the part of a key that Redis Cluster hashes.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// ReleaseKind says what a release records.
type ReleaseKind string

// Release kinds.
const (
	ReleaseSynced     ReleaseKind = "ok"         // lastSync = now; due again after Delay
	ReleaseFailed     ReleaseKind = "fail"       // attempts + 1; due again after Delay
	ReleaseQuarantine ReleaseKind = "quarantine" // attempts + 1; not claimed until requeued
	ReleaseHandBack   ReleaseKind = "handback"   // nothing recorded; due at DueAt
)

// ReleaseRequest releases one claim.
type ReleaseRequest struct {
	ID    string
	Token Token
	Kind  ReleaseKind
	// Delay is how long until the item is due again (synced, failed).
	Delay time.Duration
	// DueAt is the due time for a hand-back, ms on Redis's clock; 0 = now.
	DueAt int64
	// Error is kept as the item's last error (failed, quarantine).
	Error string
}

// ReleaseCode is the outcome of releasing a claim or a lock.
type ReleaseCode int8

// Release outcomes.
const (
	HeldByOther ReleaseCode = -1 // someone else's claim: nothing was changed
	NotHeld     ReleaseCode = 0  // no claim: it expired or was released
	Released    ReleaseCode = 1
)

func (c ReleaseCode) String() string {
	switch c {
	case HeldByOther:
		return "held by another owner"
	case NotHeld:
		return "not held"
	case Released:
		return "released"
	}
	return "release(" + strconv.Itoa(int(c)) + ")"
}

// ReleaseResult is the outcome for one request.
type ReleaseResult struct {
	Code ReleaseCode
	// At is Redis's time of the release; for a synced item, its lastSync.
	At time.Time
}

// Release compare-and-deletes claims of one shard and records their
// outcome, in one script call.
func (s *Store) Release(ctx context.Context, shard int, reqs []ReleaseRequest) ([]ReleaseResult, error) {
	k := s.keys
	keys := make([]string, 0, 3+len(reqs))
	keys = append(keys, k.Due(shard), k.Meta(shard), k.Errors(shard))
	args := make([]any, 0, 5*len(reqs))
	for _, r := range reqs {
		keys = append(keys, k.Record(shard, r.ID))
		msg := r.Error
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		val := r.Delay.Milliseconds()
		if r.Kind == ReleaseHandBack {
			val = r.DueAt
		}
		args = append(args, r.ID, string(r.Token[:]), string(r.Kind), val, msg)
	}
	reply, err := s.runScript(ctx, s.rdb, scriptRelease, keys, args...)
	if err != nil {
		return nil, fmt.Errorf("store: release shard %d: %w", shard, err)
	}
	v, err := ints(reply, 2*len(reqs))
	if err != nil {
		return nil, err
	}
	out := make([]ReleaseResult, len(reqs))
	for i := range reqs {
		out[i] = ReleaseResult{Code: ReleaseCode(v[2*i]), At: fromMs(v[2*i+1])}
	}
	return out, nil
}

// Due returns up to limit due items of a shard, longest waiting first.
func (s *Store) Due(ctx context.Context, shard, limit int) ([]string, error) {
	v, err := s.runScript(ctx, s.rdb, scriptDue, []string{s.keys.Due(shard)}, limit)
	if err != nil {
		return nil, fmt.Errorf("store: due of shard %d: %w", shard, err)
	}
	arr, _ := v.([]any)
	ids := make([]string, 0, len(arr))
	for _, x := range arr {
		if id, ok := x.(string); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// PendingPage is one page of Pending.
type PendingPage struct {
	IDs         []string // not quarantined, lastSync before the run
	Quarantined int      // quarantined items on this page
	BackingOff  int      // of IDs, those failing and not due yet
	Next        int      // offset of the next page, -1 at the end
}

// Pending returns one page of a shard's items that a batch run started at
// since (ms, Redis clock) still has to sync, walking the due index from
// offset.
func (s *Store) Pending(ctx context.Context, shard int, since int64, offset, count int) (*PendingPage, error) {
	v, err := s.runScript(ctx, s.rdb, scriptPending, []string{s.keys.Due(shard), s.keys.Meta(shard)}, since, offset, count)
	if err != nil {
		return nil, fmt.Errorf("store: pending of shard %d: %w", shard, err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 3 {
		return nil, fmt.Errorf("store: unexpected pending reply %T", v)
	}
	p := &PendingPage{}
	next, _ := arr[0].(int64)
	q, _ := arr[1].(int64)
	b, _ := arr[2].(int64)
	p.Next, p.Quarantined, p.BackingOff = int(next), int(q), int(b)
	for _, x := range arr[3:] {
		if id, ok := x.(string); ok {
			p.IDs = append(p.IDs, id)
		}
	}
	return p, nil
}

// JoinBatch returns the start of the current batch run (ms, Redis clock),
// starting one if there is none, and keeps the run's marker alive for
// keep; call it again within keep while the run goes on.
func (s *Store) JoinBatch(ctx context.Context, keep time.Duration) (int64, error) {
	v, err := s.runScript(ctx, s.rdb, scriptBatch, []string{s.keys.Batch()}, "join", keep.Milliseconds(), "")
	if err != nil {
		return 0, fmt.Errorf("store: join batch run: %w", err)
	}
	since, _ := v.(int64)
	return since, nil
}

// EndBatch ends the batch run that started at since, unless a new run
// has replaced it.
func (s *Store) EndBatch(ctx context.Context, since int64) error {
	_, err := s.runScript(ctx, s.rdb, scriptBatch, []string{s.keys.Batch()}, "end", 0, strconv.FormatInt(since, 10))
	if err != nil {
		return fmt.Errorf("store: end batch run: %w", err)
	}
	return nil
}

// Backlog counts, per shard in one round trip, the items that are due
// now, and returns the total and the oldest due time (ms, Redis clock; 0
// when nothing is due).
func (s *Store) Backlog(ctx context.Context) (due int64, oldest int64, err error) {
	now, err := s.Now(ctx)
	if err != nil {
		return 0, 0, err
	}
	n := s.keys.Shards()
	counts := make([]*redis.IntCmd, n)
	heads := make([]*redis.ZSliceCmd, n)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			max := strconv.FormatInt(now, 10)
			counts[i] = p.ZCount(ctx, s.keys.Due(i), "-inf", max)
			heads[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.Due(i), Start: 0, Stop: 0})
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("store: backlog: %w", err)
	}
	for i := range n {
		due += counts[i].Val()
		if z := heads[i].Val(); len(z) > 0 && z[0].Score <= float64(now) && (oldest == 0 || int64(z[0].Score) < oldest) {
			oldest = int64(z[0].Score)
		}
	}
	return due, oldest, nil
}

// Count returns the number of items in the set and up to max
// quarantined IDs, in one round trip.
func (s *Store) Count(ctx context.Context, max int) (int, []string, error) {
	n := s.keys.Shards()
	cards := make([]*redis.IntCmd, n)
	quar := make([]*redis.StringSliceCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cards[i] = p.ZCard(ctx, s.keys.Due(i))
			quar[i] = p.ZRangeByScore(ctx, s.keys.Due(i), &redis.ZRangeBy{Min: "+inf", Max: "+inf", Count: int64(max)})
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("store: count: %w", err)
	}
	total := 0
	var ids []string
	for i := range n {
		total += int(cards[i].Val())
		for _, id := range quar[i].Val() {
			if len(ids) < max {
				ids = append(ids, id)
			}
		}
	}
	return total, ids, nil
}

// Now returns Redis's clock, in ms: the one clock of the fleet.
func (s *Store) Now(ctx context.Context) (int64, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("store: TIME: %w", err)
	}
	return t.UnixMilli(), nil
}

// Oldest returns the lowest due score of each shard (ms, Redis clock;
// 0 when the shard has nothing claimable), in one round trip.
func (s *Store) Oldest(ctx context.Context) ([]int64, error) {
	n := s.keys.Shards()
	cmds := make([]*redis.ZSliceCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cmds[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.Due(i), Start: 0, Stop: 0})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: oldest: %w", err)
	}
	out := make([]int64, n)
	for i, c := range cmds {
		if z := c.Val(); len(z) > 0 && z[0].Score < 1e300 {
			out[i] = int64(z[0].Score)
		}
	}
	return out, nil
}

// byShard validates ids and groups them by shard.
func (s *Store) byShard(ids []string) (map[int][]any, error) {
	g := map[int][]any{}
	for _, id := range ids {
		if err := ValidateID(id); err != nil {
			return nil, err
		}
		sh := s.keys.Shard(id)
		g[sh] = append(g[sh], id)
	}
	return g, nil
}

// eachShard runs a script over ids grouped by shard and sums the integer
// replies.
func (s *Store) eachShard(ctx context.Context, what string, sc *redis.Script, ids []string, keys func(int) []string) (int, error) {
	g, err := s.byShard(ids)
	if err != nil {
		return 0, err
	}
	total := 0
	for sh, args := range g {
		for len(args) > 0 {
			chunk := args[:min(len(args), 1000)]
			args = args[len(chunk):]
			v, err := s.runScript(ctx, s.rdb, sc, keys(sh), chunk...)
			if err != nil {
				return total, fmt.Errorf("store: %s: %w", what, err)
			}
			n, _ := v.(int64)
			total += int(n)
		}
	}
	return total, nil
}

// Add adds items; each new one is due at once. It returns how many were
// new. Invalid IDs are refused before anything is written.
func (s *Store) Add(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "add", scriptAdd, ids, func(sh int) []string { return []string{s.keys.Due(sh)} })
}

// Remove removes items and returns how many were present.
func (s *Store) Remove(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "remove", scriptRemove, ids, s.stateKeys)
}

// Requeue makes items due now and clears their failures, which brings
// quarantined items back. It returns how many exist.
func (s *Store) Requeue(ctx context.Context, ids ...string) (int, error) {
	return s.eachShard(ctx, "requeue", scriptRequeue, ids, s.stateKeys)
}

func (s *Store) stateKeys(sh int) []string {
	return []string{s.keys.Due(sh), s.keys.Meta(sh), s.keys.Errors(sh)}
}

// ErrUnknownItem reports an ID that is not in the item set.
var ErrUnknownItem = errors.New("store: unknown item")

// ForceRelease deletes an item's claim whoever holds it and raises its
// fence, so the old owner's late writes are rejected by fenced sinks. It
// reports whether a claim was held and the new fence.
func (s *Store) ForceRelease(ctx context.Context, id string) (held bool, fence uint64, err error) {
	if err := ValidateID(id); err != nil {
		return false, 0, err
	}
	sh := s.keys.Shard(id)
	v, err := s.runScript(ctx, s.rdb, scriptForce, []string{s.keys.Due(sh), s.keys.Meta(sh), s.keys.Record(sh, id)}, id)
	if err != nil {
		return false, 0, fmt.Errorf("store: force release %q: %w", id, err)
	}
	r, err := ints(v, 3)
	if err != nil {
		return false, 0, err
	}
	if r[0] == 0 {
		return false, 0, fmt.Errorf("%w: %q", ErrUnknownItem, id)
	}
	return r[1] == 1, uint64(r[2]), nil
}

// LockResult is the outcome of one lock attempt.
type LockResult struct {
	Acquired bool
	Fence    uint64
	// Wait is how long the current holder's lease has left, when not
	// acquired.
	Wait time.Duration
}

// Lock tries once to take a standalone lock.
func (s *Store) Lock(ctx context.Context, name string, rec *Record, ttl time.Duration) (LockResult, error) {
	key := s.keys.Lock(name)
	v, err := s.runScript(ctx, s.rdb, scriptLock, []string{key, key + lockFenceSuffix},
		ttl.Milliseconds(), MarshalRecord(rec))
	if err != nil {
		return LockResult{}, fmt.Errorf("store: lock %q: %w", name, err)
	}
	r, err := ints(v, 2)
	if err != nil {
		return LockResult{}, err
	}
	if r[0] == 1 {
		return LockResult{Acquired: true, Fence: uint64(r[1])}, nil
	}
	return LockResult{Wait: time.Duration(max(r[1], 0)) * time.Millisecond}, nil
}

// Unlock compare-and-deletes a standalone lock.
func (s *Store) Unlock(ctx context.Context, name string, tok Token) (ReleaseCode, error) {
	v, err := s.runScript(ctx, s.rdb, scriptUnlock, []string{s.keys.Lock(name)}, string(tok[:]))
	if err != nil {
		return NotHeld, fmt.Errorf("store: unlock %q: %w", name, err)
	}
	n, _ := v.(int64)
	return ReleaseCode(n), nil
}

// ReadRecord returns the record under key, nil when there is none, or an
// error wrapping ErrBadRecord for bytes that are not a record.
func (s *Store) ReadRecord(ctx context.Context, key string) (*Record, error) {
	b, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", key, err)
	}
	return UnmarshalRecord(b)
}
