package sinks

import (
	"context"
	"errors"
	"time"
)

// ErrLeaseEnded reports that a sink stopped its work because the lease's
// end (LeaseExpiry) passed, as the exec sink's supervisor does by itself.
// The engine hands such an item back, not counted against it, as it does
// when it saw the lease end itself: the item did not fail, its time ran
// out. Its lease may still be held all the same, when a heartbeat moved
// the end on too late to reach the work.
var ErrLeaseEnded = errors.New("sinks: the lease ended")

// leaseKey is the context key of WithLeaseExpiry.
type leaseKey struct{}

// WithLeaseExpiry returns ctx carrying expiry, which reports when the
// lease a sync runs under stops being trusted, as of its last heartbeat:
// it moves on with each heartbeat. The engine passes it in Sync's context.
//
// The context itself is cancelled at that moment, which is enough for
// work done in syncd's process. A sink that hands the work to another
// process (the exec sink's command) also passes the expiry on, so that
// the work stops there at the lease's end even when syncd cannot say so:
// a syncd paused (SIGSTOP, a stalled VM, swapped out) cancels nothing
// until it resumes, after the next owner may have started.
func WithLeaseExpiry(ctx context.Context, expiry func() time.Time) context.Context {
	return context.WithValue(ctx, leaseKey{}, expiry)
}

// LeaseExpiry returns the expiry function WithLeaseExpiry put in ctx, or
// nil when there is none (a Sync called by other code than the engine).
func LeaseExpiry(ctx context.Context) func() time.Time {
	f, _ := ctx.Value(leaseKey{}).(func() time.Time)
	return f
}
