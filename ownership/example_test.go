package ownership_test

import (
	"context"
	"fmt"
	"time"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// A standalone lock: the watchdog renews it while the work runs, the
// work stops if the lock is lost, and the fence goes with every write.
func ExampleLocker() {
	ctx := context.Background()
	st, _ := store.Open(ctx, store.Config{}) // or Addrs: []string{"redis:6379"}
	defer st.Close()
	lk, _ := ownership.NewLocker(ownership.LockerConfig{Config: ownership.Config{TTL: 10 * time.Second}}, st)
	defer lk.Close()

	lock, err := lk.Lock(ctx, "nightly-report")
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	// Work under lock.Context(): it is cancelled, with an
	// ownership.ErrLeaseLost cause, if the lock can no longer be trusted.
	// Pass lock.Fence() to the system you write to.
	fmt.Println("fenced:", lock.Fence() > 0)

	_, err = lk.TryLock(ctx, "nightly-report")
	fmt.Println("second try:", err != nil)

	code, _ := lock.Unlock(ctx)
	fmt.Println(code)
	// Output:
	// fenced: true
	// second try: true
	// released
}
