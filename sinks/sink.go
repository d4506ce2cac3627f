package sinks

import (
	"context"
	"errors"
	"time"
)

// Item is what the engine hands a sink for one sync of one item.
type Item struct {
	// ID is the item's identifier, exactly as it was added.
	ID string
	// Fence is the fencing token of the claim this sync runs under. Fences
	// of one item rise strictly from claim to claim. A sink that stores
	// the highest fence it accepted and rejects lower ones (see FenceGuard)
	// never accepts a write from an owner that lost its claim.
	Fence uint64
	// Owner names the claim's holder ("host/pid/run/w3"). The number is
	// a claim slot, not a worker's index: with claim-ahead (on by
	// default) slots run from 0 to workers + claim_ahead - 1, and a
	// claim keeps its slot's number from claim to release.
	Owner string
	// Attempt counts consecutive attempts, starting at 1; it is above 1
	// only when earlier attempts failed.
	Attempt int
	// LastSync is when the item last synced successfully, from Redis's
	// clock; the zero Time when it never has. Use it for incremental sync.
	LastSync time.Time
}

// Sink does the work of syncing one item. It is the one plug-in contract
// of syncd.
//
// Sync is called with the lease's context: when ownership of the item can
// no longer be trusted the context is cancelled with a cause wrapping
// ownership.ErrLeaseLost, and Sync must stop promptly and return. The engine
// calls Sync from many goroutines at once, so implementations must be safe
// for concurrent use.
//
// Retries: a non-nil error counts as a failed attempt; the engine retries
// the item later with backoff and quarantines it after max_attempts. Wrap
// the error with Permanent to quarantine at once, with Unavailable or
// RetryAfter when the target rather than the item failed (the attempt is
// not counted and the target's breaker opens), or return an error
// wrapping ErrStaleFence when the target rejected the fence: that attempt
// is dropped without a retry when a newer claim took the item, and counted
// as the item's failure when the claim was still current (see
// ClassStale). Because a sync may be cut off at any moment
// (a crash, a lost lease), the same item can be synced again with the same
// data: Sync must be idempotent.
type Sink interface {
	Sync(ctx context.Context, item Item) error
	// Close releases the sink's resources; whoever made the sink calls
	// it after the last Sync returned (see the package doc).
	Close() error
}

// ErrStaleFence reports that a target rejected a write because it had
// already accepted one with a higher fence: the claim this sync ran under
// is stale. The engine does not retry such an attempt; but when its claim
// turns out to be still current, the target's fence came from elsewhere
// (another deployment writing the same target, say), and the engine
// counts the attempt as the item's failure: backed off, and quarantined
// after max_attempts, instead of retried at once for ever.
var ErrStaleFence = errors.New("sinks: stale fence")

// PermanentError marks an error that retrying cannot fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the engine quarantines the item instead of
// retrying it with backoff: at its second attempt, once the target is
// seen to work (see ClassPermanent). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is, or wraps, a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// Func adapts a function to a Sink whose Close does nothing.
type Func func(ctx context.Context, item Item) error

// Sync calls f.
func (f Func) Sync(ctx context.Context, item Item) error { return f(ctx, item) }

// Close does nothing.
func (Func) Close() error { return nil }
