package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Reads of values anyone with access to Redis can plant are bounded:
// an attacker's trial planted a 100 MB record, 80 MB error texts and an
// error log of 10 such entries, and one unauthenticated API read of the
// item took the daemon to 1.45 GB and eight of them Redis to 8 GB of
// output buffers, stalling the fleet. syncd writes none of these longer
// than the bounds below; a longer one is named by its length, not read.
const (
	metaValueMax   = 256      // "fence lastSync attempts"
	errValueMax    = 64 << 10 // an item's last error, as status shows it
	errLogEntryMax = 4 << 10  // one entry of an item's error log
)

// boundedHMGet reads fields of the HASH KEYS[1], each value at most
// ARGV[1] bytes long: per field its value, false when absent (or empty),
// or its length when longer. HSTRLEN is O(1) and copies nothing.
const boundedHMGet = `local max, out = tonumber(ARGV[1]), {}
for i = 2, #ARGV do
  local n = redis.call('HSTRLEN', KEYS[1], ARGV[i])
  if n == 0 then out[i - 1] = false
  elseif n > max then out[i - 1] = n
  else out[i - 1] = redis.call('HGET', KEYS[1], ARGV[i]) end
end
return out`

// boundedErrLog reads the first ARGV[2] entries of the error log KEYS[1],
// each cut to ARGV[1] bytes: what leaves Redis is bounded (Redis itself
// still reads a planted entry whole, once per read).
const boundedErrLog = `local max, out = tonumber(ARGV[1]), redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
for i = 1, #out do
  if #out[i] > max then out[i] = string.sub(out[i], 1, max) end
end
return out`

// itemReads are the bounded reads of some items of one shard, queued on
// a pipeline: their meta, last error, record and manual mark.
type itemReads struct {
	meta, errs *redis.Cmd
	recLen     []*redis.IntCmd
	rec        []*redis.StringCmd
	manual     []*redis.BoolCmd
}

// queueItemReads queues the reads of ids (of shard) on p.
func (s *Store) queueItemReads(ctx context.Context, p redis.Pipeliner, shard int, ids []string) *itemReads {
	r := &itemReads{recLen: make([]*redis.IntCmd, len(ids)), rec: make([]*redis.StringCmd, len(ids)),
		manual: make([]*redis.BoolCmd, len(ids))}
	r.meta = p.Eval(ctx, boundedHMGet, []string{s.keys.Meta(shard)}, fieldArgs(metaValueMax, ids)...)
	r.errs = p.Eval(ctx, boundedHMGet, []string{s.keys.Errors(shard)}, fieldArgs(errValueMax, ids)...)
	for i, id := range ids {
		rk := s.keys.Record(shard, id)
		r.recLen[i] = p.StrLen(ctx, rk)
		r.rec[i] = p.GetRange(ctx, rk, 0, MaxRecordSize)
		r.manual[i] = p.SIsMember(ctx, s.keys.Manual(shard), id)
	}
	return r
}

func fieldArgs(max int, ids []string) []any {
	args := make([]any, 0, 1+len(ids))
	args = append(args, max)
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// cmds are the reads whose errors fail the read or, as damage, leave the
// shard out. A damaged err hash is not one of them: the items are read
// without their last errors (lostErrors says so).
func (r *itemReads) cmds() []redis.Cmder {
	if r.lostErrors() != nil {
		return []redis.Cmder{r.meta}
	}
	return []redis.Cmder{r.meta, r.errs}
}

// lostErrors is Redis's reply when the shard's err hash is of another
// type, else nil.
func (r *itemReads) lostErrors() error {
	if err := r.errs.Err(); isDamageReply(err) {
		return err
	}
	return nil
}

// hashValue is field i of a boundedHMGet reply: its text (nil when
// absent), or nil and its length when it was too long to read.
func hashValue(c *redis.Cmd, i int) (v any, long int64) {
	vals, _ := c.Slice()
	if i >= len(vals) {
		return nil, 0
	}
	if n, ok := vals[i].(int64); ok {
		return nil, n
	}
	return vals[i], 0
}

// item builds item i (id) of the reads, at score.
func (r *itemReads) item(i int, id string, shard int, score float64) (ItemState, error) {
	meta, _ := hashValue(r.meta, i)
	errv, errLong := hashValue(r.errs, i)
	if errLong > 0 {
		errv = fmt.Sprintf("(an error text of %d bytes, more than %d: not read; syncd writes none so long)", errLong, errValueMax)
	}
	st, err := buildItem(id, shard, score, meta, errv, r.manual[i])
	if err != nil {
		return ItemState{}, err
	}
	switch n, err := r.recLen[i].Result(); {
	case isDamageReply(err):
		st.RecordErr = fmt.Errorf("%w: a key of another type", ErrBadRecord)
	case err != nil:
		return ItemState{}, fmt.Errorf("store: item %q: %w", id, err)
	case n > MaxRecordSize:
		st.RecordErr = fmt.Errorf("%w: %d bytes, more than %d", ErrBadRecord, n, MaxRecordSize)
	case n > 0:
		b, err := r.rec[i].Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return ItemState{}, fmt.Errorf("store: item %q: %w", id, err)
		}
		st.Record, st.RecordErr = UnmarshalRecord(b)
	}
	return st, nil
}
