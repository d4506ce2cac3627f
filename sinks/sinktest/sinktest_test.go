package sinktest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/sinks/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is the reference sink: it records what it is given.
type recorder struct {
	mu    sync.Mutex
	items []sinks.Item
}

func (r *recorder) record(_ context.Context, it sinks.Item) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = append(r.items, it)
	return nil
}

func (r *recorder) received() []sinks.Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sinks.Item(nil), r.items...)
}

func TestRunFunc(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T, b sinktest.Behavior) sinktest.Instance {
			switch b {
			case sinktest.Succeed:
				r := new(recorder)
				return sinktest.Instance{Sink: sinks.Func(r.record), Received: r.received}
			case sinktest.Fail:
				return sinktest.Instance{Sink: sinks.Func(func(_ context.Context, it sinks.Item) error {
					return fmt.Errorf("refused %q", it.ID)
				})}
			case sinktest.Block:
				return sinktest.Instance{Sink: sinks.Func(func(ctx context.Context, _ sinks.Item) error {
					<-ctx.Done()
					return context.Cause(ctx)
				})}
			}
			t.Fatalf("unknown behavior %v", b)
			return sinktest.Instance{}
		},
		FailText: "refused",
	})
}

func TestItems(t *testing.T) {
	items := sinktest.Items("p/", 9)
	seen := make(map[string]bool)
	never := 0
	for _, it := range items {
		if seen[it.ID] {
			t.Errorf("duplicate ID %q", it.ID)
		}
		seen[it.ID] = true
		if it.Fence == 0 || it.Owner == "" || it.Attempt < 1 {
			t.Errorf("item %+v has an unset field", it)
		}
		if it.LastSync.IsZero() {
			never++
		} else if it.LastSync.Nanosecond()%1e6 != 0 {
			t.Errorf("item %q: LastSync %v is not whole milliseconds", it.ID, it.LastSync)
		}
	}
	if never == 0 || never == len(items) {
		t.Errorf("%d of %d items never synced, want some", never, len(items))
	}
}

func TestBehaviorString(t *testing.T) {
	for b, want := range map[sinktest.Behavior]string{
		sinktest.Succeed: "succeed", sinktest.Fail: "fail", sinktest.Block: "block", 7: "Behavior(7)",
	} {
		if got := b.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(b), got, want)
		}
	}
}
