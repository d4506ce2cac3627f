package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/syncd/syncd/store"
)

// registryEvery is how often the monitor writes this daemon's entry in
// the store's daemon registry; the entry expires after three periods.
const registryEvery = 2 * time.Second

// daemonID is this process's ID in the registry: "host:pid".
func (e *Engine) daemonID() string {
	o := e.own.Owner(0)
	return o.Host + ":" + strconv.Itoa(o.PID)
}

// register writes this daemon's entry: its owner, version, workers and
// the items it syncs now. It does nothing over a fake store. A failed
// write is logged at debug level: the registry is for operators' views,
// and the monitor already says when Redis cannot be read.
func (e *Engine) register(ctx context.Context, draining bool) {
	if e.st == nil {
		return
	}
	o := e.own.Owner(0)
	info := store.DaemonInfo{ID: e.daemonID(), Host: o.Host, PID: o.PID, Run: o.Run, Version: e.cfg.Version,
		Started: e.startedAt.UnixMilli(), Workers: e.cfg.Workers, Draining: draining}
	e.mu.Lock()
	info.InFlightCount = len(e.inflight)
	for l := range e.inflight {
		if len(info.InFlight) == store.DaemonInFlightMax {
			break
		}
		info.InFlight = append(info.InFlight, l.ID())
	}
	e.mu.Unlock()
	sent := time.Now()
	err := e.st.WriteDaemon(ctx, info, registryEvery)
	e.health.wrote(err, sent) // /readyz says when it is refused for lack of memory
	if err != nil {
		e.log.Debug().Err(err).Msg("write the daemon registry")
	}
}

// unregister removes this daemon's entry at a clean stop.
func (e *Engine) unregister() {
	if e.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := e.st.RemoveDaemon(ctx, e.daemonID()); err != nil {
		e.log.Debug().Err(err).Msg("remove from the daemon registry")
	}
}
