package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/syncd/syncd/store"
)

// History defaults: a sample every HistoryEvery, HistoryKeep of them.
const (
	HistoryEvery = 2 * time.Second
	HistoryKeep  = 10 * time.Minute
)

// Sample is one point of the summary's history.
type Sample struct {
	TMs      int64 `json:"t_ms"` // Redis's clock
	Due      int64 `json:"due"`
	InFlight int64 `json:"in_flight"`
	// SyncsOK and SyncsFailed count this process's syncs since the
	// sample before.
	SyncsOK     int64 `json:"syncs_ok"`
	SyncsFailed int64 `json:"syncs_failed"`
}

// History samples the backlog and throughput for the summary's chart:
// one sample every HistoryEvery, the last HistoryKeep kept in memory.
type History struct {
	st    *store.Store
	syncs func() (ok, failed int64)
	every time.Duration
	keep  int

	mu         sync.Mutex
	samples    []Sample
	ok, failed int64 // the counters at the last sample
}

// NewHistory returns a sampler over st; syncs, when not nil, returns the
// process's running totals of syncs that succeeded and failed. Run it
// with Run.
func NewHistory(st *store.Store, syncs func() (ok, failed int64)) *History {
	return &History{st: st, syncs: syncs, every: HistoryEvery, keep: int(HistoryKeep / HistoryEvery)}
}

// Run samples until ctx ends; a sample Redis could not give is skipped.
func (h *History) Run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		h.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *History) sample(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, h.every)
	defer cancel()
	c, err := h.st.Counts(rctx)
	if err != nil && !errors.Is(err, store.ErrDamaged) {
		return
	}
	var ok, failed int64
	if h.syncs != nil {
		ok, failed = h.syncs()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Sample{TMs: c.Now, Due: c.Due, InFlight: c.InFlight, SyncsOK: max(ok-h.ok, 0), SyncsFailed: max(failed-h.failed, 0)}
	if len(h.samples) == 0 {
		s.SyncsOK, s.SyncsFailed = 0, 0 // no interval before the first
	}
	h.ok, h.failed = ok, failed
	if len(h.samples) == h.keep {
		h.samples = append(h.samples[:0], h.samples[1:]...)
	}
	h.samples = append(h.samples, s)
}

// Samples returns the samples, oldest first.
func (h *History) Samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample{}, h.samples...)
}
