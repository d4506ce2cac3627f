package store

import "errors"

// The meta hash of a shard keeps, per item, the fence of its last claim,
// when it last synced and how many attempts in a row have failed, as one
// 14-byte big-endian value (prelude.lua writes it):
//
//	bytes 0..6   fence, µs (7 bytes: good until the year 4253)
//	bytes 7..12  lastSync, ms since the Unix epoch (6 bytes)
//	byte  13     attempts; from 256 on, 4 bytes (13..16)
//
// Redis keeps a hash value of at most 14 bytes in its smallest string
// allocation, so the common value costs 32 bytes less per item than the
// decimal "fence:lastSync:attempts" it replaced (BENCHMARKS.md, section 5).
const metaLen = 14

// encodeMeta is the Go twin of meta_value in prelude.lua.
func encodeMeta(fence uint64, last int64, attempts int) []byte {
	b := make([]byte, metaLen, metaLen+3)
	for i := 6; i >= 0; i-- {
		b[i] = byte(fence)
		fence >>= 8
	}
	l := uint64(max(last, 0))
	for i := 12; i >= 7; i-- {
		b[i] = byte(l)
		l >>= 8
	}
	if attempts < 256 {
		b[13] = byte(max(attempts, 0))
		return b
	}
	a := uint32(attempts)
	return append(b[:13], byte(a>>24), byte(a>>16), byte(a>>8), byte(a))
}

// ParseMeta decodes a value of a shard's meta hash (Keys.Meta): the fence
// of the item's last claim, its lastSync (ms since the Unix epoch, 0 for
// never) and its failed attempts in a row. Anything that is not such a
// value (not 14 or 17 bytes long: truncated, written by hand) reads as
// zeros, as in the scripts (meta_get in prelude.lua). The fence is read
// exactly, all 7 bytes; one at or past MaxFence was not issued by syncd
// (see MaxFence).
func ParseMeta(v string) (fence uint64, last int64, attempts int) {
	if len(v) != metaLen && len(v) != metaLen+3 {
		return 0, 0, 0
	}
	for i := 0; i < 7; i++ {
		fence = fence<<8 | uint64(v[i])
	}
	for i := 7; i < 13; i++ {
		last = last<<8 | int64(v[i])
	}
	var a uint64
	for i := 13; i < len(v); i++ {
		a = a<<8 | uint64(v[i])
	}
	return fence, last, int(min(a, 1<<31-1))
}

// MaxFence is the highest fence the scripts can issue: 2^53-1, the
// largest integer a Lua number (a double) holds exactly. syncd's fences
// come from max(last + 1, Redis TIME in µs), below it until the year
// 2255, so a stored fence at or past it was planted or is corrupt: a
// claim quarantines such an item (ClaimDamaged, with why in its error)
// and ForceRelease refuses it (ErrFenceLimit), rather than issue a fence
// that does not rise.
const MaxFence = 1<<53 - 1

// ErrFenceLimit reports an item whose stored fence is at or past
// MaxFence.
var ErrFenceLimit = errors.New("store: fence at or past 2^53-1, which syncd cannot raise exactly")
