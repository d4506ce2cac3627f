package ownership

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/syncd/syncd/store"
)

// fakeStore is an in-memory Store with the scripts' semantics, for
// timing tests inside testing/synctest bubbles (where time is fake and
// only advances when every goroutine is blocked). Real-Redis behaviour is
// covered by the tests in redis_test.go.
type fakeStore struct {
	mu     sync.Mutex
	keys   store.Keys
	recs   map[string]fakeRec
	fences map[string]uint64
	items  map[string]bool
	rcpts  map[store.Token][]string // pick claims' receipts
	kinds  []store.ReleaseKind      // kinds received by Release
}

type fakeRec struct {
	tok     store.Token
	fence   uint64
	expires time.Time
}

func newFakeStore() *fakeStore {
	return &fakeStore{keys: store.NewKeys("fake", 1), recs: map[string]fakeRec{}, fences: map[string]uint64{}, items: map[string]bool{}, rcpts: map[store.Token][]string{}}
}

// view is one process's connection to the shared fake, with its own
// faults.
type view struct {
	*fakeStore
	mu           sync.Mutex
	extendErr    error         // Extend fails with it
	extendDelay  time.Duration // Extend applies at once, replies late
	blockExtend  bool          // Extend hangs until its context ends
	beforeExtend func()        // Extend calls it before it applies; may be nil
	releaseDelay time.Duration // Release applies at once, replies late
	loseClaims   int           // the next n Claims apply, then lose their reply
	holdOff      time.Duration // the next claim finds the shard held off for this long
	claimCalls   int
	extendCalls  []time.Time
}

func (f *fakeStore) view() *view { return &view{fakeStore: f} }

func (f *fakeStore) add(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.items[id] = true
	}
}

func (f *fakeStore) live(key string) (fakeRec, bool) {
	r, ok := f.recs[key]
	if ok && !time.Now().Before(r.expires) {
		delete(f.recs, key)
		return r, false
	}
	return r, ok
}

func (f *fakeStore) Keys() store.Keys { return f.keys }

func (v *view) ClaimPick(ctx context.Context, p store.ClaimPickParams) (*store.ClaimPickResult, error) {
	v.fakeStore.mu.Lock()
	tok := p.Records[0].Token
	// The fake's due order is id order; items held are skipped.
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(v.items)) {
		if _, held := v.live(v.keys.Record(p.Shard, id)); !held && len(ids) < len(p.Records) {
			ids = append(ids, id)
		}
	}
	v.rcpts[tok] = ids
	items := v.claimLocked(p.Shard, ids, tok, p.TTL)
	v.fakeStore.mu.Unlock()
	if v.loseReply() {
		return nil, context.DeadlineExceeded
	}
	return &store.ClaimPickResult{Items: items}, nil
}

func (v *view) ClaimIDs(ctx context.Context, p store.ClaimIDsParams) (*store.ClaimIDsResult, error) {
	if err := v.held(p.Shard); err != nil {
		return nil, err
	}
	v.fakeStore.mu.Lock()
	items := v.claimLocked(p.Shard, p.IDs, p.Records[0].Token, p.TTL)
	v.fakeStore.mu.Unlock()
	if v.loseReply() {
		return nil, context.DeadlineExceeded
	}
	return &store.ClaimIDsResult{Items: items}, nil
}

// ClaimBatch is not modelled: the fake keeps no lastSync.
func (v *view) ClaimBatch(context.Context, store.ClaimBatchParams) (*store.ClaimBatchResult, error) {
	return nil, errors.New("fake: batch claims are not modelled")
}

// claimLocked claims ids as the scripts do: a fresh fence for a free item,
// the claim again for one already ours with this token.
func (v *view) claimLocked(shard int, ids []string, tok store.Token, ttl time.Duration) []store.ItemClaim {
	var out []store.ItemClaim
	for _, id := range ids {
		r := store.ItemClaim{ID: id}
		key := v.keys.Record(shard, id)
		if !v.items[id] {
			out = append(out, r)
			continue
		}
		if cur, ok := v.live(key); ok {
			if cur.tok == tok {
				r.Code, r.Fence, r.Attempt = store.ClaimOK, cur.fence, 1
			} else {
				r.Code = store.ClaimTaken
			}
		} else {
			v.fences[id]++
			v.recs[key] = fakeRec{tok: tok, fence: v.fences[id], expires: time.Now().Add(ttl)}
			r.Code, r.Fence, r.Attempt = store.ClaimOK, v.fences[id], 1
		}
		out = append(out, r)
	}
	return out
}

// held counts a claim call and returns the hold-off it was told to
// report, once.
func (v *view) held(shard int) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.claimCalls++
	if d := v.holdOff; d > 0 {
		v.holdOff = 0
		return &store.HoldError{Shard: shard, For: d}
	}
	return nil
}

// loseReply reports whether this claim's reply is lost (see loseClaims).
func (v *view) loseReply() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	lose := v.loseClaims > 0
	if lose {
		v.loseClaims--
	}
	return lose
}

func (v *view) ClaimReceipt(_ context.Context, _ int, tok store.Token) ([]string, error) {
	v.fakeStore.mu.Lock()
	defer v.fakeStore.mu.Unlock()
	return v.rcpts[tok], nil
}

func (v *view) MarkEpoch(context.Context, int, time.Duration) (time.Duration, error) { return 0, nil }
func (v *view) DeploymentAge() time.Duration                                         { return math.MaxInt64 }

func (v *view) Extend(ctx context.Context, ttl time.Duration, state store.State, reqs []store.ExtendRequest) ([]store.ExtendResult, error) {
	v.mu.Lock()
	v.extendCalls = append(v.extendCalls, time.Now())
	err, delay, block, before := v.extendErr, v.extendDelay, v.blockExtend, v.beforeExtend
	v.mu.Unlock()
	if before != nil {
		before()
	}
	if err != nil {
		return nil, err
	}
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	v.fakeStore.mu.Lock()
	out := make([]store.ExtendResult, len(reqs))
	for i, r := range reqs {
		cur, ok := v.live(r.Key)
		switch {
		case !ok:
			out[i].Code = store.ExtendMissing
		case cur.tok != r.Token:
			out[i].Code = store.ExtendOther
		default:
			cur.expires = time.Now().Add(ttl)
			v.recs[r.Key] = cur
			out[i] = store.ExtendResult{Code: store.ExtendOK, Fence: cur.fence}
		}
	}
	v.fakeStore.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func (v *view) Release(ctx context.Context, shard int, reqs []store.ReleaseRequest) ([]store.ReleaseResult, error) {
	v.mu.Lock()
	delay := v.releaseDelay
	v.mu.Unlock()
	out, err := v.release(shard, reqs)
	if delay > 0 {
		time.Sleep(delay)
	}
	return out, err
}

func (v *view) release(shard int, reqs []store.ReleaseRequest) ([]store.ReleaseResult, error) {
	v.fakeStore.mu.Lock()
	defer v.fakeStore.mu.Unlock()
	out := make([]store.ReleaseResult, len(reqs))
	for i, r := range reqs {
		v.kinds = append(v.kinds, r.Kind)
		key := v.keys.Record(shard, r.ID)
		cur, ok := v.live(key)
		switch {
		case !ok:
			out[i].Code = store.NotHeld
		case cur.tok != r.Token:
			out[i].Code = store.HeldByOther
		default:
			delete(v.recs, key)
			out[i].Code = store.Released
		}
		out[i].At = time.Now()
	}
	return out, nil
}

func (v *view) Lock(ctx context.Context, name string, rec *store.Record, ttl time.Duration) (store.LockResult, error) {
	v.mu.Lock()
	err := v.extendErr
	v.mu.Unlock()
	if err != nil {
		return store.LockResult{}, err
	}
	v.fakeStore.mu.Lock()
	defer v.fakeStore.mu.Unlock()
	key := v.keys.Lock(name)
	if cur, ok := v.live(key); ok {
		if cur.tok == rec.Token {
			return store.LockResult{Acquired: true, Fence: cur.fence}, nil
		}
		return store.LockResult{Wait: time.Until(cur.expires)}, nil
	}
	v.fences[key]++
	v.recs[key] = fakeRec{tok: rec.Token, fence: v.fences[key], expires: time.Now().Add(ttl)}
	return store.LockResult{Acquired: true, Fence: v.fences[key]}, nil
}

func (v *view) Unlock(ctx context.Context, name string, tok store.Token) (store.ReleaseCode, error) {
	v.mu.Lock()
	err := v.extendErr
	v.mu.Unlock()
	if err != nil {
		return store.NotHeld, err
	}
	v.fakeStore.mu.Lock()
	defer v.fakeStore.mu.Unlock()
	key := v.keys.Lock(name)
	cur, ok := v.live(key)
	switch {
	case !ok:
		return store.NotHeld, nil
	case cur.tok != tok:
		return store.HeldByOther, nil
	}
	delete(v.recs, key)
	return store.Released, nil
}

// steal replaces an item's record with another owner's.
func (f *fakeStore) steal(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := f.keys.Record(0, id)
	r := f.recs[key]
	r.tok = store.NewToken()
	f.recs[key] = r
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (v *view) calls() []time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]time.Time(nil), v.extendCalls...)
}

func (f *fakeStore) releaseKinds() []store.ReleaseKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.ReleaseKind(nil), f.kinds...)
}
