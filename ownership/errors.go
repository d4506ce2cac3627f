package ownership

import (
	"errors"
	"fmt"
)

// ErrLeaseLost is the cause a lease's context is cancelled with when
// ownership can no longer be trusted. The cause is a *LeaseLostError that
// says why; match it with errors.Is(context.Cause(ctx), ErrLeaseLost).
var ErrLeaseLost = errors.New("ownership: lease lost")

// ErrReleased is the cause of a lease's context after a release.
var ErrReleased = errors.New("ownership: lease released")

// ErrNotObtained reports that a lock is held by another owner.
var ErrNotObtained = errors.New("ownership: lock not obtained")

// ErrClosed reports use of a closed Manager or Locker.
var ErrClosed = errors.New("ownership: closed")

// ErrReplicas reports a claim that too few replicas acknowledged in time;
// it was handed back.
var ErrReplicas = errors.New("ownership: too few replicas acknowledged the claim")

// Reason says why a lease was lost.
type Reason string

// Reasons for losing a lease.
const (
	// ReasonTaken: another owner's record is under the key.
	ReasonTaken Reason = "taken by another owner"
	// ReasonDeleted: the record is gone (expired, released by an admin,
	// or lost by Redis).
	ReasonDeleted Reason = "deleted"
	// ReasonExpired: the local trust window closed before a heartbeat
	// renewed it (for example the process was paused).
	ReasonExpired Reason = "trust window expired"
	// ReasonUnreachable: the trust window closed while heartbeats failed
	// to reach Redis.
	ReasonUnreachable Reason = "redis unreachable"
	// ReasonClosed: the Manager or Locker was closed.
	ReasonClosed Reason = "closed"
)

// LeaseLostError is the cause of a lost lease.
type LeaseLostError struct {
	ID     string // item ID or lock name
	Fence  uint64
	Reason Reason
	Err    error // the last Redis error, for ReasonUnreachable
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("ownership: lease on %q (fence %d) lost: %s", e.ID, e.Fence, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Unwrap returns the Redis error, if any.
func (e *LeaseLostError) Unwrap() error { return e.Err }

// ErrNotHeld reports a call on a lock that is not held: a nil *Lock (from
// a failed TryLock or Lock), one already unlocked, or one that was lost.
var ErrNotHeld = errors.New("ownership: lock not held")
