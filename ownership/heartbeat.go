package ownership

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// extendFunc extends leases in as few round trips as it can and reports,
// per lease: nil (extended as of sent), a *LeaseLostError (gone or taken),
// or another error (outcome unknown; Redis may be unreachable).
type extendFunc func(ctx context.Context, leases []*Lease) []error

// heartbeater renews every lease it tracks once per interval, in one
// batch, so a process with a thousand leases makes one round trip (per
// server and slot group), not a thousand.
type heartbeater struct {
	every  time.Duration
	extend extendFunc
	log    zerolog.Logger
	onBeat func(n int, err error) // for stats; may be nil
	onLeft func(time.Duration)    // Config.ObserveHeartbeat; may be nil

	mu     sync.Mutex
	leases map[*Lease]struct{}
	stop   chan struct{}
	done   chan struct{}
}

func newHeartbeater(every time.Duration, extend extendFunc, log zerolog.Logger) *heartbeater {
	h := &heartbeater{every: every, extend: extend, log: log, leases: map[*Lease]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go h.run()
	return h
}

func (h *heartbeater) add(l *Lease) {
	h.mu.Lock()
	h.leases[l] = struct{}{}
	h.mu.Unlock()
}

func (h *heartbeater) remove(l *Lease) {
	h.mu.Lock()
	delete(h.leases, l)
	h.mu.Unlock()
}

func (h *heartbeater) snapshot() []*Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Lease, 0, len(h.leases))
	for l := range h.leases {
		out = append(out, l)
	}
	return out
}

// close stops the loop and returns the leases still tracked.
func (h *heartbeater) close() []*Lease {
	close(h.stop)
	<-h.done
	return h.snapshot()
}

func (h *heartbeater) run() {
	defer close(h.done)
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.beat()
		}
	}
}

// beat extends every live lease once. The call is bounded by the
// interval, so a hung Redis cannot stall the cadence; leases whose window
// closes meanwhile are lost by their own timers. A lease whose window
// closed already is not extended, in Redis either, though its timer has
// not run yet (a process resumed after a pause runs both at once): its
// timer ends it (see extended).
func (h *heartbeater) beat() {
	leases := h.snapshot()
	live := leases[:0]
	for _, l := range leases {
		switch {
		case l.ctx.Err() != nil, l.inRelease():
			h.remove(l)
		case l.trusted():
			live = append(live, l)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.every)
	defer cancel()
	sent := time.Now()
	errs := h.extend(ctx, live)
	failed := 0
	var firstErr error
	for i, l := range live {
		switch err := errs[i].(type) {
		case nil:
			if h.onLeft != nil {
				h.onLeft(time.Until(l.Expiry()))
			}
			l.extended(sent)
		case *LeaseLostError:
			if l.beatLost(err.Reason, err.Err) {
				h.log.Warn().Str(keyID, l.id).Uint64(keyFence, l.fence).Str(keyReason, string(err.Reason)).Msg("lease lost")
			}
			h.remove(l)
		default:
			failed++
			if firstErr == nil {
				firstErr = err
			}
			l.noteErr(err)
		}
	}
	if failed > 0 {
		h.log.Warn().Err(firstErr).Int("leases", failed).Msg("heartbeat failed")
	}
	if h.onBeat != nil {
		h.onBeat(len(live), firstErr)
	}
}

// Log field keys.
const (
	keyID     = "id"
	keyFence  = "fence"
	keyReason = "reason"
	keyShard  = "shard"
)
