package topology

import (
	"context"
	"testing"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// RunBatch must return when it cannot join the batch run: here its
// context is already done, as it would be after a signal; a Redis that
// is unreachable at that moment, or an ACL user without PEXPIRE, does
// the same. It used to hang: begin marked the engine started, and the
// deferred Stop waited for loops that never ran (fixed: Stop waits only
// for loops that were started).
func TestBatchJoinFailureReturns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "hang"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := engine.New(st, sinks.Func(func(context.Context, sinks.Item) error { return nil }), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		_, err := e.RunBatch(ctx, engine.BatchOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("RunBatch with a done context returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunBatch did not return within 5s after failing to join the batch run")
	}
}
