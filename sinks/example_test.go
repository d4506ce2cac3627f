package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/syncd/syncd/sinks"
)

// memStore is a toy target: a map guarded by a FenceGuard, so that a write
// from a superseded claim is rejected instead of overwriting a newer one.
type memStore struct {
	guard sinks.FenceGuard
	mu    sync.Mutex
	data  map[string]string
}

func (s *memStore) Sync(ctx context.Context, item sinks.Item) error {
	// The check and the write run as one step under the guard.
	return s.guard.Do(ctx, item.ID, item.Fence, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.data[item.ID] = item.Owner
		return nil
	})
}

func (s *memStore) Close() error { return nil }

// A sink that checks fences in its own store. Owner w1 held fence 7 and
// lost its lease during a long pause; w2 claimed the item with fence 8 and
// wrote. When w1 wakes up and writes, the store rejects it, and the engine
// drops that attempt without a retry.
func ExampleFenceGuard() {
	var s sinks.Sink = &memStore{data: make(map[string]string)}
	ctx := context.Background()

	fmt.Println(s.Sync(ctx, sinks.Item{ID: "a", Fence: 8, Owner: "w2"}))
	fmt.Println(s.Sync(ctx, sinks.Item{ID: "a", Fence: 8, Owner: "w2"})) // same claim again

	err := s.Sync(ctx, sinks.Item{ID: "a", Fence: 7, Owner: "w1"})
	fmt.Println(errors.Is(err, sinks.ErrStaleFence))
	fmt.Println(err)
	fmt.Println(s.(*memStore).data["a"])
	// Output:
	// <nil>
	// <nil>
	// true
	// sinks: stale fence: item "a": fence 7, already accepted 8
	// w2
}

// The rule is simple enough to apply in a target's own statement. When the
// check and the write are already serialised by the caller, Accept is
// enough.
func ExampleFenceGuard_Accept() {
	var g sinks.FenceGuard
	for _, fence := range []uint64{3, 5, 5, 4, 6} {
		fmt.Println(fence, g.Accept("a", fence) == nil)
	}
	high, _ := g.Highest("a")
	fmt.Println("highest", high)
	// Output:
	// 3 true
	// 5 true
	// 5 true
	// 4 false
	// 6 true
	// highest 6
}
