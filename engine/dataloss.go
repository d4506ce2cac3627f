package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/syncd/syncd/store"
)

// deployWatch notices that Redis lost the deployment's data: its marker
// (store.Deployment) is gone, or is another one than the engine saw
// before. Then the engine restores the item set from Config.Restore,
// logs one error saying how many items came back and how many were lost
// (items in no source: added by hand), counts it, and records it for
// `syncd status`. Claims wait one ttl meanwhile (ownership holds every
// shard off), so no lease from before the loss overlaps a new one.
type deployWatch struct {
	id    string // the marker's ID as last seen; "" before the first read
	items int    // the item count as last seen
	beat  int    // ticks since the item count was read
}

// countEvery is how many monitor ticks pass between two item counts.
const countEvery = 8

// checkDeployment runs on the monitor's tick.
func (e *Engine) checkDeployment(ctx context.Context) {
	if e.st == nil {
		return
	}
	w := &e.deploy
	count := -1
	if w.beat%countEvery == 0 {
		if n, _, err := e.st.Count(ctx, 0); err == nil {
			count = n
		}
	}
	w.beat++
	d, err := e.st.Deployment(ctx)
	if err != nil {
		return
	}
	known := w.id
	w.id = d.ID
	if known == "" || known == d.ID {
		// A count stands only if the marker was still there after it:
		// one read just after the loss would report nothing lost (an
		// operator's trial saw items_before=0 for 10 items).
		if count >= 0 {
			w.items = count
		}
		return
	}
	// Not the monitor's read timeout (2 s): the sources may run a
	// command and add a million items.
	rctx, cancel := context.WithTimeout(context.Background(), max(e.cfg.Items.Refresh, time.Minute))
	defer cancel()
	e.restore(rctx, d, w.items)
}

// restore brings the item set back after Redis lost it (see deployWatch).
func (e *Engine) restore(ctx context.Context, d store.Deployment, before int) {
	e.m.DataLosses.Add(1)
	if err := e.st.Restored(ctx); err != nil {
		e.log.Warn().Err(err).Msg("cannot write the shard count back after redis lost its data")
	}
	restored := 0
	var rerr error
	if e.cfg.Items.Source != nil {
		var ids []string
		if ids, rerr = e.cfg.Items.Source(ctx); rerr == nil {
			_, rerr = e.st.Add(ctx, ids...)
			restored = len(ids)
		}
	}
	lost := max(before-restored, 0)
	ev := e.log.Error().Int("restored", restored).Int("lost", lost).Int("items_before", before)
	if rerr != nil {
		ev = ev.AnErr("restore_error", rerr)
	}
	ev.Msg("redis lost its data: the item set was restored from the sources; items in no source (added by hand) are gone; claims wait one ttl")
	owner := e.own.Owner(0)
	// At is when the new marker was written, by Redis's clock: the first
	// process to find the loss, which every process records alike (each
	// wrote its own time, so status showed the last one's).
	at := d.Created
	if at.IsZero() {
		at = time.Now()
	}
	// The first process to record this marker's loss writes At and By and
	// counts it, whoever wrote the marker (an admin command may have).
	rec := store.DataLoss{At: at, Restored: restored, Lost: lost, By: owner.Host + "/" + strconv.Itoa(owner.PID), Marker: d.ID}
	if _, err := e.st.RecordDataLoss(ctx, rec); err != nil {
		e.log.Warn().Err(err).Msg("cannot record the data loss for status")
	}
}
