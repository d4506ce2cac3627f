// Package ownership is the claim protocol of syncd: how a worker claims
// an item, proves it still owns it, and lets go, plus a standalone lock
// API built on the same parts.
//
// # The life of a claim
//
//	        Claim: SET NX PX + fence       Settle, confirm read
//	due ──────────────────────────► claimed ─────────────────────► owned
//	 ▲                                 │ token differs, record gone     │
//	 │                                 ▼                                │ heartbeat every
//	 │                               skipped                            │ Heartbeat (batched,
//	 │                                                                  │ compare-and-extend)
//	 │                                                                  ▼
//	 │◄─── Release: compare-and-delete, lastSync = Redis TIME ◄──── syncing
//	 │◄─── lost: trust window closed, or a heartbeat found the record
//	       gone or someone else's: Context cancelled with a
//	       *LeaseLostError; the outcome of that attempt is never recorded
//
// A claim writes the owner/state record with SET NX PX inside a script
// that also issues the item's fencing token. There is one method per
// intent, each over its own store operation and script: ClaimPick (Redis
// picks a shard's longest-waiting due items; the daemon), ClaimIDs (named
// items; also how a lost reply is read back) and ClaimBatch (a batch run's
// items). With Settle > 0 it waits, then re-reads the record and compares
// the random token before trusting the claim; with MinReplicas > 0 it
// first WAITs for replicas to acknowledge it. A claim whose reply was lost
// (a timeout) is not reported as "not claimed": the confirm read resolves
// it, and scripts treat a retried call carrying the same token as the same
// claim.
//
// # The trust window
//
// A Lease is trusted until
//
//	time the claim or last successful heartbeat was SENT + TTL - Margin
//
// on this process's monotonic clock. Redis cannot expire the record
// earlier than TTL after it received the command, which is after it was
// sent, so while the window is open no one else can hold the item. Margin
// covers clock-rate drift between this host and Redis. A heartbeat that
// succeeds late buys only what its send time covers (River's leadership
// rule). When the window closes (the process was paused, Redis stalled or
// is unreachable) the lease's Context is cancelled with cause
// *LeaseLostError before anyone else can claim, and Manager.Release
// refuses to record a sync for it. A closed window stays closed: a
// heartbeat does not extend a lease whose window closed, nor does a
// reply that comes after it closed reopen it, though the lease's timer
// has not run yet (a process resumed after a pause runs both at once).
// A heartbeat that was already on its way when the lease's release was
// sent, and reaches Redis after it, finds the record deleted: that is the
// release, not a loss, and the release ends the lease (ErrReleased).
//
// # Fencing
//
// Every claim carries a fence: max(last fence of the item + 1, Redis TIME
// in microseconds), computed inside the claim script. Fences of an item
// rise strictly from claim to claim, across processes, and across Redis
// restarts that forgot the counter, as long as Redis's clock does not go
// back and the fence is below 2^53: the script computes in Lua doubles,
// exact up to 2^53, and Redis TIME in microseconds stays below it until
// the year 2255. A stored fence at or past 2^53-1 was planted or is
// corrupt: the claim quarantines the item instead (store.ClaimDamaged,
// with why and how to fix it as the item's error), logged once and
// counted (Stats.DamagedFences), and a forced release refuses it. A paused process can wake up and write after its lease ended;
// nothing in a lock service can stop that (Kleppmann, "How to do
// distributed locking"). The only way to never accept two writers is for
// the target to check the fence: keep the highest fence it accepted per
// item and reject lower ones (see sinks.FenceGuard).
//
// # State in Redis that syncd did not write
//
// Whatever a claim reads back from Redis is input. A record syncd did not
// write is another owner's claim until it expires (store.ClaimForeign,
// logged once). An epoch marker that is not a time within one TTL (inf,
// 1e300, a year ahead, another type) is rewritten to hold the shard one
// TTL, and no reply makes the Manager hold a shard longer than one TTL;
// a hold is logged once, when it begins. An item claimed under an id that
// store.ValidateID refuses (empty, control characters, 200 KB) fills its
// slot but never becomes a lease: it is quarantined with the reason as
// its error, logged once with the id quoted and cut to 64 bytes, and
// counted (Stats.DamagedIDs); an item under a valid id in another shard
// than its id's (a copy planted by hand) likewise, with the command that
// removes it as its error, and counted apart (Stats.WrongShard). A claim
// that meets a key of another type
// returns a *store.DamageError for the caller to skip that shard.
//
// # What holds, per topology
//
//	embedded store     one process; nothing survives a restart.
//	single Redis,      a restart forgets every claim. The next claim of a
//	  no persistence   shard finds its epoch marker gone and holds the
//	                   shard off until TTL after Redis started, so no
//	                   earlier lease can still be running (the Manager
//	                   remembers the hold: Manager.Held). Fences keep
//	                   rising thanks to the TIME floor.
//	single Redis, AOF  claims survive a crash of Redis (everysec: up to a
//	  everysec         second of writes can be lost; fences still rise).
//	Sentinel/replicas  a failover can lose acknowledged claims (replication
//	                   is asynchronous). MinReplicas + WAIT narrows it,
//	                   Settle catches claims lost before the confirm read,
//	                   fencing closes it.
//	Cluster            as replicas, per shard; every script touches keys
//	                   of one hash slot.
//	quorum (Locker     a lock holds while a majority of N independent
//	  over N stores)   servers granted it and TTL - elapsed - Margin is
//	                   left (Redlock). Survives the loss of a minority.
//	                   Its fence is the highest a granting server issued:
//	                   it rises as long as the servers' clocks do, but
//	                   Redlock is not a consensus protocol; use fencing.
//
// # Standalone locks
//
// Locker is the lock the blog posts behind syncd asked for, without their
// pitfalls, and with what bsm/redislock and go-redsync offer:
//
//	TryLock(ctx, name, opts...)   one attempt; ErrNotObtained if held
//	Lock(ctx, name, opts...)      waits with jittered backoff, coming
//	                              back just after the holder's lease
//	                              ends, or at once when a goroutine of
//	                              the same Locker unlocks it; gives up
//	                              when ctx ends or after
//	                              LimitTries(n) attempts, with an error
//	                              wrapping ErrNotObtained and the cause
//	WithMetadata(md)              up to 128 bytes stored with the lock
//	Lock.Unlock(ctx)              compare-and-delete: released, not
//	                              held, or held by another owner
//	Lock.Refresh(ctx, ttl)        renews now with a new TTL, which the
//	                              watchdog keeps from then on
//	Lock.TTL(ctx)                 Redis's time left, 0 once not held
//	Lock.Fence, Context, Expiry   as for claims: pass the fence to what
//	                              you write, stop when Context ends
//	Locker.Inspect(ctx, name)     anyone: owner, fence, metadata, TTL
//
// A watchdog renews every lock every Heartbeat until Unlock, and a
// Locker with Reentrant set counts holds of a lock it already has.
// Unlock, Refresh and TTL accept the nil *Lock of a failed attempt and
// return ErrNotHeld, so `defer l.Unlock(ctx)` may come before the error
// check. The examples show job de-duplication and stock deduction, each
// with its write guarded by the fence.
//
// Locks hold off after data loss as claims do. Each lock name's fence
// counter, which outlives the lock by a week, is also its epoch marker:
// when a lock attempt finds it gone (the name was idle for a week, or
// Redis restarted without persistence and forgot every lock), the name
// is not granted until Redis has been up for one TTL, unless the epoch
// marker of the name's shard is there to say that nothing was lost
// (Cluster: that marker is in another slot, so only the uptime counts).
// So on a Redis younger than the TTL, names are held off until it is
// older, unless the deployment was declared new with store.MarkEpoch
// (…, 0) on every shard, as the engine's tests and benchmarks do. The
// hold is the TTL of the Locker that finds the counter gone (with the
// shard marker: of whoever set it first), so Lockers of one name and
// the engine of one key prefix should use the same TTL; a TTL raised
// with Refresh is not covered after a data loss. None of this costs a
// round trip or a Redis command while the counter exists. A FLUSHALL on
// a Redis up longer than the TTL, with no engine to set the shard
// markers (whose claims hold a shard off one TTL whatever the uptime),
// is not seen: a name is granted at once, and its fence, from Redis's
// clock, still rises past the flushed holder's.
//
// # What ownership owns, and what it must not touch
//
// ownership owns the lease: claiming, the settle and confirm read, the
// trust window, heartbeats, release, fencing, the hold-off of a shard
// after Redis lost its data, and the standalone Locker. It reaches Redis
// only through the Store interface (store.Store implements it), so its
// timing is tested over a fake with testing/synctest. It must not know
// what an item is for: no scheduling, no backoff policy, no sinks; and it
// builds no key names itself.
package ownership
