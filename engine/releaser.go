package engine

import (
	"context"
	"time"

	"github.com/syncd/syncd/ownership"
)

// releaser writes sync outcomes back with group commit: workers hand it
// their lease and outcome and wait; it releases everything that queued
// up meanwhile in one call (one script per shard, shards in parallel).
// With one sync finishing at a time it is a plain release; under load
// the batches grow by themselves, and Redis runs one script for many
// items instead of one per item.
type releaser struct {
	own     claimer
	timeout time.Duration
	ch      chan releaseReq
	done    chan struct{}
}

type releaseReq struct {
	lease *ownership.Lease
	out   ownership.Outcome
	res   chan ownership.ReleaseResult
}

const maxReleaseBatch = 256

func newReleaser(own claimer, timeout time.Duration) *releaser {
	r := &releaser{own: own, timeout: timeout, ch: make(chan releaseReq, maxReleaseBatch), done: make(chan struct{})}
	go r.run()
	return r
}

// release blocks until the outcome of l is written (or failed).
func (r *releaser) release(l *ownership.Lease, out ownership.Outcome) ownership.ReleaseResult {
	res := make(chan ownership.ReleaseResult, 1)
	r.ch <- releaseReq{lease: l, out: out, res: res}
	return <-res
}

// close stops the releaser once every worker has returned.
func (r *releaser) close() {
	close(r.ch)
	<-r.done
}

func (r *releaser) run() {
	defer close(r.done)
	batch := make([]releaseReq, 0, maxReleaseBatch)
	for req := range r.ch {
		batch = append(batch[:0], req)
	more:
		for len(batch) < maxReleaseBatch {
			select {
			case x, ok := <-r.ch:
				if !ok {
					break more
				}
				batch = append(batch, x)
			default:
				break more
			}
		}
		leases := make([]*ownership.Lease, len(batch))
		outs := make([]ownership.Outcome, len(batch))
		for i, q := range batch {
			leases[i], outs[i] = q.lease, q.out
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		results := r.own.Release(ctx, leases, outs)
		cancel()
		for i, q := range batch {
			q.res <- results[i]
		}
	}
}
