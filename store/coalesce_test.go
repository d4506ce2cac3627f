package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// gate is a coalescer's run that records each batch and blocks until
// released, so a test decides what is queued when.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	entered chan int // receives each batch's size as it starts
	release chan error
}

func newGate() *gate {
	return &gate{entered: make(chan int, 100), release: make(chan error, 100)}
}

func (g *gate) run(_ context.Context, reqs []int) ([]int, error) {
	g.mu.Lock()
	g.batches = append(g.batches, slices.Clone(reqs))
	g.mu.Unlock()
	g.entered <- len(reqs)
	if err := <-g.release; err != nil {
		return nil, err
	}
	out := make([]int, len(reqs))
	for i, r := range reqs {
		out[i] = r * 10
	}
	return out, nil
}

// queued waits until n calls wait in c's queue.
func queued(t *testing.T, c *coalescer[int, int], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c.mu.Lock()
		got := len(c.queue)
		c.mu.Unlock()
		if got == n {
			return
		}
	}
	t.Fatalf("the queue never held %d calls", n)
}

type result struct{ v, req int }

// rig is a coalescer over a gate, with its calls' results and errors.
type rig struct {
	g    *gate
	c    *coalescer[int, int]
	res  chan result
	errs chan error
	wg   sync.WaitGroup
}

func newRig(max, flight int) *rig {
	g := newGate()
	return &rig{g: g, c: &coalescer[int, int]{run: g.run, max: max, flight: flight},
		res: make(chan result, 20), errs: make(chan error, 20)}
}

// call runs c.do(req) in a goroutine, reporting on res or errs.
func (r *rig) call(ctx context.Context, req int) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		v, err := r.c.do(ctx, req)
		if err != nil {
			r.errs <- err
			return
		}
		r.res <- result{v, req}
	}()
}

// finish waits for every call and for the coalescer's senders; the
// coalescer stays open.
func (r *rig) finish() {
	r.wg.Wait()
	r.c.wg.Wait()
}

// A lone call goes out at once; calls made while the batch is out wait
// and go together in the next, at most max a batch, each with its own
// result.
func TestCoalescerBatchesWhatQueues(t *testing.T) {
	r := newRig(4, 1)
	g, c, out, errs := r.g, r.c, r.res, r.errs
	r.call(t.Context(), 1)
	if n := <-g.entered; n != 1 {
		t.Fatalf("first batch of %d calls, want 1 (sent at once)", n)
	}
	for i := 2; i <= 7; i++ {
		r.call(t.Context(), i)
		queued(t, c, i-1) // one at a time, so the queue's order is known
	}
	for range 3 {
		g.release <- nil
	}
	r.finish()
	close(out)
	for r := range out {
		if r.v != r.req*10 {
			t.Errorf("call %d got %d, want %d", r.req, r.v, r.req*10)
		}
	}
	if len(errs) > 0 {
		t.Errorf("error: %v", <-errs)
	}
	want := [][]int{{1}, {2, 3, 4, 5}, {6, 7}}
	if !slices.EqualFunc(g.batches, want, slices.Equal) {
		t.Errorf("batches %v, want %v (in order, at most 4 each)", g.batches, want)
	}
}

// With flight 2 a second call goes out while the first batch is out.
func TestCoalescerFlight(t *testing.T) {
	r := newRig(8, 2)
	g, c, out, errs := r.g, r.c, r.res, r.errs
	r.call(t.Context(), 1)
	<-g.entered
	r.call(t.Context(), 2)
	if n := <-g.entered; n != 1 {
		t.Fatalf("second batch of %d, want 1 sent at once", n)
	}
	r.call(t.Context(), 3)
	queued(t, c, 1)
	for range 3 {
		g.release <- nil
	}
	r.finish()
	if len(out) != 3 || len(errs) != 0 {
		t.Errorf("%d results, %d errors; want 3, 0", len(out), len(errs))
	}
}

// Calls marked exclusive (negative here) go out in one batch in flight at a
// time: a second waits though a slot is free, while an unmarked call
// takes that slot at once.
func TestCoalescerExclusiveQueues(t *testing.T) {
	r := newRig(8, 2)
	r.c.exclusive = func(q int) bool { return q < 0 }
	g, c, out, errs := r.g, r.c, r.res, r.errs
	r.call(t.Context(), -1)
	<-g.entered
	r.call(t.Context(), -2)
	queued(t, c, 1)
	r.call(t.Context(), 3)
	if n := <-g.entered; n != 1 {
		t.Fatalf("second batch of %d, want 1 sent at once", n)
	}
	for range 3 {
		g.release <- nil
	}
	r.finish()
	if len(out) != 3 || len(errs) != 0 {
		t.Errorf("%d results, %d errors; want 3, 0", len(out), len(errs))
	}
	want := [][]int{{-1}, {3}, {-2}}
	if !slices.EqualFunc(g.batches, want, slices.Equal) {
		t.Errorf("batches %v, want %v", g.batches, want)
	}
}

// Under load, no two batches in flight carry calls marked exclusive, while
// batches do overlap.
func TestCoalescerExclusiveNeverTwice(t *testing.T) {
	var mu sync.Mutex
	var inFlight, exclInFlight, maxInFlight, maxExcl, mixed int
	run := func(_ context.Context, reqs []int) ([]int, error) {
		excl := slices.ContainsFunc(reqs, func(q int) bool { return q < 0 })
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		if excl {
			exclInFlight++
			maxExcl = max(maxExcl, exclInFlight)
			if slices.ContainsFunc(reqs, func(q int) bool { return q >= 0 }) {
				mixed++
			}
		}
		mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		mu.Lock()
		inFlight--
		if excl {
			exclInFlight--
		}
		mu.Unlock()
		return slices.Clone(reqs), nil
	}
	c := &coalescer[int, int]{run: run, max: 8, flight: 3, exclusive: func(q int) bool { return q < 0 }}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				q := g*1000 + i
				if i%2 == 0 {
					q = -q - 1
				}
				if v, err := c.do(t.Context(), q); err != nil || v != q {
					t.Errorf("call %d = %d, %v", q, v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	c.close()
	if maxExcl != 1 {
		t.Errorf("%d batches with calls marked exclusive in flight at once, want 1", maxExcl)
	}
	if maxInFlight < 2 || mixed == 0 {
		t.Errorf("at most %d batches in flight, %d batches of both kinds: the test did not load the coalescer", maxInFlight, mixed)
	}
	t.Logf("at most %d batches in flight; %d carried both kinds", maxInFlight, mixed)
}

// close waits for a batch a caller is sending in its own goroutine, and
// refuses later calls as the closed client would.
func TestCoalescerClose(t *testing.T) {
	r := newRig(8, 1)
	g, out := r.g, r.res
	r.call(t.Context(), 1)
	<-g.entered // the caller's own goroutine is sending
	closed := make(chan struct{})
	go func() {
		r.c.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("close returned while a caller was sending")
	case <-time.After(50 * time.Millisecond):
	}
	g.release <- nil
	<-closed
	r.wg.Wait()
	if len(out) != 1 {
		t.Errorf("%d results, want the call in flight's", len(out))
	}
	if _, err := r.c.do(t.Context(), 2); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("call after close: %v, want redis.ErrClosed", err)
	}
}

// An error of run fails every call of its batch, and only those.
func TestCoalescerErrorFailsItsBatch(t *testing.T) {
	r := newRig(8, 1)
	g, c, out, errs := r.g, r.c, r.res, r.errs
	r.call(t.Context(), 1)
	<-g.entered
	r.call(t.Context(), 2)
	r.call(t.Context(), 3)
	queued(t, c, 2)
	g.release <- nil
	<-g.entered
	boom := errors.New("boom")
	g.release <- boom
	r.finish()
	if len(out) != 1 || len(errs) != 2 {
		t.Fatalf("%d results, %d errors; want 1 and 2", len(out), len(errs))
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Errorf("error %v, want boom", err)
		}
	}
}

// A call whose context ends returns at once: never sent when it was
// still queued; cut off, as any call, when its batch was out.
func TestCoalescerCallerGivesUp(t *testing.T) {
	r := newRig(8, 1)
	g, c, errs := r.g, r.c, r.errs
	sentCtx, cancelSent := context.WithCancel(t.Context())
	r.call(sentCtx, 1)
	<-g.entered
	queuedCtx, cancelQueued := context.WithCancel(t.Context())
	r.call(queuedCtx, 2)
	queued(t, c, 1)
	r.call(t.Context(), 3)
	queued(t, c, 2)

	cancelQueued()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued call gave up with %v, want context.Canceled", err)
	}
	queued(t, c, 1) // taken out of the queue
	// The first call is the sender: it waits for its batch, as a
	// lone call does for its command.
	cancelSent()
	g.release <- nil
	if n := <-g.entered; n != 1 {
		t.Fatalf("next batch of %d calls, want 1 (the call that gave up is not sent)", n)
	}
	g.release <- nil
	r.finish()
	if g.batches[1][0] != 3 {
		t.Errorf("second batch %v, want [3]", g.batches[1])
	}

	// A waiting call whose batch is out returns when its context ends.
	r.call(t.Context(), 4)
	<-g.entered
	outCtx, cancelOut := context.WithCancel(t.Context())
	r.call(t.Context(), 5)
	r.call(outCtx, 6)
	queued(t, c, 2)
	g.release <- nil
	<-g.entered // 5 and 6 are out
	cancelOut()
	select {
	case err := <-errs:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call cut off with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call whose batch was out did not return when its context ended")
	}
	g.release <- nil
	r.finish()
}

// A lone call's batch runs on the caller's own context, so a call to a
// dead server ends with it (a quorum Locker's NodeTimeout); a shared
// batch's does not end when one of its callers gives up.
func TestCoalescerContexts(t *testing.T) {
	wait := func(ctx context.Context, reqs []int) ([]int, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
			return make([]int, len(reqs)), nil
		}
	}
	c := &coalescer[int, int]{run: wait, max: 8, flight: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.do(ctx, 1); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 200*time.Millisecond {
		t.Errorf("lone call = %v after %v, want its deadline after 20ms", err, time.Since(start))
	}

	r := newRig(8, 1)
	g, run := r.g, r.c.run
	r.c.run = func(ctx context.Context, reqs []int) ([]int, error) {
		if len(reqs) > 1 && ctx.Done() != nil {
			return nil, errors.New("a shared batch runs on a context that can end")
		}
		return run(ctx, reqs)
	}
	c, out, errs := r.c, r.res, r.errs
	r.call(t.Context(), 1)
	<-g.entered
	short, cancelShort := context.WithCancel(t.Context())
	defer cancelShort()
	r.call(short, 2)
	queued(t, c, 1)
	r.call(t.Context(), 3)
	queued(t, c, 2)
	g.release <- nil
	g.release <- nil
	r.finish()
	if len(errs) > 0 {
		t.Fatal(<-errs)
	}
	if len(out) != 3 {
		t.Errorf("%d results, want 3", len(out))
	}
}
