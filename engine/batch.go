package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// Report is the outcome of a batch run, as seen by this process.
type Report struct {
	// Items is the size of the item set at the end.
	Items int `json:"items"`
	// Synced counts items this process synced in the run.
	Synced int `json:"synced"`
	// SyncedElsewhere counts items other processes synced in the run.
	SyncedElsewhere int `json:"synced_elsewhere"`
	// Failed counts failed attempts by this process (retried later).
	Failed int `json:"failed_attempts"`
	// Quarantined counts items quarantined at the end of the run, by
	// whichever process.
	Quarantined int `json:"quarantined"`
	// Unsynced counts items neither synced nor quarantined when the run
	// stopped early (ctx ended).
	Unsynced int `json:"unsynced"`
	// Lost counts syncs cut off by a lost lease (retried).
	Lost int `json:"lease_lost"`
	// Started and Finished bound the run (local clock); Since is the
	// run's start on Redis's clock (ms), shared by every process of the
	// run.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Since    int64     `json:"since_ms"`
	// SyncP50, SyncP99 and SyncMax are this process's sink durations
	// (JSON: sync_p50_ms and so on, in ms).
	SyncP50 time.Duration `json:"-"`
	SyncP99 time.Duration `json:"-"`
	SyncMax time.Duration `json:"-"`
	// QuarantinedIDs lists up to 100 quarantined items.
	QuarantinedIDs []string `json:"quarantined_ids,omitempty"`
	// WrongShard lists up to 100 copies of items planted by hand in
	// another shard than their id's, which claims quarantine
	// (store.WrongShard): they are not items of the set, so neither
	// Items nor Quarantined counts them, and the real item of each id,
	// in its own shard, is counted as any other. syncd items remove
	// --shard N removes one.
	WrongShard []store.ShardItem `json:"wrong_shard,omitempty"`
	// WrongShardCount counts every such copy: WrongShard lists 100 at
	// most.
	WrongShardCount int `json:"wrong_shard_count,omitempty"`
	// TargetUnavailable is how long this process saw the target's
	// breaker open during the run (JSON: target_unavailable_ms).
	TargetUnavailable time.Duration `json:"-"`
	// GaveUp says why the run ended early because the target stayed
	// unavailable (BatchOptions.MaxUnavailable); empty otherwise.
	GaveUp string `json:"gave_up,omitempty"`
	// Damaged names, by shard, the shards whose keys are damaged: their
	// items were neither synced nor counted (see Engine.Damaged).
	Damaged []string `json:"damaged_shards,omitempty"`
}

// reportJSON is Report on the wire: its durations in ms, named so (an
// operator read nanoseconds from sync_p50).
type reportJSON struct {
	*reportFields
	SyncP50           float64 `json:"sync_p50_ms"`
	SyncP99           float64 `json:"sync_p99_ms"`
	SyncMax           float64 `json:"sync_max_ms"`
	TargetUnavailable float64 `json:"target_unavailable_ms"`
}

type reportFields Report // Report without its methods

// MarshalJSON writes r with its durations in ms.
func (r Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(reportJSON{reportFields: (*reportFields)(&r), SyncP50: ms(r.SyncP50), SyncP99: ms(r.SyncP99),
		SyncMax: ms(r.SyncMax), TargetUnavailable: ms(r.TargetUnavailable)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Report) UnmarshalJSON(b []byte) error {
	w := reportJSON{reportFields: (*reportFields)(r)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	fromMS := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	r.SyncP50, r.SyncP99, r.SyncMax, r.TargetUnavailable = fromMS(w.SyncP50), fromMS(w.SyncP99), fromMS(w.SyncMax), fromMS(w.TargetUnavailable)
	return nil
}

// OK reports whether every item synced, and no shard's keys or items
// are damaged (a planted copy waits for an operator to remove it).
func (r *Report) OK() bool {
	return r.Quarantined == 0 && r.Unsynced == 0 && len(r.Damaged) == 0 && r.WrongShardCount == 0
}

// Progress is a batch run's state, reported after every pass.
type Progress struct {
	Total, Done, Quarantined, Pending int
	SyncedHere                        int
	Elapsed                           time.Duration
}

// BatchOptions tune RunBatch.
type BatchOptions struct {
	// OnProgress, if set, is called every ProgressEvery while the run
	// goes on (less often on a large set: counting takes at most a tenth
	// of the time), from one goroutine.
	OnProgress func(Progress)
	// ProgressEvery defaults to 1s.
	ProgressEvery time.Duration
	// MaxUnavailable ends the run early when the target's breaker has
	// been open that long without a break (the report names the target's
	// last error, and what is left counts as Unsynced). 0: wait for the
	// target for ever.
	MaxUnavailable time.Duration
}

// batchRun is the state of RunBatch.
type batchRun struct {
	mu        sync.Mutex
	synced    map[string]bool
	failed    int
	lost      int
	durations []time.Duration
}

func (b *batchRun) record(id string, what outcomeKind, recorded bool, took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case what == outcomeSynced && recorded:
		b.synced[id] = true
		b.durations = append(b.durations, took)
	case (what == outcomeFailed || what == outcomeQuarantined || what == outcomeStale) && recorded:
		b.failed++
	case what == outcomeLost || what == outcomeSynced || what == outcomeFailed || what == outcomeQuarantined:
		b.lost++
	}
}

// fill completes rep from the final tally t and what this process did.
func (b *batchRun) fill(rep *Report, t tally) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rep.Finished = time.Now()
	rep.Items = t.total
	rep.Synced = len(b.synced)
	rep.SyncedElsewhere = max(t.done-rep.Synced, 0)
	rep.Failed, rep.Lost = b.failed, b.lost
	rep.Quarantined, rep.QuarantinedIDs = t.quarantined, t.quarantinedIDs
	rep.WrongShard, rep.WrongShardCount = t.wrongShard, t.wrongShardN
	rep.Unsynced = t.pending
	for _, err := range t.damaged {
		rep.Damaged = append(rep.Damaged, err.Error())
	}
	slices.Sort(b.durations)
	if n := len(b.durations); n > 0 {
		rep.SyncP50, rep.SyncP99, rep.SyncMax = b.durations[n/2], b.durations[min(n-1, n*99/100)], b.durations[n-1]
	}
}

func (e *Engine) currentBatch() *batchRun {
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	return e.batch
}

// RunBatch syncs every item of the set once, then stops the engine and
// reports. An item counts once its lastSync is after the run started, by
// whichever process synced it: several processes running RunBatch on the
// same set share the run (its start is kept in Redis), split the work,
// never sync an item twice without a fault, and finish together. Failed
// items are retried with backoff up to MaxAttempts and then quarantined.
// If ctx ends first, the run stops early (in-flight syncs are handed
// back) and the report counts what is left as Unsynced. A claim that
// Redis refuses to this process's user (store.IsPermission) ends the run
// with that refusal, a *store.PermissionError, and no report: no retry
// within the run can pass it.
func (e *Engine) RunBatch(ctx context.Context, opt BatchOptions) (*Report, error) {
	if err := e.begin(); err != nil {
		return nil, err
	}
	defer e.Stop(context.Background())
	rep := &Report{Started: time.Now()}
	keep := max(10*e.own.Config().TTL, time.Minute)
	since, err := e.st.JoinBatch(ctx, keep)
	if err != nil {
		return nil, err
	}
	rep.Since = since
	if err := e.syncClock(ctx); err != nil {
		return nil, err
	}
	b := &batchRun{synced: map[string]bool{}}
	e.batchMu.Lock()
	e.batch = b
	e.batchMu.Unlock()
	src := &pendingSource{e: e, since: since, keep: keep, started: rep.Started,
		cursor: make([]int, e.st.Keys().Shards())}
	e.log.Info().Int64("since_ms", since).Msg("batch run started")
	// The syncd_items gauges during the run, as a daemon keeps them:
	// counted once before the first claim, then every CountInterval.
	e.countOnce()
	e.startWatch()
	e.bg.Go(func() { e.countLoop(e.watchStop, e.cfg.CountInterval) })
	e.looping.Store(true)
	go e.runLoops(src)
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if opt.OnProgress != nil {
			src.report(opt.OnProgress, max(opt.ProgressEvery, 0), e.done)
		}
	}()
	gaveUp := e.waitBatch(ctx, opt.MaxUnavailable)
	e.Stop(context.Background())
	<-progressDone
	if err := e.refusals.end(); err != nil {
		return nil, err // an ACL refusal: no retry within the run can pass it
	}

	// The final tally, from Redis: what every process of the run did.
	tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := src.tally(tctx)
	if err != nil {
		return nil, err
	}
	if t.pending == 0 {
		e.st.EndBatch(tctx, since)
	}
	b.fill(rep, t)
	_, down := e.tgt.downtime()
	rep.TargetUnavailable = down.Round(time.Millisecond)
	if gaveUp > 0 {
		rep.GaveUp = fmt.Sprintf("the target was unavailable for %v (batch --max-unavailable)", gaveUp.Round(time.Second))
		if ts, err := e.st.TargetState(tctx); err == nil && ts.Reason != "" {
			rep.GaveUp += "; its last error: " + ts.Reason
		}
	}
	e.log.Info().Int("items", rep.Items).Int("synced", rep.Synced).Int("synced_elsewhere", rep.SyncedElsewhere).
		Int("quarantined", rep.Quarantined).Int("unsynced", rep.Unsynced).Float64("took_ms", ms(rep.Finished.Sub(rep.Started))).
		Msg("batch run finished")
	return rep, nil
}

// waitBatch waits for the run to end, ctx to end, or the target to have
// been unavailable for longer than max (0: no limit); it returns how
// long the target had been unavailable when it gave up, else 0.
func (e *Engine) waitBatch(ctx context.Context, max time.Duration) time.Duration {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-e.done:
			return 0
		case <-tick.C:
			if d, _ := e.tgt.downtime(); max > 0 && d > max {
				e.log.Error().Int64("unavailable_ms", d.Milliseconds()).Msg("batch run ends early: the target stayed unavailable past max-unavailable")
				return d
			}
		}
	}
}

// pendingSource walks each shard's items that the run still has to sync,
// in due order, with a cursor per shard; a full pass that finds nothing
// pending ends the run.
type pendingSource struct {
	e       *Engine
	since   int64
	keep    time.Duration
	started time.Time

	shard    int   // shard being walked
	cursor   []int // next offset per shard, -1 when the pass is through it
	passSeen int   // pending items seen in this pass
	done     bool
	lastKeep time.Time
}

const pendingPage = 256

func (s *pendingSource) finished() bool { return s.done || s.e.refusals.end() != nil }

func (s *pendingSource) refusalEnds() bool { return true }

// requests claims the next page of items the run still has to sync (at
// most n of one shard).
func (s *pendingSource) requests(ctx context.Context, n int) ([]claimReq, error) {
	shard, ids, err := s.next(ctx, n)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return []claimReq{{shard: shard, ids: ids}}, nil
}

// claim claims the items for the run, one per worker.
func (s *pendingSource) claim(ctx context.Context, req claimReq, workers []int) ([]*ownership.Lease, error) {
	return s.e.own.ClaimBatch(ctx, ownership.ClaimBatchParams{Shard: req.shard, IDs: req.ids, Workers: workers, Since: s.since})
}

func (s *pendingSource) next(ctx context.Context, n int) (int, []string, error) {
	if time.Since(s.lastKeep) > s.keep/4 {
		if _, err := s.e.st.JoinBatch(ctx, s.keep); err != nil {
			return 0, nil, err
		}
		s.lastKeep = time.Now()
	}
	shards := len(s.cursor)
	for visited := 0; visited <= shards; visited++ {
		if s.cursor[s.shard] >= 0 && s.e.held(s.shard) {
			s.passSeen++ // still to do: the pass cannot end the run
			s.cursor[s.shard] = -1
		}
		if skip, _ := s.e.damage.check(s.shard); skip {
			s.cursor[s.shard] = -1 // damaged: the run ends without it, and says so
		}
		if s.cursor[s.shard] < 0 {
			s.shard++
			if s.shard == shards {
				if end, err := s.endPass(ctx); end || err != nil {
					return 0, nil, err
				}
				return 0, nil, nil // the pass found work: rest a poll, then go again
			}
			continue
		}
		p, err := s.e.st.Pending(ctx, s.shard, s.since, s.cursor[s.shard], pendingPage)
		if errors.Is(err, store.ErrDamaged) {
			s.e.damage.mark(s.shard, err)
			s.cursor[s.shard] = -1
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		s.e.damage.clear(s.shard)
		s.cursor[s.shard] = p.Next
		s.passSeen += len(p.IDs)
		if len(p.IDs) > 0 {
			// Claim at most n; the rest are picked up on the next pass.
			return s.shard, p.IDs[:min(n, len(p.IDs))], nil
		}
	}
	return 0, nil, nil
}

// endPass starts a new pass; it reports true (and ends the run) when the
// pass found nothing left and nothing of ours is in flight.
func (s *pendingSource) endPass(ctx context.Context) (bool, error) {
	seen := s.passSeen
	s.shard, s.passSeen = 0, 0
	for i := range s.cursor {
		s.cursor[i] = 0
	}
	if seen == 0 && s.e.m.InFlight.Load() == 0 {
		s.done = true
		return true, nil
	}
	return false, nil
}

// report calls f with the run's progress until stop closes. Counting
// walks the whole set, so on a large set it runs less often: at most a
// tenth of the time goes to counting.
func (s *pendingSource) report(f func(Progress), every time.Duration, stop <-chan struct{}) {
	if every == 0 {
		every = time.Second
	}
	wait := every
	for {
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		t, err := s.tally(ctx)
		cancel()
		wait = max(every, 10*time.Since(start))
		if err != nil {
			continue
		}
		f(Progress{Total: t.total, Done: t.done, Quarantined: t.quarantined, Pending: t.pending,
			SyncedHere: s.syncedHere(), Elapsed: time.Since(s.started)})
	}
}

func (s *pendingSource) syncedHere() int {
	b := s.e.currentBatch()
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.synced)
}

type tally struct {
	total, done, quarantined, pending int
	quarantinedIDs                    []string
	wrongShard                        []store.ShardItem // planted copies, in no count; 100 at most
	wrongShardN                       int               // all of them
	damaged                           []error           // shards not counted: their keys are damaged
}

// tally counts the whole set: done (lastSync after the run started),
// quarantined and pending. A shard whose keys are damaged is left out
// of every count and named in t.damaged. A quarantined copy planted in
// another shard than its id's is in no count but t.wrongShard: listed
// among the quarantined items, its id read as the real item's, which
// syncs on in its own shard.
func (s *pendingSource) tally(ctx context.Context) (tally, error) {
	var t tally
	for sh := range len(s.cursor) {
		for off := 0; off >= 0; {
			p, err := s.e.st.Pending(ctx, sh, s.since, off, 1000)
			if errors.Is(err, store.ErrDamaged) {
				t.damaged = append(t.damaged, err)
				if n, err := s.e.st.ShardSize(ctx, sh); err == nil {
					t.total -= n // Count below counts them; nothing else can
				}
				break
			}
			if err != nil {
				return t, err
			}
			t.pending += len(p.IDs)
			t.quarantined += p.Quarantined
			off = p.Next
		}
	}
	total, _, err := s.e.st.Count(ctx, 0)
	if err != nil && !errors.Is(err, store.ErrDamaged) {
		return t, err
	}
	q, err := s.e.st.Quarantined(ctx, 100)
	if err != nil && !errors.Is(err, store.ErrDamaged) {
		return t, err
	}
	// The copies are quarantined, and counted so by Pending: all of
	// them come off the counts, not only the 100 listed.
	t.total, t.quarantinedIDs, t.wrongShard, t.wrongShardN = t.total+total-q.WrongN, q.Own, q.Wrong, q.WrongN
	t.quarantined = max(t.quarantined-q.WrongN, 0)
	t.done = t.total - t.pending - t.quarantined
	return t, nil
}
