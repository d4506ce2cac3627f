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
// refuses to record a sync for it.
//
// # Fencing
//
// Every claim carries a fence: max(last fence of the item + 1, Redis TIME
// in microseconds), computed inside the claim script. Fences of an item
// rise strictly from claim to claim, across processes, and across Redis
// restarts that forgot the counter, as long as Redis's clock does not go
// back. A paused process can wake up and write after its lease ended;
// nothing in a lock service can stop that (Kleppmann, "How to do
// distributed locking"). The only way to never accept two writers is for
// the target to check the fence: keep the highest fence it accepted per
// item and reject lower ones (see sinks.FenceGuard).
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
// pitfalls: TryLock makes one attempt, Lock waits with jittered backoff,
// a watchdog renews the lock every Heartbeat until Unlock, Unlock is a
// compare-and-delete that says whether the lock was released, not held,
// or held by another owner, and a Locker with Reentrant set counts holds
// of a lock it already has.
package ownership
