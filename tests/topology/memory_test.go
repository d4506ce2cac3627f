package topology

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

var evictionPolicies = []string{
	"noeviction",
	"allkeys-lru", "allkeys-lfu", "allkeys-random",
	"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
}

// Under maxmemory, store.Open warns at error level about every policy
// but noeviction (naming noeviction as the fix), refuses them with
// RefuseEviction, and passes noeviction silently. Then memory fills up
// with other keys (no expiry) while claims are held, and the test
// counts the claim records Redis evicted: what the warning is about.
func TestEvictionPolicies(t *testing.T) {
	t.Parallel()
	for _, policy := range evictionPolicies {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, &redistest.Options{Config: []string{"maxmemory 8mb", "maxmemory-policy " + policy}})
			ctx := t.Context()
			addrs := []string{srv.Addr()}

			refusing, err := store.Open(ctx, store.Config{Addrs: addrs, KeyPrefix: "mem", Shards: 1, RefuseEviction: true})
			if policy == "noeviction" {
				if err != nil {
					t.Fatalf("Open with noeviction and RefuseEviction: %v", err)
				}
				refusing.Close()
			} else if !errors.Is(err, store.ErrEviction) || !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), "noeviction") {
				t.Errorf("Open with RefuseEviction = %v, want ErrEviction naming %s and noeviction", err, policy)
			}

			var logs logBuffer
			st, err := store.Open(ctx, store.Config{Addrs: addrs, KeyPrefix: "mem", Shards: 1, Logger: logs.logger(zerolog.DebugLevel)})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			errs := logs.lines(`"level":"error"`)
			warns := logs.lines(`"level":"warn"`)
			if policy == "noeviction" {
				if len(errs)+len(warns) > 0 {
					t.Errorf("noeviction: Open logged\n%s", strings.Join(append(errs, warns...), "\n"))
				}
			} else if len(errs) != 1 || !strings.Contains(errs[0], "noeviction") || !strings.Contains(errs[0], policy) {
				t.Errorf("%s: want one error-level line naming it and noeviction, got\n%s", policy, logs.String())
			}

			held, kept, items, claimErr := pressure(t, st, srv.Client(t))
			t.Logf("%-15s claims held %d, kept after filling memory %d (%d evicted), items left in the due index %d of %d; claiming under pressure: %v",
				policy, held, kept, held-kept, items, held+1, claimErr)
			switch {
			case policy == "noeviction" && (kept != held || claimErr == nil || !strings.Contains(claimErr.Error(), "OOM")):
				t.Errorf("noeviction: kept %d of %d claims, claim under pressure %v; want all kept and an OOM error", kept, held, claimErr)
			case strings.HasPrefix(policy, "volatile-") && kept == held:
				t.Errorf("%s evicted no claim record: the premise of the warning does not hold", policy)
			}
		})
	}
}

// pressure claims items with long leases, fills Redis with 1 KiB values
// without expiry to twice its maxmemory, and returns how many claims were
// held, how many records are still there, how many items are left in the
// due index, and the error of a claim tried afterwards.
func pressure(t *testing.T, st *store.Store, admin *redis.Client) (held, kept, items int, claimErr error) {
	t.Helper()
	ctx := t.Context()
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%03d", i)
	}
	if _, err := st.Add(ctx, append(ids, "late")...); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MarkEpoch(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	m, err := ownership.New(st, ownership.Config{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	leases, err := m.ClaimIDs(ctx, ownership.ClaimIDsParams{Shard: 0, IDs: ids})
	if err != nil || len(leases) != n {
		t.Fatalf("claimed %d of %d: %v", len(leases), n, err)
	}
	value := strings.Repeat("x", 1024)
	for batch := range 16 {
		p := admin.Pipeline()
		for i := range 1024 {
			p.Set(ctx, fmt.Sprintf("junk:%d:%d", batch, i), value, 0)
		}
		p.Exec(ctx) // OOM errors under noeviction are the point
	}
	for _, l := range leases {
		rec, err := st.ReadRecord(ctx, st.Keys().Record(0, l.ID()))
		if err != nil {
			t.Fatal(err)
		}
		if rec != nil && rec.Token == l.Token() {
			kept++
		}
	}
	items = int(admin.ZCard(ctx, st.Keys().Due(0)).Val())
	_, claimErr = m.ClaimIDs(ctx, ownership.ClaimIDsParams{Shard: 0, IDs: []string{"late"}})
	return n, kept, items, claimErr
}
