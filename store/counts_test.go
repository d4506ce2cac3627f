package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// listCounts classifies every item as `syncd status` does, from List:
// the slow, exact reference for Counts.
func listCounts(t *testing.T, s *store.Store) store.Counts {
	t.Helper()
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var c store.Counts
	for sh := range s.Keys().Shards() {
		for off := 0; off >= 0; {
			page, next, err := s.List(t.Context(), sh, off, 100)
			if err != nil {
				t.Fatal(err)
			}
			off = next
			for _, it := range page {
				c.All++
				switch {
				case it.Record != nil || it.RecordErr != nil:
					c.InFlight++
				case it.Quarantined:
					c.Quarantined++
				case it.Due <= now:
					c.Due++
				case it.Attempts > 0:
					c.BackingOff++
				}
			}
		}
	}
	return c
}

// TestCounts: Counts agrees with a full List of every item in each
// state: idle, due, in flight (also past its due score), backing off,
// failing but due again, failing and in flight again, quarantined.
func TestCounts(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 4})
		for sh := range 4 {
			s.MarkEpoch(ctx, sh, 0)
		}
		release := func(id string, kind store.ReleaseKind, delay time.Duration) {
			t.Helper()
			r := record("w")
			if res := claim(t, s, r, time.Minute, id); res[0].Code != store.ClaimOK {
				t.Fatalf("claim %s = %+v", id, res[0])
			}
			s.Release(ctx, s.Keys().Shard(id), []store.ReleaseRequest{{ID: id, Token: r.Token, Kind: kind, Delay: delay, Error: "boom"}})
		}
		var ids []string
		for i := range 40 {
			ids = append(ids, fmt.Sprintf("item-%d", i))
		}
		if _, err := s.Add(ctx, ids...); err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			switch i % 8 {
			case 0: // idle
				release(id, store.ReleaseSynced, time.Hour)
			case 1: // in flight
				claim(t, s, record("w"), time.Minute, id)
			case 2: // backing off
				release(id, store.ReleaseFailed, time.Hour)
			case 3: // failing, due again
				release(id, store.ReleaseFailed, time.Millisecond)
			case 4: // failing, in flight again
				release(id, store.ReleaseFailed, time.Millisecond)
				time.Sleep(2 * time.Millisecond)
				claim(t, s, record("w"), time.Minute, id)
			case 5: // quarantined
				release(id, store.ReleaseQuarantine, 0)
			case 6: // in flight past its due score: the owner runs over its ttl
				claim(t, s, record("w"), time.Minute, id)
				s.Client().ZAdd(ctx, s.Keys().Due(s.Keys().Shard(id)), redis.Z{Score: 1, Member: id})
			}
			// 7: due, never synced
		}
		time.Sleep(5 * time.Millisecond)
		got, err := s.Counts(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want := listCounts(t, s)
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("Counts differs from List (-got +want):\n%s", diff)
		}
		if want != (store.Counts{All: 40, Due: 10, InFlight: 15, BackingOff: 5, Quarantined: 5}) {
			t.Errorf("reference counts = %+v", want)
		}
		if got.Idle() != 5 {
			t.Errorf("Idle = %d, want 5", got.Idle())
		}

		// A damaged shard is left out and named; the others still count.
		bad := s.Keys().Shard(ids[0])
		s.Client().Del(ctx, s.Keys().Errors(bad))
		s.Client().Set(ctx, s.Keys().Errors(bad), "x", 0)
		part, err := s.Counts(ctx, time.Minute)
		var de *store.DamageError
		if !errors.As(err, &de) || de.Shard != bad {
			t.Fatalf("Counts with shard %d damaged: err = %v", bad, err)
		}
		if part.All >= got.All || part.All == 0 {
			t.Errorf("Counts with a damaged shard: All = %d (all shards: %d)", part.All, got.All)
		}
	})
}
