package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// exerciseOpts says what exercise may do beyond the basics.
type exerciseOpts struct {
	// Replicas > 0: the server has that many replicas, so claims with
	// MinReplicas (WAIT) are exercised too.
	Replicas int
	// Admin, if set, is a client with every permission on the same
	// server; exercise uses it to flush the script cache, so that the
	// NOSCRIPT fallbacks (EVAL, SCRIPT LOAD) run as well.
	Admin *redis.Client
}

// exercise runs every operation syncd does against Redis, in process,
// through the store, ownership and engine packages: opening the store
// (INFO, the shard count, SCRIPT LOAD), adding items, the daemon loop
// (claims with the epoch marker and its hold-off, settle and confirm,
// heartbeats, releases of synced, failed and quarantined items, the
// backlog gauges), a batch run, the admin operations (list, count,
// requeue, force release, remove), claims acknowledged by replicas, the
// standalone Locker (with its watchdog and blocking Lock), and the
// fallbacks after Redis lost its script cache. It returns the first
// error, naming the step, with the first error or warning the engine
// logged (an ACL refusal of a claim is logged at error).
func exercise(ctx context.Context, cfg store.Config, opt exerciseOpts) (err error) {
	var logs logBuffer
	cfg.Logger = logs.logger(zerolog.WarnLevel)
	defer func() {
		if err != nil {
			// A refusal's line first, where there is one: another error
			// (the poison item's quarantine) may come before it.
			w := append(logs.lines("NOPERM"), logs.lines("can't run this command")...)
			w = append(w, logs.lines(`"level":"error"`)...)
			if w = append(w, logs.lines(`"level":"warn"`)...); len(w) > 0 {
				err = fmt.Errorf("%w\nfirst error or warning: %s", err, w[0])
			}
		}
	}()
	step := func(name string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		return step("open", err)
	}
	defer st.Close()
	ids := []string{"a", "b", "c:{x}", "d e", "poison", "gone"}
	if _, err := st.Add(ctx, ids...); err != nil {
		return step("add", err)
	}

	// The daemon loop.
	// Short enough to see heartbeats and the watchdog at work, long
	// enough for a busy machine.
	ttl := time.Second
	own := ownership.Config{TTL: ttl, Settle: 20 * time.Millisecond, Logger: cfg.Logger}
	var mu sync.Mutex
	synced := map[string]bool{}
	sink := sinks.Func(func(ctx context.Context, it sinks.Item) error {
		if it.ID == "poison" {
			return sinks.Permanent(errors.New("poison"))
		}
		// Long enough for a heartbeat (every ttl/3).
		select {
		case <-time.After(ttl / 2):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		mu.Lock()
		synced[it.ID] = true
		mu.Unlock()
		return nil
	})
	ecfg := engine.Config{Workers: 8, Interval: time.Hour, Poll: 10 * time.Millisecond, MaxAttempts: 1,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, Ownership: own, Logger: cfg.Logger}
	e, err := engine.New(st, sink, ecfg)
	if err != nil {
		return step("engine", err)
	}
	if err := e.Start(ctx); err != nil {
		return step("engine start", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(synced)
		mu.Unlock()
		if n == len(ids)-1 && e.Metrics().Quarantined.Load() == 1 && e.Metrics().DueBacklog.Load() == 0 {
			break
		}
		// A store error (a refused command, say) will not go away; a
		// timeout on a loaded machine may.
		if time.Now().After(deadline) || len(refused(logs.lines(`"error":"store:`))) > 0 {
			e.Stop(ctx)
			return step("engine", fmt.Errorf("%d of %d items synced, %d quarantined", n, len(ids)-1, e.Metrics().Quarantined.Load()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.Stop(ctx); err != nil {
		return step("engine stop", err)
	}

	// Admin operations, as syncd status, items, requeue and release do.
	if _, err := st.Now(ctx); err != nil {
		return step("now", err)
	}
	for sh := range st.Keys().Shards() {
		if _, _, err := st.List(ctx, sh, 0, 100); err != nil {
			return step("list", err)
		}
	}
	if n, q, err := st.Count(ctx, 10); err != nil || n != len(ids) || len(q) != 1 {
		return step("count", fmt.Errorf("%d items, quarantined %v, %v", n, q, err))
	}
	// The API's reads, as /api/v1 and syncd status do.
	if c, err := st.Counts(ctx); err != nil || c.Items != int64(len(ids)) || c.Quarantined != 1 {
		return step("counts", fmt.Errorf("%+v, %v", c, err))
	}
	if p, err := st.ListPage(ctx, store.ListQuery{State: store.ItemQuarantined}); err != nil || len(p.Items) != 1 {
		return step("list page", fmt.Errorf("%+v, %v", p, err))
	}
	if d, err := st.Item(ctx, "poison"); err != nil || len(d.Errors) != 1 {
		return step("item", fmt.Errorf("%+v, %v", d, err))
	}
	if err := st.WriteDaemon(ctx, store.DaemonInfo{ID: "h:1", Host: "h", PID: 1, Workers: 1}, time.Minute); err != nil {
		return step("write daemon", err)
	}
	if ds, _, err := st.Daemons(ctx); err != nil || len(ds) != 1 || ds[0].Problem != "" {
		return step("daemons", fmt.Errorf("%+v, %v", ds, err))
	}
	if n, err := st.Requeue(ctx, "poison"); err != nil || n != 1 {
		return step("requeue", fmt.Errorf("%d, %v", n, err))
	}
	if _, _, err := st.ForceRelease(ctx, "a"); err != nil {
		return step("force release", err)
	}
	if n, err := st.Remove(ctx, "gone", "poison"); err != nil || n != 2 {
		return step("remove", fmt.Errorf("%d, %v", n, err))
	}
	if _, err := st.Servers(ctx); err != nil {
		return step("servers", err)
	}
	// The scheduler's and the monitor's reads (the monitor does not log
	// its errors: the gauges just stop moving).
	if _, _, err := st.Backlog(ctx); err != nil {
		return step("backlog", err)
	}
	if _, err := st.Oldest(ctx); err != nil {
		return step("oldest", err)
	}
	// The target: admission with every limit, the breaker, permits.
	adm, err := st.TargetAdmit(ctx, store.AdmitParams{N: 2, Breaker: true, ProbeEvery: time.Second, MaxInFlight: 4,
		TTL: time.Second, Base: "x", Every: time.Millisecond, Burst: 10})
	if err != nil || adm.Granted != 2 {
		return step("target admit", fmt.Errorf("%+v, %v", adm, err))
	}
	if _, err := st.TargetExtend(ctx, adm.Permits, time.Second); err != nil {
		return step("target extend", err)
	}
	if err := st.TargetRelease(ctx, adm.Permits...); err != nil {
		return step("target release", err)
	}
	for _, id := range []string{"x1", "x2"} {
		if _, err := st.TargetReport(ctx, store.ReportParams{Outcome: store.TargetItem, ID: id, Failures: 2, Window: time.Second}); err != nil {
			return step("target report", err)
		}
	}
	if _, err := st.TargetReport(ctx, store.ReportParams{Outcome: store.TargetOK}); err != nil {
		return step("target report ok", err)
	}
	if _, err := st.TargetState(ctx); err != nil {
		return step("target state", err)
	}
	// The item set's sources: items added by hand, a reconcile, the
	// deployment's marker and the record of a data loss.
	if _, err := st.AddByHand(ctx, "by-hand"); err != nil {
		return step("add by hand", err)
	}
	if _, err := st.Manual(ctx, st.Keys().Shard("by-hand")); err != nil {
		return step("manual", err)
	}
	if _, err := st.Members(ctx, 0); err != nil {
		return step("members", err)
	}
	if _, err := st.Reconcile(ctx, 0, 1, true, []string{"rec"}); err != nil {
		return step("reconcile add", err)
	}
	if _, err := st.Reconcile(ctx, 0, 1, false, []string{"rec", "by-hand"}); err != nil {
		return step("reconcile remove", err)
	}
	if _, err := st.Remove(ctx, "by-hand"); err != nil {
		return step("remove by hand", err)
	}
	if _, err := st.Deployment(ctx); err != nil {
		return step("deployment", err)
	}
	if _, err := st.RecordDataLoss(ctx, store.DataLoss{At: time.Now(), Marker: "m"}); err != nil {
		return step("record data loss", err)
	}
	if _, err := st.LastDataLoss(ctx); err != nil {
		return step("last data loss", err)
	}

	// What a daemon reads after a claim reply was lost.
	if _, err := st.ClaimReceipt(ctx, 0, store.NewToken()); err != nil {
		return step("claim receipt", err)
	}

	// Redis lost its script cache (a restart or failover): EVALSHA gets
	// NOSCRIPT, the store falls back to EVAL and loads the scripts again.
	if opt.Admin != nil {
		if err := opt.Admin.ScriptFlush(ctx).Err(); err != nil {
			return step("admin script flush", err)
		}
	}

	// A batch run over what is left.
	e, err = engine.New(st, sinks.Func(func(context.Context, sinks.Item) error { return nil }), ecfg)
	if err != nil {
		return step("batch engine", err)
	}
	// Join the run first: RunBatch hangs when its own join fails (see
	// TestBatchJoinFailureReturns), and joining twice is what several
	// processes do anyway.
	if _, err := st.JoinBatch(ctx, time.Minute); err != nil {
		e.Stop(ctx)
		return step("join batch", err)
	}
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	rep, err := e.RunBatch(bctx, engine.BatchOptions{})
	cancel()
	if err != nil || !rep.OK() || rep.Items != len(ids)-2 {
		return step("batch", fmt.Errorf("report %+v, %v", rep, err))
	}

	// Two owners claim one item: the second finds it taken.
	{
		m1, err := ownership.New(st, own)
		if err != nil {
			return step("manager", err)
		}
		defer m1.Close()
		m2, err := ownership.New(st, own)
		if err != nil {
			return step("manager", err)
		}
		defer m2.Close()
		sh := st.Keys().Shard("c:{x}")
		won, err := m1.ClaimIDs(ctx, ownership.ClaimIDsParams{Shard: sh, IDs: []string{"c:{x}"}})
		if err != nil || len(won) != 1 {
			return step("claim", fmt.Errorf("%d leases, %v", len(won), err))
		}
		lost, err := m2.ClaimIDs(ctx, ownership.ClaimIDsParams{Shard: sh, IDs: []string{"c:{x}"}})
		if err != nil || len(lost) != 0 {
			return step("claim taken", fmt.Errorf("%d leases, %v", len(lost), err))
		}
		res := m1.Release(ctx, won, []ownership.Outcome{{Kind: store.ReleaseFailed, Delay: time.Hour, Err: errors.New("boom")}})
		if !res[0].Recorded {
			return step("release failed", fmt.Errorf("%+v", res[0]))
		}
	}

	// Claims counted only once replicas have them.
	if opt.Replicas > 0 {
		if opt.Admin != nil {
			opt.Admin.ScriptFlush(ctx)
		}
		// A ttl long enough for a replica on a busy machine to answer.
		rc := ownership.Config{TTL: 10 * time.Second, MinReplicas: opt.Replicas, ReplicaTimeout: 3 * time.Second, Logger: cfg.Logger}
		m, err := ownership.New(st, rc)
		if err != nil {
			return step("wait manager", err)
		}
		sh := st.Keys().Shard("b")
		leases, err := m.ClaimIDs(ctx, ownership.ClaimIDsParams{Shard: sh, IDs: []string{"b"}})
		if err == nil && len(leases) != 1 {
			err = fmt.Errorf("%d leases", len(leases))
		}
		if err != nil {
			m.Close()
			return step("claim with min_replicas", err)
		}
		res := m.Release(ctx, leases, []ownership.Outcome{{Kind: store.ReleaseSynced, Delay: time.Hour}})
		m.Close()
		if !res[0].Recorded {
			return step("release with min_replicas", fmt.Errorf("%+v", res[0]))
		}
	}

	// The standalone lock: TryLock, a watchdog renewal, Unlock, Lock.
	if opt.Admin != nil {
		opt.Admin.ScriptFlush(ctx)
	}
	lk, err := ownership.NewLocker(ownership.LockerConfig{Config: ownership.Config{TTL: ttl, Logger: cfg.Logger}}, st)
	if err != nil {
		return step("locker", err)
	}
	defer lk.Close()
	l, err := lk.TryLock(ctx, "job:{1}")
	if err != nil {
		return step("trylock", err)
	}
	time.Sleep(ttl) // past the trust window: only renewals keep it
	if err := l.Err(); err != nil {
		return step("lock watchdog", err)
	}
	// Another owner finds it held (and learns for how long).
	lk2, err := ownership.NewLocker(ownership.LockerConfig{Config: ownership.Config{TTL: ttl, Logger: cfg.Logger}}, st)
	if err != nil {
		return step("locker", err)
	}
	_, err = lk2.TryLock(ctx, "job:{1}")
	lk2.Close()
	if !errors.Is(err, ownership.ErrNotObtained) {
		return step("trylock held", fmt.Errorf("got %v, want ErrNotObtained", err))
	}
	if code, err := l.Unlock(ctx); err != nil || code != store.Released {
		return step("unlock", fmt.Errorf("%v, %v", code, err))
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, err = lk.Lock(lctx, "job:{1}")
	if err != nil {
		return step("lock", err)
	}
	if code, err := l.Unlock(ctx); err != nil || code != store.Released {
		return step("unlock", fmt.Errorf("%v, %v", code, err))
	}
	if w := logs.lines("NOPERM"); len(w) > 0 {
		return step("logs", errors.New(strings.Join(w, "\n")))
	}
	return nil
}

// refused keeps the log lines of store errors that are not timeouts: a
// heartbeat that timed out under the whole suite is no refused command.
func refused(lines []string) []string {
	return slices.DeleteFunc(lines, func(l string) bool {
		return strings.Contains(l, "context deadline exceeded") || strings.Contains(l, "i/o timeout")
	})
}
