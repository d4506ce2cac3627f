package store_test

import (
	"errors"
	"testing"
	"time"

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
	loss := store.DataLoss{At: time.UnixMilli(time.Now().UnixMilli()), Restored: 30, Lost: 2, By: "h/1/r"}
	first.RecordDataLoss(t.Context(), loss, true)
	first.RecordDataLoss(t.Context(), loss, true)
	got, err := first.LastDataLoss(t.Context())
	if err != nil || got == nil || got.Count != 2 || got.Restored != 30 || got.Lost != 2 || !got.At.Equal(loss.At) {
		t.Errorf("LastDataLoss = %+v, %v", got, err)
	}
	// Another process's record of the same loss: its counts, not its
	// time and name.
	first.RecordDataLoss(t.Context(), store.DataLoss{At: loss.At.Add(time.Second), Restored: 31, Lost: 1, By: "h/2/r"}, false)
	if got, err := first.LastDataLoss(t.Context()); err != nil || got == nil || got.Restored != 31 || got.By != "h/1/r" || !got.At.Equal(loss.At) || got.Count != 2 {
		t.Errorf("after another process's record: %+v, %v", got, err)
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
