package store

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrBadCursor reports a ListPage cursor that is not one ListPage made
// for this deployment's shard count.
var ErrBadCursor = errors.New("store: bad cursor")

// cursorMaxLen bounds an encoded cursor: ShardsMax shards at their
// longest (1 + 8 + 5 bytes each), in base64.
const cursorMaxLen = 4 * (2 + 3 + ShardsMax*14) / 3

// shardPos is where a scan of one shard's due index stands: after the
// first skip members of score score (Redis orders members of one score
// by their bytes, so the position holds while members come and go
// elsewhere). A position not started is at the window's start.
type shardPos struct {
	started bool
	done    bool // the window is read to its end
	score   float64
	skip    int
}

// advance moves the position past one member of score.
func (p *shardPos) advance(score float64) {
	if p.started && p.score == score {
		p.skip++
		return
	}
	p.started, p.score, p.skip = true, score, 1
}

// at reports whether p and o are the same position, done or not.
func (p shardPos) at(o shardPos) bool {
	return p.started == o.started && p.score == o.score && p.skip == o.skip
}

// Cursor flags, one byte per shard.
const (
	posFresh   = 0
	posStarted = 1
	posDone    = 2
)

// encodeCursor writes positions as an opaque string: a version byte, the
// shard count, then per shard a flag and, when started, the score's 8
// bytes and the skip as a uvarint; base64 (URL alphabet, no padding).
func encodeCursor(pos []shardPos) string {
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(pos)))
	for _, p := range pos {
		switch {
		case p.done:
			b = append(b, posDone)
		case p.started:
			b = append(b, posStarted)
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(p.score))
			b = binary.AppendUvarint(b, uint64(p.skip))
		default:
			b = append(b, posFresh)
		}
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a cursor for shards shards; "" is the start.
func decodeCursor(s string, shards int) ([]shardPos, error) {
	pos := make([]shardPos, shards)
	if s == "" {
		return pos, nil
	}
	bad := func(why string) ([]shardPos, error) { return nil, fmt.Errorf("%w: %s", ErrBadCursor, why) }
	if len(s) > cursorMaxLen {
		return bad(strconv.Itoa(len(s)) + " bytes long")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || b[0] != 1 {
		return bad("not a cursor of this version")
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n != uint64(shards) {
		return bad(fmt.Sprintf("made for another shard count (want %d)", shards))
	}
	b = b[1+k:]
	for i := range pos {
		if len(b) == 0 {
			return bad("truncated")
		}
		flag := b[0]
		b = b[1:]
		switch flag {
		case posFresh:
		case posDone:
			pos[i].done = true
		case posStarted:
			if len(b) < 8 {
				return bad("truncated")
			}
			score := math.Float64frombits(binary.BigEndian.Uint64(b))
			skip, k := binary.Uvarint(b[8:])
			if math.IsNaN(score) || k <= 0 || skip < 1 || skip > math.MaxInt32 {
				return bad(fmt.Sprintf("shard %d: bad position", i))
			}
			pos[i] = shardPos{started: true, score: score, skip: int(skip)}
			b = b[8+k:]
		default:
			return bad(fmt.Sprintf("shard %d: flag %d", i, flag))
		}
	}
	if len(b) > 0 {
		return bad("trailing bytes")
	}
	return pos, nil
}

// formatScore is a score as ZRANGEBYSCORE takes it.
func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
