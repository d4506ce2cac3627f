package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// A failure whose release is not recorded (the record was gone when the
// sync ended) is neither logged nor counted as quarantined, and the item
// is not quarantined in Redis. Before, engine/worker.go ignored
// `recorded` for failed outcomes (found by an audit).
func TestUnrecordedFailureIsNotQuarantined(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	st.Add(t.Context(), "a")
	var calls atomic.Int32
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		calls.Add(1)
		// Someone force-released the item while it synced: this owner's
		// outcome cannot be recorded.
		st.Client().Del(ctx, st.Keys().Record(0, it.ID))
		return sinks.Permanent(fmt.Errorf("target refused"))
	}}
	e := newEngine(t, st, rec, engine.Config{Workers: 1, MaxAttempts: 1, Interval: time.Hour, Poll: 5 * time.Millisecond})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "an unrecorded failure", func() bool { return e.Metrics().SyncsUnrecorded.Load() >= 1 })
	e.Stop(context.Background())
	if got := e.Metrics().Quarantined.Load(); got != 0 {
		t.Errorf("metrics: %d quarantined, want 0 (the failure was not recorded)", got)
	}
	if score := st.Client().ZScore(t.Context(), st.Keys().Due(0), "a").Val(); math.IsInf(score, 1) {
		t.Errorf("item quarantined in redis after an unrecorded failure")
	}
}

// syncd's own resource errors (no file descriptors left) are not the
// item's fault: the item is handed back, never failed or quarantined, and
// syncs once the resource is back.
func TestResourceErrorNeverQuarantines(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	st.Add(t.Context(), "a")
	var calls atomic.Int32
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		if calls.Add(1) <= 5 {
			return &os.PathError{Op: "fork/exec", Path: "/bin/sync-one", Err: syscall.EMFILE}
		}
		return nil
	}}
	e := newEngine(t, st, rec, engine.Config{Workers: 1, MaxAttempts: 2, Interval: time.Hour,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, Poll: 5 * time.Millisecond})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the item to sync once descriptors are back", func() bool { return e.Metrics().SyncsOK.Load() == 1 })
	e.Stop(context.Background())
	m := e.Metrics()
	if m.Quarantined.Load() != 0 || m.SyncsFailed.Load() != 0 || m.SyncsResource.Load() != 5 {
		t.Errorf("metrics: quarantined %d, failed %d, resource %d; want 0, 0, 5",
			m.Quarantined.Load(), m.SyncsFailed.Load(), m.SyncsResource.Load())
	}
}

// A target that keeps refusing the fence of a claim that is still current
// (its fence came from elsewhere: another deployment, a counter that went
// back) fails the item, with backoff, until quarantine. Before, a stale
// fence handed the item back due at once: an API user's trial saw 777
// syncs of one item in 10 s, its attempts never counted. A stale fence
// whose claim was taken meanwhile (the case the class exists for) is still
// dropped uncounted: its release finds another owner.
func TestStaleFenceOfCurrentClaimQuarantines(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	st.Add(t.Context(), "stale", "taken")
	var stale, taken atomic.Int32
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		switch it.ID {
		case "stale":
			stale.Add(1)
		case "taken":
			// A newer owner took the claim: this one's release is
			// refused, and the attempt is dropped (the item comes back
			// when its lease would have ended, past this test).
			taken.Add(1)
			st.Client().Del(ctx, st.Keys().Record(0, it.ID))
		}
		return fmt.Errorf("target said 409: %w", sinks.ErrStaleFence)
	}}
	e := newEngine(t, st, rec, engine.Config{Workers: 2, MaxAttempts: 3, Interval: time.Hour,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond, Poll: 5 * time.Millisecond})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stale item quarantined and the other dropped", func() bool {
		return e.Metrics().Quarantined.Load() == 1 && taken.Load() == 1
	})
	time.Sleep(200 * time.Millisecond) // a loop would go on meanwhile
	e.Stop(context.Background())
	if n := stale.Load(); n != 3 {
		t.Errorf("the stale item synced %d times, want 3 (max_attempts)", n)
	}
	if score := st.Client().ZScore(t.Context(), st.Keys().Due(0), "stale").Val(); !math.IsInf(score, 1) {
		t.Errorf("the stale item's score is %v, want quarantined (+inf)", score)
	}
	m := e.Metrics()
	if m.StaleFences.Load() != 4 || m.SyncsFailed.Load() != 3 || taken.Load() != 1 {
		t.Errorf("metrics: stale fences %d, failed %d, the taken item synced %d times; want 4 (3 + the dropped one), 3 and 1",
			m.StaleFences.Load(), m.SyncsFailed.Load(), taken.Load())
	}
}

// A batch report's JSON gives its durations in ms, under names that say
// so (sync_p50 was in ns), and reads back as written.
func TestReportJSONDurationsInMS(t *testing.T) {
	rep := engine.Report{Items: 3, Synced: 3, SyncP50: 1500 * time.Microsecond, SyncP99: 2 * time.Second,
		SyncMax: 3 * time.Second, TargetUnavailable: time.Minute, Damaged: []string{"shard 2"}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"sync_p50_ms":1.5`, `"sync_p99_ms":2000`, `"sync_max_ms":3000`, `"target_unavailable_ms":60000`, `"items":3`, `"damaged_shards":["shard 2"]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report JSON %s lacks %s", b, want)
		}
	}
	var back engine.Report
	if err := json.Unmarshal(b, &back); err != nil || back.SyncP50 != rep.SyncP50 || back.TargetUnavailable != rep.TargetUnavailable || back.Items != 3 {
		t.Errorf("read back %+v, %v; want %+v", back, err, rep)
	}
}

// nilErr is the classic slip: a nil *nilErr returned as an error is a
// non-nil error whose Error method dereferences nil.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// A sink that panics, and one that returns a nil pointer as its error,
// each count as a failure of the item, which ends quarantined; the
// daemon goes on. The typed nil used to panic in the engine's own read of
// the error, in a worker, and end the process.
func TestSinkPanicsAndTypedNilErrorsAreFailures(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	st.Add(t.Context(), "panics", "typed-nil", "fine")
	var fine atomic.Int32
	rec := &recorder{do: func(ctx context.Context, it sinks.Item) error {
		switch it.ID {
		case "panics":
			panic("sink bug")
		case "typed-nil":
			var e *nilErr
			return e
		}
		fine.Add(1)
		return nil
	}}
	var logs testutil.Buffer
	e, err := engine.New(st, rec, engine.Config{Workers: 2, MaxAttempts: 2, Interval: time.Hour,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, Poll: 5 * time.Millisecond,
		Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(context.Background())
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "both bad items quarantined", func() bool { return e.Metrics().Quarantined.Load() == 2 })
	e.Stop(context.Background())
	if fine.Load() != 1 {
		t.Errorf("the fine item synced %d times, want 1", fine.Load())
	}
	for _, want := range []string{"sink panicked", "*engine_test.nilErr error that panicked when read"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, logs.String())
		}
	}
}
