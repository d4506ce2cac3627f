package sinks

import (
	"errors"
	"fmt"
	"time"
)

// UnavailableError marks a failure of the target, not of the item: the
// target is down, overloaded or asks to be left alone for a while. The
// engine does not count it against the item; it opens the target's
// breaker instead (see package engine), so that no item is quarantined
// because the target was away.
type UnavailableError struct {
	Err error
	// RetryAfter is how long the target asked to be left alone (an HTTP
	// Retry-After, say); 0 when it did not say.
	RetryAfter time.Duration
}

func (e *UnavailableError) Error() string {
	if e.RetryAfter > 0 {
		return "target unavailable (retry after " + e.RetryAfter.String() + "): " + e.Err.Error()
	}
	return "target unavailable: " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable wraps err to say that the target, not the item, failed.
// Unavailable(nil) is nil.
func Unavailable(err error) error { return RetryAfter(err, 0) }

// RetryAfter wraps err to say that the target failed and asked not to be
// called again for d (d <= 0: it did not say). RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err, RetryAfter: max(d, 0)}
}

// Class is what a sync's error says about whose fault it was.
type Class int

const (
	// ClassNone: the sync succeeded (a nil error).
	ClassNone Class = iota
	// ClassItem is an error the sink did not classify: retried with
	// backoff and quarantined after max_attempts, unless failures across
	// several items show the target is what is down.
	ClassItem
	// ClassTarget: the target failed (UnavailableError). Not counted
	// against the item.
	ClassTarget
	// ClassPermanent: retrying cannot help (PermanentError); the item is
	// quarantined, not retried with backoff. With the breaker on, that
	// is when the item failed before and, since, another item succeeded
	// or none failed; until then it counts as a ClassItem failure, for
	// distinct items failing permanently with no success between them
	// are the target failing (an expired token's 401, a wrong path's
	// 404): they open the breaker, and none is quarantined.
	ClassPermanent
	// ClassStale: the target rejected the fence (ErrStaleFence); the
	// attempt is dropped, or counted as the item's failure when its claim
	// was still current (see ErrStaleFence).
	ClassStale
)

var classNames = [...]string{"none", "item", "target", "permanent", "stale"}

func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return "unknown"
	}
	return classNames[c]
}

// Classify returns err's class and, for a target failure, how long the
// target asked to be left alone. A stale fence wins over the others, a
// target failure over a permanent one.
func Classify(err error) (Class, time.Duration) {
	var u *UnavailableError
	switch {
	case err == nil:
		return ClassNone, 0
	case errors.Is(err, ErrStaleFence):
		return ClassStale, 0
	case errors.As(err, &u):
		return ClassTarget, u.RetryAfter
	case IsPermanent(err):
		return ClassPermanent, 0
	}
	return ClassItem, 0
}

// ParseClass reads a class name as String writes it: item, target
// (also: unavailable), permanent or stale.
func ParseClass(s string) (Class, error) {
	switch s {
	case "item":
		return ClassItem, nil
	case "target", "unavailable":
		return ClassTarget, nil
	case "permanent":
		return ClassPermanent, nil
	case "stale":
		return ClassStale, nil
	}
	return ClassNone, fmt.Errorf("%q is not a failure class: want item, target (or unavailable), permanent or stale", s)
}
