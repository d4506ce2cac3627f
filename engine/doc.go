// Package engine turns the ownership protocol into a data-sync service:
// it keeps the item set in Redis, claims the longest-waiting due items in
// batches, runs the sink for each under its lease, and writes the outcome
// back.
//
//	          ┌──────────── Redis (per shard {s<k>}) ─────────────┐
//	          │ due ZSET (score = due time)   meta HASH   records │
//	          └───▲──────────────┬──────────────▲───────────▲─────┘
//	 Oldest       │  claim_pick  │   extend.lua │ release.lua
//	 (oldest      │   (batch of  │   (batched   │ (lastSync = Redis TIME,
//	 shard first) │   up to      │   heartbeat) │  backoff, quarantine,
//	              │   free       │              │  hand-back)
//	┌─────────────┴───┐ workers) │   ┌──────────┴───────┐
//	│ scheduler       ├──────────┘   │ ownership.Manager│
//	│ (one goroutine) │──leases──┐   └──────────────────┘
//	└─────────────────┘          ▼
//	                  ┌──────────────────────┐
//	                  │ workers (≤ Workers)  │  sink.Sync(lease ctx, item)
//	                  │ one goroutine a sync │──────────────────────────► sink
//	                  └──────────────────────┘
//
// Scheduling: every round the scheduler waits for a free worker, takes up
// to Batch free workers, reads the oldest due score of every shard (one
// pipelined round trip; skipped with a single shard), and has Redis claim
// that many of the longest-waiting due items of the shard whose head has
// waited longest, going on to the next shard while workers are left (one
// script call per shard: the script picks, claims and returns the items,
// so concurrent claimers never collide on an item). Shards that ownership
// holds off after Redis lost its data (Manager.Held) are skipped until
// the hold ends. So are shards whose keys are damaged (a key of another
// type, store.ErrDamaged): logged once, counted in syncd_shards_damaged,
// named by Engine.Damaged (for /readyz), tried again every few seconds,
// while every other shard goes on; a batch run ends without them and
// names them in its report. The periodic count reports damage too, on a
// shard with no items as well, and holds what it found until a count
// finds it fixed (see damage). A claimed item's score becomes its lease
// expiry, so it leaves the due range and comes back by itself when its
// owner dies: no reaper is needed for correctness.
//
// Outcomes: a sync that returns nil records lastSync (Redis clock) and is
// due again after Interval; an error releases the item with backoff
// (BackoffMin doubling to BackoffMax, jittered); after MaxAttempts, or on
// sinks.Permanent, the item is quarantined until requeued; a lost lease
// cancels the sink's context with an ownership.ErrLeaseLost cause and
// nothing is recorded; a stale fence (sinks.ErrStaleFence) is dropped.
//
// The target (TargetConfig): a failure the sink puts down to the target
// (sinks.Unavailable, sinks.RetryAfter) is handed back uncounted and opens
// a circuit breaker whose state is in Redis, shared by the fleet; so do
// unclassified failures of several distinct items with no success between
// them. While it is open no round claims anything but the fleet's one
// probe per probe interval. A rate limit (GCRA) and max_in_flight
// (permits, leases in Redis) bound what the whole fleet sends. Each round
// asks the target before it claims (one script call, or none without
// limits while the breaker is closed), so no claim waits on a limiter.
//
// Tracing: with Config.TracerProvider set, each claim that won leases or
// failed is a syncd.claim span, and each sync a syncd.sync span of its
// own, linked to its claim and carried in the sink's context, so a sink
// can hand the trace on to the target (sinks/http sends traceparent,
// sinks/exec sets TRACEPARENT). tracing.go lists the attributes. Without
// a provider nothing is traced; the global provider is never used.
//
// Lifecycle: Start runs the scheduler and a monitor (gauges); Stop stops
// claiming, drains in-flight syncs for DrainTimeout, cancels the rest with
// ErrShutdown and hands their claims back so peers resume at once.
// RunBatch syncs every item once, cooperating with other batch processes
// on the same set, and returns a Report.
//
// # Metrics and health
//
// Metrics holds the engine's counters as atomics; Collector exposes them
// to Prometheus, read at scrape time (syncd_syncs_total, syncd_claims_total,
// syncd_in_flight, syncd_due_backlog, syncd_sync_duration_seconds, ...),
// with syncd_build_info, syncd_redis_up, the
// syncd_lease_left_at_heartbeat_seconds histogram (fed by
// ownership.Config.ObserveHeartbeat) and syncd_items{state}: the items
// all, due, in flight, backing off and quarantined, counted per shard
// every CountInterval (store.Counts), never on scrape. Handler serves
// /metrics (with the Go and process collectors, on a registry of its
// own), /healthz and /readyz in one line:
//
//	go http.ListenAndServe(":9090", engine.Handler(e))
//
// Endpoints does the same for a program that starts serving before its
// engine exists (syncd run waits for Redis alive, not ready) and attaches
// it later.
//
// # What engine owns, and what it must not touch
//
// engine owns the service around the protocol: which shard to claim from
// next (longest-waiting first), the worker pool, what a sync's outcome
// means (synced, failed with backoff, quarantined, handed back), when the
// target may be called (breaker, rate, max_in_flight), batch runs and the
// metrics. It reaches ownership through the small claimer
// interface and store through dueIndex, so the scheduler is tested with
// testing/synctest over fakes. It must not touch Redis itself, parse
// config files, or know which sink it runs: a sink is only the
// sinks.Sink interface.
package engine
