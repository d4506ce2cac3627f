package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDLen is the longest item ID, in bytes, that the store accepts.
const MaxIDLen = 512

// ErrInvalidID reports an item ID the store refuses. The error returned
// wraps it in an *IDError that says why.
var ErrInvalidID = errors.New("store: invalid item id")

// IDError describes why an ID was refused.
type IDError struct {
	ID     string // the refused ID, truncated to 64 bytes
	Reason string
}

func (e *IDError) Error() string {
	return fmt.Sprintf("store: invalid item id %q: %s", e.ID, e.Reason)
}

func (e *IDError) Unwrap() error { return ErrInvalidID }

// ValidateID checks that id is usable: non-empty, at most MaxIDLen bytes,
// valid UTF-8 and free of control and invisible format characters.
func ValidateID(id string) error {
	bad := func(reason string) error {
		shown := id
		if len(shown) > 64 {
			shown = shown[:64] + "..."
		}
		return &IDError{ID: shown, Reason: reason}
	}
	switch {
	case id == "":
		return bad("empty")
	case len(id) > MaxIDLen:
		return bad(fmt.Sprintf("%d bytes long, the limit is %d", len(id), MaxIDLen))
	case !utf8.ValidString(id):
		return bad("not valid UTF-8")
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return bad(fmt.Sprintf("control character %U at byte %d", r, i))
		}
		// Invisible format characters (a byte order mark, zero-width and
		// bidi controls) would make IDs that look the same but are not.
		if unicode.Is(unicode.Cf, r) {
			return bad(fmt.Sprintf("invisible format character %U at byte %d", r, i))
		}
	}
	return nil
}

// EncodeID turns a valid ID into the form used inside key names. Bytes that
// mean something to Redis Cluster hash tags, key patterns or our key
// separators ({ } : * ? [ ] \ % and space) are written as %XX, so the
// encoding is injective, never contains a brace (an ID cannot move its key
// to another slot) and never contains a colon (an ID cannot end in a
// suffix of another key).
func EncodeID(id string) string {
	n := 0
	for i := 0; i < len(id); i++ {
		if escapeByte(id[i]) {
			n++
		}
	}
	if n == 0 {
		return id
	}
	var b strings.Builder
	b.Grow(len(id) + 2*n)
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(id); i++ {
		c := id[i]
		if escapeByte(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func escapeByte(c byte) bool {
	switch c {
	case '{', '}', ':', '*', '?', '[', ']', '\\', '%', ' ':
		return true
	}
	return c < 0x20 || c == 0x7f
}

// Keys builds every Redis key syncd uses. All keys of one shard carry the
// hash tag {s<k>}, so each script touches a single Cluster slot:
//
//	<prefix>:shards           shard count the deployment was created with
//	<prefix>:batch            start of the current batch run (ms)
//	<prefix>:{s<k>}:due       ZSET  id -> ms when due; +inf = quarantined
//	<prefix>:{s<k>}:meta      HASH  id -> fence, lastSync, attempts (meta.go)
//	<prefix>:{s<k>}:err       HASH  id -> last error text
//	<prefix>:{s<k>}:epoch     STRING marker; missing means Redis lost data
//	<prefix>:{s<k>}:trig      HASH  id -> "<ms> <reason>" of its last trigger
//	<prefix>:{s<k>}:again     HASH  id -> boost (ms): triggered in flight,
//	                          due again at release (trigger.lua)
//	<prefix>:{s<k>}:rec:<id>  STRING owner/state record, SET NX PX ttl
//	<prefix>:{s<k>}:errlog:<id> LIST the last ErrLogMax failures, newest
//	                          first: "<ms> <fence> <error>" (release.lua)
//	<prefix>:{s<k>}:claim:<t> STRING ids a pick claim with token <t> took
//	                          (newline-separated; PX ttl)
//	<prefix>:{s<k>}:rel:<t>:<id> STRING what a release whose first item
//	                          is <id> with token <t> replied (PX 1 min)
//	<prefix>:{daemons}        ZSET  daemon id -> last write (ms, Redis clock)
//	<prefix>:{daemons}:<id>   STRING a daemon's DaemonInfo (JSON), PX 3 periods
//	<prefix>:lock:{<id>}      STRING standalone lock record
//	<prefix>:lock:{<id>}:f    STRING standalone lock fence counter
//	<prefix>:lock:{<id>}:r    STRING tokens of the last unlocks (unlock.lua)
//	<prefix>:lockrcpt:<s>     STRING names and tokens Store <s>'s last
//	                          batches of unlocks released, PX 1 min
//
// <id> is EncodeID of the item ID.
type Keys struct {
	prefix string
	shards int
	tags   []string // "<prefix>:{s<k>}:" per shard
	epochs []string // Epoch per shard, built once: a lock attempt passes one
}

// NewKeys returns the key builder for prefix and shard count.
func NewKeys(prefix string, shards int) Keys {
	k := Keys{prefix: prefix, shards: shards, tags: make([]string, shards), epochs: make([]string, shards)}
	for i := range k.tags {
		k.tags[i] = prefix + ":{s" + strconv.Itoa(i) + "}:"
		k.epochs[i] = k.tags[i] + "epoch"
	}
	return k
}

// Prefix returns the key prefix.
func (k Keys) Prefix() string { return k.prefix }

// Shards returns the shard count.
func (k Keys) Shards() int { return k.shards }

// Shard returns the shard of an item: FNV-1a of the ID modulo the shard
// count. It must never change for a deployment, which is why the shard
// count is recorded in Redis and checked at start.
func (k Keys) Shard(id string) int {
	h := uint32(fnvOffset32)
	for i := 0; i < len(id); i++ { // hash/fnv's New32a, without its allocations
		h ^= uint32(id[i])
		h *= fnvPrime32
	}
	return int(h % uint32(k.shards))
}

// FNV-1a's 32-bit parameters, as hash/fnv has them.
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// ShardCount is the key that records the deployment's shard count.
func (k Keys) ShardCount() string { return k.prefix + ":shards" }

// Deployment is the deployment's marker (see Store.Deployment).
func (k Keys) Deployment() string { return k.prefix + ":deployment" }

// DataLoss records the last time Redis lost the deployment's data.
func (k Keys) DataLoss() string { return k.prefix + ":dataloss" }

// Batch is the marker of the current batch run.
func (k Keys) Batch() string { return k.prefix + ":batch" }

// Due is the due index of a shard.
func (k Keys) Due(shard int) string { return k.tags[shard] + "due" }

// Meta is the per-item state hash of a shard.
func (k Keys) Meta(shard int) string { return k.tags[shard] + "meta" }

// Errors is the last-error hash of a shard.
func (k Keys) Errors(shard int) string { return k.tags[shard] + "err" }

// Manual is the set of a shard's items added by hand, which a reconcile
// never removes.
func (k Keys) Manual(shard int) string { return k.tags[shard] + "manual" }

// ReconcileFence is the highest lock fence a reconcile of the shard
// wrote with.
func (k Keys) ReconcileFence(shard int) string { return k.tags[shard] + "rfence" }

// Epoch is the data-loss marker of a shard.
func (k Keys) Epoch(shard int) string { return k.epochs[shard] }

// Record is the owner/state record key of an item.
func (k Keys) Record(shard int, id string) string {
	return k.tags[shard] + "rec:" + EncodeID(id)
}

// ErrLog is the list of an item's last failures (see Store.Item). It
// shares the shard's slot, so release.lua writes it (making its name as
// this does, from Due's).
func (k Keys) ErrLog(shard int, id string) string {
	return k.tags[shard] + "errlog:" + EncodeID(id)
}

// Daemons is the registry of live daemons: a ZSET of daemon IDs scored
// by their last write. It and each Daemon key share the slot {daemons},
// so one script writes both.
func (k Keys) Daemons() string { return k.prefix + ":{daemons}" }

// Daemon is the key of one daemon's DaemonInfo.
func (k Keys) Daemon(id string) string { return k.prefix + ":{daemons}:" + EncodeID(id) }

// Receipt lists what a pick claim with token tok took (see Store.ClaimPick).
func (k Keys) Receipt(shard int, tok Token) string {
	return k.tags[shard] + "claim:" + hex.EncodeToString(tok[:])
}

// Triggers is the hash of each item's last trigger (see Store.Trigger).
func (k Keys) Triggers(shard int) string { return k.tags[shard] + "trig" }

// Again is the hash of items triggered while in flight, which the release
// makes due again at once (see Store.Trigger).
func (k Keys) Again(shard int) string { return k.tags[shard] + "again" }

// ReleaseReceipt is where a release call whose first item is id, held
// with tok, keeps its reply for a re-send after a dropped connection
// (release.lua).
func (k Keys) ReleaseReceipt(shard int, tok Token, id string) string {
	return k.tags[shard] + "rel:" + hex.EncodeToString(tok[:]) + ":" + EncodeID(id)
}

// Lock is the record key of a standalone lock.
func (k Keys) Lock(name string) string { return k.prefix + ":lock:{" + EncodeID(name) + "}" }

// LockFence is the fence counter of a standalone lock; it shares the
// lock's slot.
func (k Keys) LockFence(name string) string { return k.Lock(name) + lockFenceSuffix }

// LockReleased holds the tokens of a standalone lock's last unlocks, for
// an unlock re-sent after a dropped connection (unlock.lua); it shares
// the lock's slot.
func (k Keys) LockReleased(name string) string { return k.Lock(name) + lockReleasedSuffix }

// LockReceipt holds the names and tokens that one Store's last
// unlock_batch.lua calls released, for such a call re-sent after a
// dropped connection; id is the Store's (see Store.lockOps).
func (k Keys) LockReceipt(id string) string { return k.prefix + ":lockrcpt:" + id }

const (
	lockFenceSuffix    = ":f"
	lockReleasedSuffix = ":r"
)

// Target returns the key of the target's state, name one of "state" (the
// breaker's HASH), "suspects" (SET), "permits" (ZSET) or "rate" (the
// rate limit's STRING). They share one slot, so one script reads them
// all.
func (k Keys) Target(name string) string { return k.prefix + ":{target}:" + name }
