// Package sinktest is the conformance suite for implementations of
// [sinks.Sink]. Every sink, built-in or not, should pass it:
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, sinktest.Harness{
//			New: func(t *testing.T, b sinktest.Behavior) sinktest.Instance {
//				switch b {
//				case sinktest.Succeed: ...
//				case sinktest.Fail: ...
//				case sinktest.Block: ...
//				}
//			},
//		})
//	}
//
// The suite checks what the engine relies on: success is nil, failure is a
// non-nil error with a message, a context cancelled with a cause stops a
// sync promptly, concurrent Syncs are safe (run it with -race), Close works
// after use, and, when the harness can observe the sink's target, every
// field of every item arrives intact.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/syncd/syncd/sinks"
)

// CancelBound is how long a Sync may take to return after its context is
// cancelled.
const CancelBound = 5 * time.Second

// Concurrency is the shape of the concurrency check: Goroutines goroutines,
// each syncing ItemsPerGoroutine distinct items.
const (
	Goroutines        = 32
	ItemsPerGoroutine = 4
)

// Behavior is what a sink under test is configured to do.
type Behavior int

const (
	// Succeed: every Sync does its work and returns nil.
	Succeed Behavior = iota
	// Fail: every Sync returns an error, as the sink would when its target
	// fails (a non-zero exit, a 500, an inner error).
	Fail
	// Block: every Sync does slow work that lasts until its context is done
	// (at least a minute otherwise), such as a command that sleeps or a
	// server that never answers.
	Block
)

func (b Behavior) String() string {
	switch b {
	case Succeed:
		return "succeed"
	case Fail:
		return "fail"
	case Block:
		return "block"
	}
	return fmt.Sprintf("Behavior(%d)", int(b))
}

// Instance is one sink under test, built by [Harness.New].
type Instance struct {
	// Sink is the sink under test. Run closes it and checks that Close
	// returns nil.
	Sink sinks.Sink

	// Received, if not nil, returns every item that reached the sink's
	// target so far, as the target saw it, in any order. Run calls it only
	// after the Syncs it checks have returned, and only on instances built
	// to Succeed. It may call t.Fatal on the test that built the instance.
	//
	// Leave it nil when the target cannot be observed; Run then checks
	// only the returned errors.
	Received func() []sinks.Item
}

// Harness tells Run how to build the sink under test.
type Harness struct {
	// New builds a sink under test that behaves as b, on a target of its
	// own (a temporary file, a test server). Run calls it once per check,
	// with that check's t. Resources other than the sink belong to the
	// harness: release them with t.Cleanup.
	New func(t *testing.T, b Behavior) Instance

	// Unobserved names fields of sinks.Item, such as "LastSync", that the
	// target never sees, so that Received cannot report them. Run does not
	// compare them.
	//
	// Run sends LastSync values in whole milliseconds, in UTC, so that
	// targets that carry it with millisecond precision compare equal; the
	// comparison uses time.Time.Equal.
	Unobserved []string

	// FailText, if not empty, must occur in the error of a sink built to
	// Fail: a way to check the error is useful, e.g. that it carries the
	// exit status or the response body.
	FailText string
}

// Run runs the conformance suite against the sinks h builds, each check in a
// subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("sinktest: Harness.New is nil")
	}
	t.Run("Succeed", func(t *testing.T) { testSucceed(t, h) })
	t.Run("Fail", func(t *testing.T) { testFail(t, h) })
	t.Run("CancelWithCause", func(t *testing.T) { testCancel(t, h) })
	t.Run("CancelledBeforeSync", func(t *testing.T) { testCancelledBefore(t, h) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("CloseUnused", func(t *testing.T) { testCloseUnused(t, h) })
}

// Items returns n distinct items whose fields are all set, except that every
// third one has never synced (a zero LastSync). IDs contain a space, a slash
// and a non-ASCII letter, which a sink must pass on unchanged. prefix keeps
// the IDs of different callers apart.
func Items(prefix string, n int) []sinks.Item {
	base := time.Date(2024, 2, 29, 23, 59, 58, 0, time.UTC)
	items := make([]sinks.Item, n)
	for i := range items {
		it := sinks.Item{
			ID:      fmt.Sprintf("%sitem/ü %d", prefix, i),
			Fence:   uint64(1<<40) + uint64(i)*3 + 1,
			Owner:   fmt.Sprintf("host-%d/4242/run/w%d", i%3, i),
			Attempt: 1 + i%4,
		}
		if i%3 != 0 {
			it.LastSync = base.Add(time.Duration(i)*time.Hour + time.Duration(i*7)*time.Millisecond)
		}
		items[i] = it
	}
	return items
}

func build(t *testing.T, h Harness, b Behavior) Instance {
	t.Helper()
	in := h.New(t, b)
	if in.Sink == nil {
		t.Fatalf("Harness.New(%v) returned a nil Sink", b)
	}
	return in
}

func closeSink(t *testing.T, s sinks.Sink) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
}

func testSucceed(t *testing.T, h Harness) {
	in := build(t, h, Succeed)
	items := Items("", 6)
	for _, it := range items {
		if err := in.Sink.Sync(t.Context(), it); err != nil {
			t.Fatalf("Sync(%q) = %v, want nil", it.ID, err)
		}
	}
	checkReceived(t, h, in, items)
	closeSink(t, in.Sink)
}

func testFail(t *testing.T, h Harness) {
	in := build(t, h, Fail)
	for _, it := range Items("", 2) {
		err := in.Sink.Sync(t.Context(), it)
		if err == nil {
			t.Fatalf("Sync(%q) = nil, want an error", it.ID)
		}
		msg := err.Error()
		t.Logf("Sync(%q) = %v", it.ID, msg)
		if strings.TrimSpace(msg) == "" {
			t.Errorf("Sync(%q) returned an error with an empty message", it.ID)
		}
		if h.FailText != "" && !strings.Contains(msg, h.FailText) {
			t.Errorf("Sync(%q) = %q, want it to contain %q", it.ID, msg, h.FailText)
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Sync(%q) = %v: a failure with a live context must not look like a cancellation", it.ID, err)
		}
	}
	closeSink(t, in.Sink)
}

// errLeaseLost stands in for ownership.ErrLeaseLost, which sinks must not
// import.
var errLeaseLost = errors.New("sinktest: lease lost")

// syncCancelled runs Sync on a Block sink and cancels its context with a
// cause after delay, and fails t unless Sync returns an error within
// CancelBound of the cancellation.
func syncCancelled(t *testing.T, s sinks.Sink, it sinks.Item, delay time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	cause := fmt.Errorf("%w (test)", errLeaseLost)

	done := make(chan error, 1)
	go func() { done <- s.Sync(ctx, it) }()

	var cancelled time.Time
	if delay > 0 {
		// The suite cannot see when a sink's slow work has started; it
		// waits a little so the cancellation most likely lands mid-work.
		select {
		case err := <-done:
			t.Fatalf("Sync of a blocking sink returned %v before its context was cancelled", err)
		case <-time.After(delay):
		}
	}
	cancelled = time.Now()
	cancel(cause)

	select {
	case err := <-done:
		took := time.Since(cancelled)
		if err == nil {
			t.Fatalf("Sync after cancel = nil, want an error")
		}
		t.Logf("Sync returned %v after cancel: %v (wraps cause: %v)", took.Round(time.Millisecond), err, errors.Is(err, errLeaseLost))
	case <-time.After(CancelBound):
		t.Fatalf("Sync did not return within %v of its context being cancelled", CancelBound)
	}
}

func testCancel(t *testing.T, h Harness) {
	in := build(t, h, Block)
	it := Items("", 1)[0]
	syncCancelled(t, in.Sink, it, 100*time.Millisecond)
	// The sink still works after a cancelled Sync, and closes.
	it.ID += " again"
	syncCancelled(t, in.Sink, it, 100*time.Millisecond)
	closeSink(t, in.Sink)
}

func testCancelledBefore(t *testing.T, h Harness) {
	in := build(t, h, Block)
	syncCancelled(t, in.Sink, Items("", 1)[0], 0)
	closeSink(t, in.Sink)
}

func testConcurrent(t *testing.T, h Harness) {
	in := build(t, h, Succeed)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all []sinks.Item
	)
	for g := range Goroutines {
		items := Items(fmt.Sprintf("g%d/", g), ItemsPerGoroutine)
		mu.Lock()
		all = append(all, items...)
		mu.Unlock()
		wg.Go(func() {
			for _, it := range items {
				if err := in.Sink.Sync(t.Context(), it); err != nil {
					t.Errorf("Sync(%q) = %v, want nil", it.ID, err)
				}
			}
		})
	}
	wg.Wait()
	if !t.Failed() {
		checkReceived(t, h, in, all)
	}
	closeSink(t, in.Sink)
}

func testCloseUnused(t *testing.T, h Harness) {
	for _, b := range []Behavior{Succeed, Fail, Block} {
		closeSink(t, build(t, h, b).Sink)
	}
}

func checkReceived(t *testing.T, h Harness, in Instance, sent []sinks.Item) {
	t.Helper()
	if in.Received == nil {
		return
	}
	got := in.Received()
	byID := func(a, b sinks.Item) int { return strings.Compare(a.ID, b.ID) }
	got = slices.Clone(got)
	want := slices.Clone(sent)
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	opts := []cmp.Option{cmpopts.EquateEmpty()}
	if len(h.Unobserved) > 0 {
		opts = append(opts, cmpopts.IgnoreFields(sinks.Item{}, h.Unobserved...))
	}
	if diff := cmp.Diff(got, want, opts...); diff != "" {
		t.Errorf("items received by the target (-got +want):\n%s", diff)
	}
}
