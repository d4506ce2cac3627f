// Package store is syncd's access to Redis: a go-redis client built from
// a typed Config (single server, Sentinel, Cluster, TLS, ACL user), an
// embedded in-process store for single-process runs, the key layout (see
// Keys), the owner/state record (see Record) and the Lua scripts that do
// every multi-key step atomically.
//
// Scripts live in scripts/*.lua, each opening with a comment of its KEYS,
// ARGV and result, and share a prelude of helpers. They use plain string
// and number operations only, so they run the same on Redis and on the
// embedded store. Every key a script touches shares one Cluster hash slot
// (the shard's hash tag); all are passed in KEYS except the record keys of
// a pick claim, which claim_pick.lua builds from the shard's own due key and
// the ids it found (the one place a script builds key names, so Redis
// Cluster checks them against the slot of the declared keys).
//
// Data per item:
//
//	due ZSET   score = when the item is due (ms, Redis clock); a claimed
//	           item's score is its lease expiry, set by the claim and moved
//	           on by each extend of the lease, so it stays out of the due
//	           range while held and comes back by itself if its owner
//	           dies; +inf means quarantined. Read back clamped to ±MaxDue;
//	           NoDue is "none".
//	meta HASH  fence, lastSync and attempts, 14 bytes, 17 from 256
//	           attempts (meta.go); any other length reads as zeros.
//	err HASH   the last error, while the item is failing or quarantined.
//	rec        the owner/state record while the item is claimed.
//
// All times that matter across hosts come from Redis's TIME, so one clock
// orders the whole fleet.
//
// What comes back from Redis is input too. A key of another type costs
// its own shard only: calls that read several shards give that shard a
// *DamageError (ErrDamaged) and go on with the others. A value the
// scripts cannot trust is rewritten when that is safe (an epoch marker
// that is not a time within one ttl holds the shard one ttl; a meta value
// of the wrong length reads as zeros) and refused when it is not (a fence
// at or past MaxFence quarantines its item: ClaimDamaged).
//
// # What store owns, and what it must not touch
//
// store owns every byte syncd keeps in Redis: the key names (keys.go is
// the only place they are built), the record and meta formats, and the
// scripts that change them. Nothing above it sends a Redis command.
// It must not decide policy: when to claim, how long to back off, what a
// failure means, whom to trust. Those belong to ownership and engine,
// which pass them in as params. It reads no files, flags or environment.
package store
