package store

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// coalescer gathers concurrent calls of one kind into batches, each sent
// as one script call: the lock and unlock paths, where a script call
// costs Redis far more (its arguments turned into Lua tables, the call
// set up and torn down) than one more lock inside it.
//
// A call that finds fewer than flight batches in flight (and may go out:
// see exclusive) sends its batch at once, in its own goroutine, so a
// lone caller waits for nothing. Calls that arrive meanwhile queue. When
// that batch returns and calls that may go out are queued, a goroutine
// keeps the batch slot and sends them (up to max) in each next batch
// until none is left. So batches grow with the load and need no timer,
// and no caller waits for more than the batches in flight and its own.
//
// Requests marked exclusive (unlocks) go out in at most one batch in
// flight at a time, and wait in the queue meanwhile though a slot is
// free; the others fill the remaining slots.
type coalescer[Q, R any] struct {
	// run sends one batch and returns one result per request, or an
	// error for all of them. Its ctx is the request's when the batch
	// holds one request (a lone call is bounded by its ctx, as a quorum
	// Locker's NodeTimeout needs of a dead server's dial), else the first
	// request's without its cancellation: a shared batch must not fail
	// because one caller gave up.
	run    func(ctx context.Context, reqs []Q) ([]R, error)
	max    int // requests per batch
	flight int // batches in flight at most
	// exclusive, when set, marks the requests of which at most one batch
	// in flight may carry any (unlocks: see lockOps); the others may go
	// out in the other batches meanwhile. Nil: none.
	exclusive func(Q) bool

	mu       sync.Mutex
	queue    []*pendingCall[Q, R]
	busy     int            // batches in flight
	exclBusy bool           // a batch in flight carries requests marked exclusive
	closed   bool           // see close
	wg       sync.WaitGroup // every sender: loops and callers sending inline
	calls    sync.Pool      // *pendingCall, reused (see get)
}

// pendingCall is one queued request and, once done has a value, its
// result.
type pendingCall[Q, R any] struct {
	ctx  context.Context
	req  Q
	res  R
	err  error
	done chan struct{} // capacity 1: the sender never waits on it
}

// get returns a pendingCall for req, reused when one is free: a call
// and its channel are two allocations per Lock and Unlock otherwise.
func (c *coalescer[Q, R]) get(ctx context.Context, req Q) *pendingCall[Q, R] {
	p, _ := c.calls.Get().(*pendingCall[Q, R])
	if p == nil {
		p = &pendingCall[Q, R]{done: make(chan struct{}, 1)}
	}
	p.ctx, p.req = ctx, req
	return p
}

// put hands p back for reuse. Only a caller that got p's result, or took
// p out of the queue unsent, may: nothing else refers to p then.
func (c *coalescer[Q, R]) put(p *pendingCall[Q, R]) {
	*p = pendingCall[Q, R]{done: p.done}
	c.calls.Put(p)
}

// do sends req in the next batch and waits for its result. When ctx ends
// first it returns at once with ctx's error (a quorum Locker bounds each
// server's wait so): a request still queued is then never sent, one
// already sent may take effect, as any call cut off while Redis runs it.
func (c *coalescer[Q, R]) do(ctx context.Context, req Q) (R, error) {
	if err := ctx.Err(); err != nil {
		var zero R
		return zero, context.Cause(ctx)
	}
	p := c.get(ctx, req)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.put(p)
		var zero R
		return zero, redis.ErrClosed
	}
	c.queue = append(c.queue, p)
	if c.busy < c.flight && c.sendable(p) {
		// A slot is free, so no call that could go out waits in the
		// queue (a sender gives up its slot only when none is left):
		// ours goes out at once, the batch's only call.
		c.busy++
		c.wg.Add(1)
		c.send()
		if c.ready() {
			c.wg.Add(1)
			go c.loop()
		} else {
			c.busy--
		}
		c.mu.Unlock()
		c.wg.Done()
		<-p.done
		return c.result(p)
	}
	c.mu.Unlock()
	select {
	case <-p.done:
		return c.result(p)
	case <-ctx.Done():
	}
	c.mu.Lock()
	unsent := false
	for i, q := range c.queue {
		if q == p {
			copy(c.queue[i:], c.queue[i+1:])
			c.queue[len(c.queue)-1] = nil
			c.queue = c.queue[:len(c.queue)-1]
			unsent = true
			break
		}
	}
	c.mu.Unlock()
	if unsent {
		c.put(p)
	} // else its batch is out, and its sender still hands it the result
	var zero R
	return zero, context.Cause(ctx)
}

// result returns the result p was handed and p for reuse.
func (c *coalescer[Q, R]) result(p *pendingCall[Q, R]) (R, error) {
	res, err := p.res, p.err
	c.put(p)
	return res, err
}

// loop sends batches until no queued call may go out (see ready), then
// gives up the batch slot it was handed.
func (c *coalescer[Q, R]) loop() {
	defer c.wg.Done()
	c.mu.Lock()
	for c.ready() {
		c.send()
	}
	c.busy--
	c.mu.Unlock()
}

// sendable reports whether p may go out now: not marked exclusive, or
// no batch in flight carries requests marked exclusive. Called with c.mu
// held.
func (c *coalescer[Q, R]) sendable(p *pendingCall[Q, R]) bool {
	return !c.exclBusy || c.exclusive == nil || !c.exclusive(p.req)
}

// ready reports whether a queued call may go out now. Called with c.mu
// held.
func (c *coalescer[Q, R]) ready() bool {
	if !c.exclBusy {
		return len(c.queue) > 0
	}
	for _, p := range c.queue {
		if c.sendable(p) {
			return true
		}
	}
	return false
}

// send sends one batch of the queue's oldest calls that may go out (see
// sendable) and hands each its result. Called with c.mu held, which it
// releases while the batch is out.
func (c *coalescer[Q, R]) send() {
	// The oldest that may go out; those marked exclusive wait while a
	// batch in flight carries theirs.
	batch := make([]*pendingCall[Q, R], 0, min(len(c.queue), c.max))
	left := c.queue[:0]
	carriesExcl := false
	for _, p := range c.queue {
		if len(batch) < c.max && c.sendable(p) {
			batch = append(batch, p)
			carriesExcl = carriesExcl || c.exclusive != nil && c.exclusive(p.req)
		} else {
			left = append(left, p)
		}
	}
	clear(c.queue[len(left):])
	c.queue = left
	c.exclBusy = c.exclBusy || carriesExcl
	n := len(batch)
	c.mu.Unlock()
	reqs := make([]Q, n)
	for i, p := range batch {
		reqs[i] = p.req
	}
	ctx := batch[0].ctx
	if n > 1 {
		ctx = context.WithoutCancel(ctx)
	}
	res, err := c.run(ctx, reqs)
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.res = res[i]
		}
		p.done <- struct{}{} // p is its caller's again: not touched after this
	}
	c.mu.Lock()
	if carriesExcl {
		c.exclBusy = false
	}
}

// close refuses every later call (with redis.ErrClosed, as the closed
// client would) and returns when no goroutine is sending for c, its own
// or a caller's (Store.Close). Calls still queued are sent first.
func (c *coalescer[Q, R]) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}
