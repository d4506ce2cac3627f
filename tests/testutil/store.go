package testutil

import (
	"testing"
	"time"

	"github.com/syncd/syncd/store"
)

// DueIn is how long until id is due, on Redis's clock (negative: overdue).
func DueIn(t testing.TB, st *store.Store, id string) time.Duration {
	t.Helper()
	now, err := st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	v, err := st.Client().ZScore(t.Context(), st.Keys().Due(st.Keys().Shard(id)), id).Result()
	if err != nil {
		t.Fatalf("ZSCORE %s: %v", id, err)
	}
	return time.Duration(int64(v)-now) * time.Millisecond
}
