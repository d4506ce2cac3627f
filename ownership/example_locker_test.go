package ownership_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// fenced stands for the system that locked work writes to (a database
// row, a file, an API). It remembers the highest fence it accepted and
// refuses lower ones: a holder that was paused past its lease (GC, a
// stalled VM) and wakes up to write is turned away, which no lock can
// do on its own. sinks.FenceGuard does this for syncd's sinks.
type fenced struct {
	mu    sync.Mutex
	fence uint64
	value int
}

func (f *fenced) get() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.value
}

func (f *fenced) set(fence uint64, v int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fence < f.fence {
		return fmt.Errorf("fence %d is below %d: a stale holder", fence, f.fence)
	}
	f.fence, f.value = fence, v
	return nil
}

// Job de-duplication: every instance of a service fires the same
// scheduled job; the one that takes the lock runs it, the others skip
// it and can see who runs it. The job's result is written with the
// lock's fence, so a run that outlived its lease cannot overwrite a
// later one.
func ExampleLocker_deduplicate() {
	ctx := context.Background()
	st, _ := store.Open(ctx, store.Config{}) // or Addrs: []string{"redis:6379"}
	defer st.Close()
	cfg := ownership.LockerConfig{Config: ownership.Config{TTL: 10 * time.Second}}
	hostA, _ := ownership.NewLocker(cfg, st) // one Locker per instance
	defer hostA.Close()
	hostB, _ := ownership.NewLocker(cfg, st)
	defer hostB.Close()
	var report fenced
	const job = "job:nightly-report"

	a, err := hostA.TryLock(ctx, job, ownership.WithMetadata("running on host-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// host-b fires the same job meanwhile.
	b, err := hostB.TryLock(ctx, job, ownership.WithMetadata("running on host-b"))
	if errors.Is(err, ownership.ErrNotObtained) {
		info, _ := hostB.Inspect(ctx, job)
		fmt.Println("host-b skips it:", info.Metadata)
	}
	_, err = b.Unlock(ctx) // safe on the nil lock of a failed TryLock
	fmt.Println("host-b unlock:", err)

	// host-a runs the job under a.Context() and writes with its fence.
	fmt.Println("host-a writes:", report.set(a.Fence(), 1))
	a.Unlock(ctx)

	// The next run goes to host-b. A late write from host-a's run (say
	// it was paused past its lease) is refused.
	b, _ = hostB.TryLock(ctx, job)
	fmt.Println("host-b writes:", report.set(b.Fence(), 2))
	b.Unlock(ctx)
	fmt.Println("late write from host-a refused:", report.set(a.Fence(), 1) != nil)
	// Output:
	// host-b skips it: running on host-a
	// host-b unlock: ownership: lock not held: unlock of a nil lock
	// host-a writes: <nil>
	// host-b writes: <nil>
	// late write from host-a refused: true
}

// Stock deduction: buyers on several instances deduct stock; the lock
// makes read-check-write one step across them, LimitTries bounds how
// long a buyer waits ("busy, try again" after that), and the write
// carries the fence, so a buyer whose lease ran out mid-step cannot
// oversell.
func ExampleLocker_stock() {
	ctx := context.Background()
	st, _ := store.Open(ctx, store.Config{})
	defer st.Close()
	stock := &fenced{value: 3}
	const item = "stock:sku-42"

	buy := func(lk *ownership.Locker) string {
		l, err := lk.Lock(ctx, item, ownership.LimitTries(50))
		if err != nil {
			return "busy, try again"
		}
		defer l.Unlock(ctx)
		n := stock.get()
		if n < 1 {
			return "sold out"
		}
		if err := stock.set(l.Fence(), n-1); err != nil {
			return "refused: " + err.Error()
		}
		return "sold"
	}

	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	for range 5 {
		lk, _ := ownership.NewLocker(ownership.LockerConfig{Config: ownership.Config{TTL: 5 * time.Second}}, st)
		defer lk.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := buy(lk)
			mu.Lock()
			outcomes[got]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	fmt.Printf("sold %d, sold out %d, stock left %d\n", outcomes["sold"], outcomes["sold out"], stock.get())
	// Output:
	// sold 3, sold out 2, stock left 0
}
