package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// The first Open of a deployment creates its marker; a marker Redis lost
// comes back with another ID, which is how a process knows the data it
// relied on is gone.
func TestDeploymentMarker(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "dep"}
	first := open(t, cfg)
	if !first.Fresh() || first.DeploymentAge() != 0 {
		t.Errorf("the first Open of a deployment: Fresh %v, age %v", first.Fresh(), first.DeploymentAge())
	}
	d1, err := first.Deployment(t.Context())
	if err != nil || d1.New || d1.ID == "" || time.Since(d1.Created) > time.Minute {
		t.Fatalf("Deployment = %+v, %v", d1, err)
	}
	time.Sleep(50 * time.Millisecond)
	if second := open(t, cfg); second.Fresh() || second.DeploymentAge() < 50*time.Millisecond || second.DeploymentAge() > time.Minute {
		t.Errorf("a second Open of the deployment: Fresh %v, age %v", second.Fresh(), second.DeploymentAge())
	}
	first.Client().FlushAll(t.Context())
	d2, err := first.Deployment(t.Context())
	if err != nil || !d2.New || d2.ID == d1.ID {
		t.Fatalf("Deployment after FLUSHALL = %+v, %v; want a new marker", d2, err)
	}
	if err := first.Restored(t.Context()); err != nil {
		t.Fatal(err)
	}
	if third := open(t, cfg); third.Fresh() || third.DeploymentAge() > time.Minute {
		t.Errorf("Open after the marker was restored: Fresh %v, age %v", third.Fresh(), third.DeploymentAge())
	}
	// The shard count without the marker: a deployment from before the
	// marker, or one that lost part of its data, is not new.
	first.Client().Del(t.Context(), first.Keys().Deployment())
	if fourth := open(t, cfg); fourth.Fresh() || fourth.DeploymentAge() < time.Hour {
		t.Errorf("Open of shards without a marker: Fresh %v, age %v", fourth.Fresh(), fourth.DeploymentAge())
	}
}

// A data loss is recorded and counted once per marker, by the first
// process to record it, whichever process wrote the marker; the others
// write only what they restored.
func TestRecordDataLossOncePerMarker(t *testing.T) {
	srv := redistest.Start(t, nil)
	st := open(t, store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "loss"})
	ctx := t.Context()
	loss := store.DataLoss{At: time.UnixMilli(time.Now().UnixMilli()), Restored: 30, Lost: 2, By: "h/1/r", Marker: "m1"}
	if counted, err := st.RecordDataLoss(ctx, loss); !counted || err != nil {
		t.Errorf("the first record of m1: counted %v, %v", counted, err)
	}
	// Another process's record of the same loss: its counts, not its
	// time and name, and no second count.
	other := store.DataLoss{At: loss.At.Add(time.Second), Restored: 31, Lost: 1, By: "h/2/r", Marker: "m1"}
	if counted, err := st.RecordDataLoss(ctx, other); counted || err != nil {
		t.Errorf("the second record of m1: counted %v, %v", counted, err)
	}
	got, err := st.LastDataLoss(ctx)
	want := &store.DataLoss{At: loss.At, Count: 1, Restored: 31, Lost: 1, By: "h/1/r", Marker: "m1"}
	if err != nil || got == nil || *got != *want {
		t.Errorf("LastDataLoss = %+v, %v; want %+v", got, err, want)
	}
	// The next loss, under another marker, is counted.
	next := store.DataLoss{At: loss.At.Add(time.Hour), Restored: 5, By: "h/2/r", Marker: "m2"}
	st.RecordDataLoss(ctx, next)
	want = &store.DataLoss{At: next.At, Count: 2, Restored: 5, By: "h/2/r", Marker: "m2"}
	if got, err := st.LastDataLoss(ctx); err != nil || got == nil || *got != *want {
		t.Errorf("after a second loss: %+v, %v; want %+v", got, err, want)
	}
	// A record without a time (the old code wrote one when the marker
	// was another process's) reads as an unknown time, not 1970.
	st.Client().Del(ctx, st.Keys().DataLoss())
	st.Client().HSet(ctx, st.Keys().DataLoss(), "restored", 3, "lost", 0)
	if got, err := st.LastDataLoss(ctx); err != nil || got == nil || !got.At.IsZero() || got.Restored != 3 {
		t.Errorf("a record without a time: %+v, %v; want a zero At", got, err)
	}
}

// With NoCreate, Open writes nothing: on an empty Redis it reports no
// deployment; on a deployment it checks the shard count.
func TestOpenNoCreate(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "ro", NoCreate: true}
	ro := open(t, cfg)
	if ro.Deployed() || ro.Fresh() {
		t.Errorf("NoCreate on an empty Redis: Deployed %v, Fresh %v", ro.Deployed(), ro.Fresh())
	}
	if keys, err := ro.Client().Keys(t.Context(), "*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("NoCreate wrote %q (%v)", keys, err)
	}
	// A shard count alone is no deployment (it was one, and status
	// showed an empty one); with an item in a shard it is one, from
	// before the marker or after part of its data was lost.
	rdb := ro.Client()
	rdb.Set(t.Context(), ro.Keys().ShardCount(), ro.Keys().Shards(), 0)
	if ro := open(t, cfg); ro.Deployed() {
		t.Error("NoCreate on a Redis with only the shard count: Deployed")
	}
	rdb.ZAdd(t.Context(), ro.Keys().Due(1), redis.Z{Member: "a"})
	if ro := open(t, cfg); !ro.Deployed() {
		t.Error("NoCreate on a shard count and an item: not Deployed")
	}
	if ok, err := ro.ReadDeployed(t.Context()); !ok || err != nil {
		t.Errorf("ReadDeployed on a shard count and an item = %v, %v", ok, err)
	}
	rdb.Del(t.Context(), ro.Keys().ShardCount(), ro.Keys().Due(1))
	cfg.NoCreate = false
	if rw := open(t, cfg); !rw.Deployed() || !rw.Fresh() {
		t.Errorf("Open on an empty Redis: Deployed %v, Fresh %v", rw.Deployed(), rw.Fresh())
	}
	cfg.NoCreate = true
	if ro := open(t, cfg); !ro.Deployed() || ro.Fresh() || ro.DeploymentAge() > time.Minute {
		t.Errorf("NoCreate on a deployment: Deployed %v, Fresh %v, age %v", ro.Deployed(), ro.Fresh(), ro.DeploymentAge())
	}
	cfg.Shards = 8
	if _, err := store.Open(t.Context(), cfg); !errors.Is(err, store.ErrShardsMismatch) {
		t.Errorf("NoCreate with another shard count = %v, want ErrShardsMismatch", err)
	}
}

// require_persistence refuses a Redis without AOF and takes one with it.
func TestRequirePersistence(t *testing.T) {
	plain := redistest.Start(t, nil)
	_, err := store.Open(t.Context(), store.Config{Addrs: []string{plain.Addr()}, RequirePersistence: true})
	if !errors.Is(err, store.ErrNoPersistence) {
		t.Errorf("Open without AOF = %v, want ErrNoPersistence", err)
	}
	aof := redistest.Start(t, &redistest.Options{AOF: true})
	open(t, store.Config{Addrs: []string{aof.Addr()}, RequirePersistence: true})
}
