package store_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/store"
)

// A wrong-type err hash loses the failure's message, never the failure:
// the attempts are counted and the item is quarantined as it would be.
// Before, the release script failed on HSET, so the item passed
// max_attempts without being quarantined (found by an audit).
func TestReleaseWithDamagedErrorsKey(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "p")
		s.Client().Set(ctx, s.Keys().Errors(0), "garbage", 0)
		for attempt := 1; attempt <= 2; attempt++ {
			r := record("w")
			if res := claim(t, s, r, time.Minute, "p")[0]; res.Code != store.ClaimOK || res.Attempt != attempt {
				t.Fatalf("attempt %d: claim = %+v", attempt, res)
			}
			kind := store.ReleaseFailed
			if attempt == 2 {
				kind = store.ReleaseQuarantine
			}
			res, err := s.Release(ctx, 0, []store.ReleaseRequest{{ID: "p", Token: r.Token, Kind: kind, Error: "boom"}})
			if err != nil || res[0].Code != store.Released {
				t.Fatalf("attempt %d: release = %+v, %v", attempt, res, err)
			}
		}
		if score := s.Client().ZScore(ctx, s.Keys().Due(0), "p").Val(); !math.IsInf(score, 1) {
			t.Fatalf("due score after quarantine = %v, want +inf", score)
		}
	})
}

// A batch marker that is not a start Redis's clock has passed is
// replaced by a new run. Before, a marker of 1e300 made every item look
// synced since the run began: syncd batch exited 0 having synced none.
func TestJoinBatchReplacesDamagedMarker(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		rdb := s.Client()
		for _, planted := range []func(){
			func() { rdb.Set(ctx, s.Keys().Batch(), "1e300", 0) },
			func() { rdb.Set(ctx, s.Keys().Batch(), "inf", 0) },
			func() { rdb.Set(ctx, s.Keys().Batch(), "-5", 0) },
			func() { rdb.Set(ctx, s.Keys().Batch(), "99999999999999", 0) }, // year 5138
			func() { rdb.Del(ctx, s.Keys().Batch()); rdb.HSet(ctx, s.Keys().Batch(), "f", "v") },
		} {
			planted()
			now, err := s.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			since, err := s.JoinBatch(ctx, time.Minute)
			if err != nil || since <= 0 || since > now+1000 || since < now-1000 {
				t.Fatalf("JoinBatch over %q = %d, %v; want about %d", rdb.Get(ctx, s.Keys().Batch()).Val(), since, err, now)
			}
			if again, err := s.JoinBatch(ctx, time.Minute); err != nil || again != since {
				t.Fatalf("second JoinBatch = %d, %v; want the same run %d", again, err, since)
			}
			rdb.Del(ctx, s.Keys().Batch())
		}
	})
}

// A wrong-type err hash loses last errors, never items: requeue, remove
// and reconcile work on (they failed half done, the requeue having made
// the item due before it failed on HDEL), and Counts, ListPage and List
// show the shard's items, naming the damage as ErrorsLost. Before,
// status said the shard's items "are not shown and wait" while its
// daemons synced them (an operator's trial).
func TestAdminAndReadsWithDamagedErrorsKey(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		if _, err := s.Add(ctx, "p", "q", "r"); err != nil {
			t.Fatal(err)
		}
		s.Client().Set(ctx, s.Keys().Errors(0), "garbage", 0)
		if n, err := s.Requeue(ctx, "p"); err != nil || n != 1 {
			t.Fatalf("Requeue = %d, %v; want 1, nil", n, err)
		}
		if n, err := s.Remove(ctx, "q"); err != nil || n != 1 {
			t.Fatalf("Remove = %d, %v; want 1, nil", n, err)
		}
		if n, err := s.Reconcile(ctx, 0, 0, false, []string{"r"}); err != nil || n != 1 {
			t.Fatalf("Reconcile remove = %d, %v; want 1, nil", n, err)
		}
		s.Add(ctx, "r")

		lost := func(what string, err error) {
			t.Helper()
			var d *store.DamageError
			if !errors.As(err, &d) || !d.ErrorsLost || d.Shard != 0 || !strings.Contains(d.Error(), s.Keys().Errors(0)) {
				t.Fatalf("%s: error = %v; want a DamageError with ErrorsLost naming %s", what, err, s.Keys().Errors(0))
			}
		}
		c, err := s.Counts(ctx)
		lost("Counts", err)
		if c.Items != 2 || c.Due != 2 {
			t.Fatalf("Counts = %+v; want 2 items, 2 due", c)
		}
		p, err := s.ListPage(ctx, store.ListQuery{Limit: 10})
		lost("ListPage", err)
		if len(p.Items) != 2 {
			t.Fatalf("ListPage items = %+v; want p and r", p.Items)
		}
		items, _, err := s.List(ctx, 0, 0, 10)
		if err != nil || len(items) != 2 {
			t.Fatalf("List = %+v, %v; want p and r", items, err)
		}
		// Item reads the item, and says that its last error is
		// unknown, not none (it said nothing: the API showed
		// last_error "" with no hint).
		d, err := s.Item(ctx, "p")
		if err != nil {
			t.Fatalf("Item = %v", err)
		}
		lost("Item's ErrorsLost", d.ErrorsLost)
	})
}
