package store_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// A Redis out of memory under noeviction is named by OutOfMemory, and
// the claim it refuses is IsOutOfMemory, as the script's error comes
// back wrapped; once memory is freed, neither.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	s := open(t, store.Config{Addrs: []string{srv.Addr()}})
	ctx := t.Context()
	if _, err := s.Add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	sh := s.Keys().Shard("a")
	if _, err := s.MarkEpoch(ctx, sh, 0); err != nil {
		t.Fatal(err)
	}
	free := srv.FillMemory(t)
	oom, err := s.OutOfMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(oom, []string{srv.Addr()}); diff != "" {
		t.Errorf("OutOfMemory while full (-got +want):\n%s", diff)
	}
	p := store.ClaimIDsParams{Shard: sh, IDs: []string{"a"}, Records: []*store.Record{record("h")}, TTL: time.Minute}
	if _, err := s.ClaimIDs(ctx, p); !store.IsOutOfMemory(err) {
		t.Errorf("claim while full: %v, want IsOutOfMemory", err)
	}
	free()
	if oom, err := s.OutOfMemory(ctx); err != nil || oom != nil {
		t.Errorf("OutOfMemory once freed = %v, %v; want none", oom, err)
	}
	if res, err := s.ClaimIDs(ctx, p); err != nil || len(res.Items) != 1 || res.Items[0].Code != store.ClaimOK {
		t.Errorf("claim once freed: %+v, %v; want it claimed", res, err)
	}
}

// OutOfMemory holds over maxmemory, less what Redis does not count
// against it, under noeviction alone.
func TestServerInfoOutOfMemory(t *testing.T) {
	tests := []struct {
		in   store.ServerInfo
		want bool
	}{
		{store.ServerInfo{MaxmemoryPolicy: "noeviction", UsedMemory: 10, Maxmemory: 9}, true},
		{store.ServerInfo{MaxmemoryPolicy: "noeviction", UsedMemory: 9, Maxmemory: 9}, false},
		{store.ServerInfo{MaxmemoryPolicy: "noeviction", UsedMemory: 10}, false}, // no limit
		{store.ServerInfo{MaxmemoryPolicy: "noeviction", UsedMemory: 10, Maxmemory: 9, NotCountedForEvict: 2}, false},
		{store.ServerInfo{MaxmemoryPolicy: "allkeys-lru", UsedMemory: 10, Maxmemory: 9}, false},
	}
	for _, tt := range tests {
		if got := tt.in.OutOfMemory(); got != tt.want {
			t.Errorf("%+v.OutOfMemory() = %v, want %v", tt.in, got, tt.want)
		}
	}
}
