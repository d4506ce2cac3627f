package sinks_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/syncd/syncd/sinks"
)

func TestFenceGuardAccept(t *testing.T) {
	type step struct {
		id    string
		fence uint64
		stale bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first fence zero", []step{{"a", 0, false}, {"a", 0, false}, {"a", 1, false}, {"a", 0, true}}},
		{"rising", []step{{"a", 1, false}, {"a", 2, false}, {"a", 10, false}}},
		{"equal is same claim", []step{{"a", 4, false}, {"a", 4, false}}},
		{"lower is stale", []step{{"a", 4, false}, {"a", 3, true}, {"a", 4, false}}},
		{"stale records nothing", []step{{"a", 4, false}, {"a", 1, true}, {"a", 2, true}}},
		{"ids independent", []step{{"a", 9, false}, {"b", 1, false}, {"a", 1, true}, {"b", 1, false}}},
		{"max uint64", []step{{"a", ^uint64(0), false}, {"a", ^uint64(0) - 1, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g sinks.FenceGuard
			for i, s := range tt.steps {
				err := g.Accept(s.id, s.fence)
				if got := errors.Is(err, sinks.ErrStaleFence); got != s.stale {
					t.Fatalf("step %d: Accept(%q, %d) = %v, want stale %v", i, s.id, s.fence, err, s.stale)
				}
				if err != nil && !s.stale {
					t.Fatalf("step %d: Accept(%q, %d) = %v", i, s.id, s.fence, err)
				}
			}
		})
	}
}

func TestFenceGuardHighest(t *testing.T) {
	var g sinks.FenceGuard
	if _, ok := g.Highest("a"); ok {
		t.Fatal("Highest on zero guard reports a fence")
	}
	if err := g.Accept("a", 0); err != nil {
		t.Fatal(err)
	}
	if h, ok := g.Highest("a"); !ok || h != 0 {
		t.Fatalf("Highest = %d, %v, want 0, true", h, ok)
	}
}

// TestFenceGuardDoSerialises races many writers with random fences on one
// item and checks that the store never goes backwards: every write that Do
// let through carried a fence at least as high as every earlier one.
func TestFenceGuardDoSerialises(t *testing.T) {
	var (
		g       sinks.FenceGuard
		mu      sync.Mutex
		written []uint64
		wg      sync.WaitGroup
	)
	for w := range 32 {
		wg.Go(func() {
			for i := range 50 {
				fence := uint64((w*7 + i*13) % 97)
				err := g.Do(context.Background(), "a", fence, func() error {
					mu.Lock()
					written = append(written, fence)
					mu.Unlock()
					return nil
				})
				if err != nil && !errors.Is(err, sinks.ErrStaleFence) {
					t.Errorf("Do: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(written); i++ {
		if written[i] < written[i-1] {
			t.Fatalf("write %d has fence %d after %d", i, written[i], written[i-1])
		}
	}
	if len(written) == 0 {
		t.Fatal("no write accepted")
	}
}

func TestFenceGuardDoStaleSkipsWrite(t *testing.T) {
	var g sinks.FenceGuard
	ctx := context.Background()
	if err := g.Do(ctx, "a", 5, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	called := false
	err := g.Do(ctx, "a", 4, func() error { called = true; return nil })
	if !errors.Is(err, sinks.ErrStaleFence) || called {
		t.Fatalf("Do with stale fence = %v, write called %v; want ErrStaleFence, not called", err, called)
	}
	// A failed write still raises the bar: the claim exists.
	werr := errors.New("disk full")
	if err := g.Do(ctx, "a", 6, func() error { return werr }); !errors.Is(err, werr) {
		t.Fatalf("Do = %v, want %v", err, werr)
	}
	if err := g.Accept("a", 5); !errors.Is(err, sinks.ErrStaleFence) {
		t.Fatalf("Accept(5) after failed write with 6 = %v, want ErrStaleFence", err)
	}
}

func TestFenceGuardDoHonoursContext(t *testing.T) {
	var g sinks.FenceGuard
	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.Do(context.Background(), "a", 1, func() error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside

	cause := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := g.Do(ctx, "a", 2, func() error { return nil }); !errors.Is(err, cause) {
		t.Fatalf("Do while item busy and ctx cancelled = %v, want %v", err, cause)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
