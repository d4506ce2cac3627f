package sinks

import (
	"context"
	"fmt"
	"sync"
)

// FenceGuard enforces fencing for a target that lives in one process: for
// each item ID it remembers the highest fence it accepted and rejects lower
// ones with an error wrapping ErrStaleFence. An equal fence is accepted: it
// is the same claim writing again, which retries and idempotent sinks do.
//
// The zero value is ready to use. A FenceGuard is safe for concurrent use
// and must not be copied after first use. It keeps one small entry per item
// ID it has seen, for its whole life; forgetting an entry would let a stale
// owner of that item write again.
//
// The check and the write must be one atomic step: if writer 5 passes the
// check, then writer 6 passes it and writes, a slow writer 5 must not write
// after it. Use [FenceGuard.Do] to run the write under the guard, or call
// [FenceGuard.Accept] only where the caller already serialises check and
// write for the item.
//
// A target outside the process needs the same rule in its own store, applied
// in the same statement as the write. In SQL, with the fence kept next to
// the data:
//
//	-- $1 = item ID, $2 = fence, $3 = data
//	UPDATE t SET data = $3, fence = $2 WHERE id = $1 AND fence <= $2;
//	-- 0 rows updated (and the row exists): return an error wrapping
//	-- sinks.ErrStaleFence.
//
// and for the first write of an item:
//
//	INSERT INTO t (id, data, fence) VALUES ($1, $3, $2)
//	ON CONFLICT (id) DO UPDATE SET data = excluded.data, fence = excluded.fence
//	WHERE t.fence <= excluded.fence;
type FenceGuard struct {
	mu    sync.Mutex
	items map[string]*fenceEntry
}

type fenceEntry struct {
	high uint64        // highest fence accepted; guarded by FenceGuard.mu
	seen bool          // whether any fence was accepted; guarded by FenceGuard.mu
	lock chan struct{} // a one-slot semaphore that serialises Do per item
}

// Accept records fence for the item id and returns nil if fence is at least
// the highest fence accepted for id so far. Otherwise it returns an error
// wrapping ErrStaleFence and records nothing.
func (g *FenceGuard) Accept(id string, fence uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.acceptLocked(g.entryLocked(id), id, fence)
}

// Do runs write if fence is at least the highest fence accepted for id, and
// returns write's error. Calls of Do for the same id are serialised, so no
// write with a lower fence can start after one with a higher fence was
// accepted. The fence is recorded before write runs: once a claim with a
// higher fence exists, older claims are stale whether or not its write
// succeeds.
//
// When the fence is stale, Do returns an error wrapping ErrStaleFence
// without calling write. While it waits for another write of the same id, Do
// honours ctx and returns context.Cause(ctx) when ctx is done.
func (g *FenceGuard) Do(ctx context.Context, id string, fence uint64, write func() error) error {
	g.mu.Lock()
	e := g.entryLocked(id)
	g.mu.Unlock()

	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("sinks: item %q: wait for fence guard: %w", id, context.Cause(ctx))
	}
	defer func() { <-e.lock }()

	g.mu.Lock()
	err := g.acceptLocked(e, id, fence)
	g.mu.Unlock()
	if err != nil {
		return err
	}
	return write()
}

// Highest returns the highest fence accepted for id, and false when none
// was.
func (g *FenceGuard) Highest(id string) (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.items[id]
	if !ok {
		return 0, false
	}
	return e.high, e.seen
}

func (g *FenceGuard) entryLocked(id string) *fenceEntry {
	if g.items == nil {
		g.items = make(map[string]*fenceEntry)
	}
	e, ok := g.items[id]
	if !ok {
		e = &fenceEntry{lock: make(chan struct{}, 1)}
		g.items[id] = e
	}
	return e
}

func (g *FenceGuard) acceptLocked(e *fenceEntry, id string, fence uint64) error {
	if e.seen && fence < e.high {
		return fmt.Errorf("%w: item %q: fence %d, already accepted %d", ErrStaleFence, id, fence, e.high)
	}
	e.high = fence
	e.seen = true
	return nil
}
