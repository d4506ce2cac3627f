package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// RecordVersion is the schema version this package writes.
const RecordVersion = 1

// MaxRecordSize caps the bytes the decoder accepts. Records are written
// by syncd and stay near 90 bytes; anything larger is foreign or corrupt.
const MaxRecordSize = 512

// Owner limits keep a record small whatever the host is called.
const (
	maxHostLen = 64
	maxRunLen  = 32
)

// MaxMetadataLen is the most bytes of Metadata a record carries. With the
// owner limits it keeps every record well under MaxRecordSize.
const MaxMetadataLen = 128

// ErrBadRecord reports bytes under a record key that are not a record this
// version understands: corrupt, oversized or written by someone else.
var ErrBadRecord = errors.New("store: bad record")

// Token identifies one claim. It is random, so only the claimer knows it.
type Token [16]byte

// NewToken returns a random token.
func NewToken() Token {
	var t Token
	if _, err := rand.Read(t[:]); err != nil {
		panic("store: crypto/rand: " + err.Error()) // never fails on Linux
	}
	return t
}

func (t Token) String() string { return hex.EncodeToString(t[:4]) }

// State is the phase of an owned item.
type State uint8

// States of a record.
const (
	StateClaimed State = 1 // claimed, settle and confirm not done yet
	StateSyncing State = 2 // confirmed; a sink is working on it
)

func (s State) String() string {
	switch s {
	case StateClaimed:
		return "claimed"
	case StateSyncing:
		return "syncing"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Owner identifies a worker: which host, which process, which run of that
// process, which worker goroutine.
type Owner struct {
	Host   string
	PID    int
	Run    string
	Worker int
}

func (o Owner) String() string {
	return o.Host + "/" + strconv.Itoa(o.PID) + "/" + o.Run + "/w" + strconv.Itoa(o.Worker)
}

// Record is the owner/state record stored under an item's record key
// while it is claimed.
//
// Wire format: a msgpack array whose first 53 bytes have a fixed layout,
// so the Lua scripts can compare the token and patch the fence and
// timestamps with plain string operations (Redis has cmsgpack, the
// embedded store does not):
//
//	off  bytes  field
//	  0      1  0x9b          fixarray of 11
//	  1      1  version       positive fixint
//	  2     18  token         bin8, length 16 (token at 4..19)
//	 20      9  fence         uint64 (0xcf + 8 bytes big endian)
//	 29      9  claimed at    uint64, ms since epoch, Redis clock
//	 38      9  heartbeat at  uint64, ms since epoch, Redis clock
//	 47      1  state         positive fixint
//	 48      5  attempt       uint32 (0xce + 4 bytes)
//	 53      -  host str, pid uint, run str, worker uint
//	  -      -  metadata str, only when not empty (standalone locks)
//
// A record with metadata is a fixarray of 12 (0x9c); one without keeps
// the 11 fields, so item records and metadata-free locks are byte for
// byte what earlier builds wrote, and decoders that stop at 11 fields
// still read locks with metadata. Fields past the 12th are ignored.
type Record struct {
	Version     uint8
	Token       Token
	Fence       uint64
	ClaimedAt   time.Time
	HeartbeatAt time.Time
	State       State
	Attempt     uint32
	Owner       Owner
	// Metadata is free text a standalone lock's holder stores with it,
	// at most MaxMetadataLen bytes (longer is truncated).
	Metadata string
}

// Offsets of the fixed header, shared with the scripts (1-based there).
const (
	offToken     = 4
	offFence     = 21
	offClaimed   = 30
	offHeartbeat = 39
	offState     = 47
	offAttempt   = 49
	headerLen    = 53
	recordFields = 11 // 12 with metadata
)

// MarshalRecord encodes r. Host and run are truncated to their limits.
func MarshalRecord(r *Record) []byte {
	host, run, md := r.Owner.Host, r.Owner.Run, r.Metadata
	if len(host) > maxHostLen {
		host = host[:maxHostLen]
	}
	if len(run) > maxRunLen {
		run = run[:maxRunLen]
	}
	if len(md) > MaxMetadataLen {
		md = md[:MaxMetadataLen]
	}
	fields := byte(recordFields)
	extra := 0
	if md != "" {
		fields++
		extra = 2 + len(md)
	}
	b := make([]byte, headerLen, headerLen+len(host)+len(run)+16+extra)
	b[0] = msgpcode.FixedArrayLow | fields
	b[1] = r.Version
	b[2], b[3] = msgpcode.Bin8, 16
	copy(b[offToken:], r.Token[:])
	putU64(b[offFence-1:], r.Fence)
	putU64(b[offClaimed-1:], uint64(unixMs(r.ClaimedAt)))
	putU64(b[offHeartbeat-1:], uint64(unixMs(r.HeartbeatAt)))
	b[offState] = byte(r.State) & 0x7f
	b[offAttempt-1] = msgpcode.Uint32
	binary.BigEndian.PutUint32(b[offAttempt:], r.Attempt)
	b = appendStr(b, host)
	b = appendUint(b, uint64(max(r.Owner.PID, 0)))
	b = appendStr(b, run)
	b = appendUint(b, uint64(max(r.Owner.Worker, 0)))
	if md != "" {
		b = appendStr(b, md)
	}
	return b
}

// UnmarshalRecord decodes a record. It refuses input over MaxRecordSize,
// checks every length against the bytes actually present before using
// it, and so never allocates in proportion to a length prefix.
func UnmarshalRecord(b []byte) (*Record, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadRecord}, args...)...)
	}
	if len(b) > MaxRecordSize {
		return nil, bad("%d bytes, the limit is %d", len(b), MaxRecordSize)
	}
	if len(b) < headerLen {
		return nil, bad("%d bytes, shorter than the header", len(b))
	}
	n := int(b[0]) - int(msgpcode.FixedArrayLow)
	if b[0]&0xf0 != msgpcode.FixedArrayLow || n < recordFields {
		return nil, bad("not an array of %d fields", recordFields)
	}
	if b[1] == 0 || b[1] > 0x7f {
		return nil, bad("version byte %#x", b[1])
	}
	if b[2] != msgpcode.Bin8 || b[3] != 16 || b[offFence-1] != msgpcode.Uint64 ||
		b[offClaimed-1] != msgpcode.Uint64 || b[offHeartbeat-1] != msgpcode.Uint64 ||
		b[offState] > 0x7f || b[offAttempt-1] != msgpcode.Uint32 {
		return nil, bad("header layout")
	}
	r := &Record{
		Version:     b[1],
		Fence:       binary.BigEndian.Uint64(b[offFence:]),
		ClaimedAt:   fromMs(int64(binary.BigEndian.Uint64(b[offClaimed:]))),
		HeartbeatAt: fromMs(int64(binary.BigEndian.Uint64(b[offHeartbeat:]))),
		State:       State(b[offState]),
		Attempt:     binary.BigEndian.Uint32(b[offAttempt:]),
	}
	copy(r.Token[:], b[offToken:offToken+16])
	rest := b[headerLen:]
	var err error
	var pid, worker uint64
	if r.Owner.Host, rest, err = readStr(rest); err != nil {
		return nil, bad("host: %v", err)
	}
	if pid, rest, err = readUint(rest); err != nil {
		return nil, bad("pid: %v", err)
	}
	if r.Owner.Run, rest, err = readStr(rest); err != nil {
		return nil, bad("run: %v", err)
	}
	if worker, rest, err = readUint(rest); err != nil {
		return nil, bad("worker: %v", err)
	}
	if n > recordFields {
		if r.Metadata, _, err = readStr(rest); err != nil {
			return nil, bad("metadata: %v", err)
		}
	}
	if pid > 1<<31 || worker > 1<<31 {
		return nil, bad("pid or worker out of range")
	}
	if len(r.Owner.Host) > maxHostLen || len(r.Owner.Run) > maxRunLen {
		return nil, bad("owner names too long")
	}
	if len(r.Metadata) > MaxMetadataLen {
		return nil, bad("metadata of %d bytes, the limit is %d", len(r.Metadata), MaxMetadataLen)
	}
	r.Owner.PID, r.Owner.Worker = int(pid), int(worker)
	return r, nil
}

// RecordToken returns the token of an encoded record without decoding the
// rest, and false when b is too short to hold one.
func RecordToken(b []byte) (Token, bool) {
	var t Token
	if len(b) < headerLen {
		return t, false
	}
	copy(t[:], b[offToken:offToken+16])
	return t, true
}

func putU64(b []byte, v uint64) {
	b[0] = msgpcode.Uint64
	binary.BigEndian.PutUint64(b[1:], v)
}

func appendStr(b []byte, s string) []byte {
	if len(s) < 32 {
		b = append(b, msgpcode.FixedStrLow|byte(len(s)))
	} else {
		b = append(b, msgpcode.Str8, byte(len(s)))
	}
	return append(b, s...)
}

// appendUint writes v in the smallest msgpack unsigned form.
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= uint64(msgpcode.PosFixedNumHigh):
		return append(b, byte(v))
	case v <= 0xff:
		return append(b, msgpcode.Uint8, byte(v))
	case v <= 0xffff:
		return append(b, msgpcode.Uint16, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return append(b, msgpcode.Uint32, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	b = append(b, msgpcode.Uint64)
	return binary.BigEndian.AppendUint64(b, v)
}

var errShort = errors.New("truncated")

func readStr(b []byte) (string, []byte, error) {
	if len(b) == 0 {
		return "", nil, errShort
	}
	var n int
	switch c := b[0]; {
	case msgpcode.IsFixedString(c):
		n, b = int(c&0x1f), b[1:]
	case c == msgpcode.Str8:
		if len(b) < 2 {
			return "", nil, errShort
		}
		n, b = int(b[1]), b[2:]
	default:
		return "", nil, fmt.Errorf("code %#x is not a short string", c)
	}
	if n > len(b) {
		return "", nil, fmt.Errorf("length %d past the end", n)
	}
	return string(b[:n]), b[n:], nil
}

func readUint(b []byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, nil, errShort
	}
	c := b[0]
	size := 0
	switch {
	case msgpcode.IsFixedNum(c) && c <= msgpcode.PosFixedNumHigh:
		return uint64(c), b[1:], nil
	case c == msgpcode.Uint8:
		size = 1
	case c == msgpcode.Uint16:
		size = 2
	case c == msgpcode.Uint32:
		size = 4
	case c == msgpcode.Uint64:
		size = 8
	default:
		return 0, nil, fmt.Errorf("code %#x is not an unsigned integer", c)
	}
	if len(b) < 1+size {
		return 0, nil, errShort
	}
	var v uint64
	for _, x := range b[1 : 1+size] {
		v = v<<8 | uint64(x)
	}
	return v, b[1+size:], nil
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
