package store

import (
	"context"
	"strings"
	"time"
)

// PreludeHelpers returns the text of the named prelude helpers, in the
// prelude's order, for tests of the helpers themselves.
func PreludeHelpers(names ...string) string {
	var b strings.Builder
	for _, h := range prelude {
		for _, n := range names {
			if h.name == n {
				b.WriteString(h.text)
			}
		}
	}
	return b.String()
}

// EncodeMeta is encodeMeta, for tests.
var EncodeMeta = encodeMeta

// LockOpForTest is one Lock or Unlock call of a LockOps batch.
type LockOpForTest struct {
	Unlock bool
	Name   string
	Rec    *Record       // Lock
	TTL    time.Duration // Lock
	Token  Token         // Unlock
}

// LockOpResult is one call's result in a LockOps batch.
type LockOpResult struct {
	Lock LockResult
	Code ReleaseCode
	Err  error
}

// LockOps sends ops as one batch, as the coalescer does with concurrent
// Lock and Unlock calls.
func (s *Store) LockOps(ctx context.Context, ops []LockOpForTest) ([]LockOpResult, error) {
	in := make([]lockOp, len(ops))
	for i, op := range ops {
		in[i] = lockOp{unlock: op.Unlock, name: op.Name, tok: op.Token, ttl: op.TTL.Milliseconds()}
		if op.Rec != nil {
			in[i].rec = MarshalRecord(op.Rec)
		}
	}
	res, err := s.lockOps(ctx, in)
	if err != nil {
		return nil, err
	}
	out := make([]LockOpResult, len(res))
	for i, r := range res {
		out[i] = LockOpResult{Lock: r.lock, Code: r.code, Err: r.err}
	}
	return out, nil
}
