// Package sinks defines the contract between the syncd engine and the code
// that does the work of syncing an item: the [Sink] interface, the [Item] it
// is handed, and the errors that steer retries ([ErrStaleFence],
// [ErrLeaseEnded], [Permanent], [Unavailable], [RetryAfter]; [Classify]
// reads them).
//
// # The contract
//
// A worker that holds the lease on an item calls
//
//	err := sink.Sync(leaseCtx, item)
//
// leaseCtx lives exactly as long as the lease can be trusted. When the lease
// is lost (a missed heartbeat, a Redis failover, a shutdown) the context is
// cancelled with a cause wrapping ownership.ErrLeaseLost, and Sync must stop
// promptly and return; context.Cause(ctx) tells it why. Sync is called from
// many goroutines at once and must be safe for concurrent use. Close is
// for whoever made the sink to call, once, after the engine's Stop
// returned (then the last Sync has returned); the engine does not close
// it (syncd run and batch do). A Sync that panics is recovered and logged
// with its stack, and counts as a failure of its item (retried, then
// quarantined), as a returned error would.
//
// # Retries and idempotency
//
// The engine classifies what Sync returns:
//
//	nil                          success; LastSync of the item advances
//	wraps ErrStaleFence          the target rejected the fence: the claim is
//	                             stale, the attempt is dropped, no retry
//	wraps ErrLeaseEnded          the sink stopped at the lease's end
//	                             (LeaseExpiry): handed back, not counted
//	Unavailable, RetryAfter      the target failed, not the item: not
//	                             counted against it; the target's breaker
//	                             opens and the item keeps its place
//	IsPermanent(err)             retrying cannot help: quarantine, at its
//	                             second failure when another item
//	                             succeeded between or none failed;
//	                             several distinct items failing so open
//	                             the breaker instead
//	any other error              retried with backoff, quarantined after
//	                             max_attempts; but failures of several
//	                             distinct items with no success between
//	                             them open the breaker too
//
// Delivery is at least once. A sync can be cut off at any point (a crash, a
// lost lease, a network partition after the target applied the write but
// before the reply arrived), and the engine then runs it again, possibly on
// another host, with the same item. Sync must therefore be idempotent:
// writing the same data twice must leave the target as writing it once.
// Item.Attempt and Item.LastSync help with incremental work, but they are
// hints, not a transaction log.
//
// # Fencing
//
// A lease alone cannot guarantee that only one writer touches an item. The
// holder of an expired lease does not know it is expired until it looks: a
// GC pause, a stopped VM or a slow network can hold a write in flight for
// longer than the lease, and that write lands after a new owner has started.
// Martin Kleppmann makes this argument in "How to do distributed locking"
// (2016): no lock service, however careful, can prevent it on its own; only
// the storage that receives the writes can, by checking a fencing token.
//
// syncd issues one: Item.Fence rises strictly with every claim of an item
// while it is below 2^53 (the claim scripts compute in Lua doubles, exact
// up to there; fences come from Redis's clock in microseconds and stay
// below it until the year 2255). An item whose stored fence was planted
// at or past 2^53-1 is quarantined, never given a fence that does not
// rise.
// A target that remembers the highest fence it accepted for an item and
// rejects writes with a lower one never accepts a write from an owner that
// has been superseded. This is the only way to get "never two accepted
// writers"; leases, heartbeats and timeouts only make overlaps rare. A sink
// whose target cannot check fences gets at-least-once delivery with possible
// overlap, and must be idempotent enough to live with it.
//
// [FenceGuard] enforces the rule in memory for sink authors whose target is
// local; for a database the same rule is one conditional write (see the
// FenceGuard documentation). When the target rejects a fence, return an
// error wrapping ErrStaleFence.
//
// # Built-in sinks
//
// Each built-in sink lives in its own subpackage with a Config (whose zero
// value means the documented defaults and which validates itself) and a New
// constructor:
//
//   - [github.com/syncd/syncd/sinks/exec] runs a command per item, with the
//     item in SYNCD_* environment variables and little else of syncd's
//     environment, under a supervisor that stops it even when syncd dies;
//     its exit status says the class of a failure.
//   - [github.com/syncd/syncd/sinks/http] POSTs the item as JSON to a URL and
//     maps the status code to success, stale fence, permanent, target or
//     retryable failure, honouring Retry-After; its errors and logs do not
//     show its credentials.
//   - [github.com/syncd/syncd/sinks/file] appends one JSON line per sync to a
//     file, on its own or as an audit log around another sink.
//   - [github.com/syncd/syncd/sinks/log] logs each sync; with an optional
//     delay and failure rate it is the demo sink.
//
// Package [github.com/syncd/syncd/sinks/sinktest] is the conformance suite
// every sink, built-in or not, should pass.
//
// # What sinks owns, and what it must not touch
//
// The sinks package owns the contract and the errors that steer retries;
// each subpackage (exec, http, file, log) owns one way to reach a target
// and its own Config, defaults and validation. A sink must not touch
// Redis, the lease or the schedule: it is handed an Item and a context
// and returns an error. sinks/sinktest checks any sink against the
// contract.
package sinks
