package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// ErrLogMax is how many failures an item's error log keeps (see
// Keys.ErrLog), and ErrLogTextMax how many bytes of each error.
const (
	ErrLogMax     = 10
	ErrLogTextMax = 512
)

// ErrorEntry is one failure in an item's error log.
type ErrorEntry struct {
	At    int64 // ms, Redis clock
	Fence uint64
	Error string
}

// parseErrorEntry reads an entry release.lua wrote: "<ms> <fence>
// <error>". Anything else (written by hand) comes back whole as the
// error text, cut to ErrLogTextMax bytes, with no time or fence.
func parseErrorEntry(v string) ErrorEntry {
	at, rest, ok1 := strings.Cut(v, " ")
	fence, text, ok2 := strings.Cut(rest, " ")
	ms, err1 := strconv.ParseInt(at, 10, 64)
	f, err2 := strconv.ParseUint(fence, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || ms < 0 {
		return ErrorEntry{Error: cutText(v, ErrLogTextMax)}
	}
	return ErrorEntry{At: ms, Fence: f, Error: cutText(text, ErrLogTextMax)}
}

// cutText cuts s to at most n bytes and drops a rune the cut (or the
// script's byte cut) left incomplete at its end.
func cutText(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// ItemDetail is everything Item read about one item.
type ItemDetail struct {
	ItemState
	Now int64 // Redis's clock at the read, ms
	// LeaseLeft is how long the claim record has to live, 0 when the
	// item is not claimed.
	LeaseLeft time.Duration
	// Errors are its last failures, newest first, at most ErrLogMax.
	Errors []ErrorEntry
	// ErrorsLost is set when the shard's err hash is damaged (a
	// *DamageError with ErrorsLost, naming the key): the item's last
	// error is then unknown, not none, and Error is "".
	ErrorsLost error
}

// Item reads one item in one round trip: its due time, meta, last
// error, claim record and its time to live, and error log. It returns
// an error wrapping ErrUnknownItem when the item is not in the set, and
// a *DamageError when a key of its shard is damaged; a damaged err hash
// alone is no error: ItemDetail.ErrorsLost names it.
func (s *Store) Item(ctx context.Context, id string) (ItemDetail, error) {
	if err := removable(id); err != nil {
		return ItemDetail{}, err
	}
	return s.item(ctx, s.keys.Shard(id), id)
}

// ItemInShard is Item for the id in shard, whatever shard it is of (a
// copy planted in another shard than its id's, which ShardsOf finds and
// RemoveInShard removes).
func (s *Store) ItemInShard(ctx context.Context, shard int, id string) (ItemDetail, error) {
	if err := removable(id); err != nil {
		return ItemDetail{}, err
	}
	if shard < 0 || shard >= s.keys.Shards() {
		return ItemDetail{}, fmt.Errorf("store: no shard %d (the shards are 0 to %d)", shard, s.keys.Shards()-1)
	}
	return s.item(ctx, shard, id)
}

// item is Item of id in shard sh.
func (s *Store) item(ctx context.Context, sh int, id string) (ItemDetail, error) {
	rk := s.keys.Record(sh, id)
	var (
		now     *redis.TimeCmd
		score   *redis.FloatCmd
		reads   *itemReads
		pttl    *redis.DurationCmd
		entries *redis.Cmd
	)
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now, score = p.Time(ctx), p.ZScore(ctx, s.keys.Due(sh), id)
		reads = s.queueItemReads(ctx, p, sh, []string{id})
		pttl = p.PTTL(ctx, rk)
		entries = p.Eval(ctx, boundedErrLog, []string{s.keys.ErrLog(sh, id)}, errLogEntryMax, ErrLogMax)
		return nil
	})
	if err := shardCmdsErr(append([]redis.Cmder{now, score}, reads.cmds()...)); err != nil {
		if err := s.shardErr(ctx, sh, err); errors.Is(err, ErrDamaged) {
			return ItemDetail{}, err
		}
		return ItemDetail{}, fmt.Errorf("store: item %q: %w", id, err)
	}
	if errors.Is(score.Err(), redis.Nil) {
		return ItemDetail{}, fmt.Errorf("%w: %q", ErrUnknownItem, id)
	}
	if err := cmp.Or(entries.Err(), pttl.Err()); err != nil && !isDamageReply(err) {
		return ItemDetail{}, fmt.Errorf("store: item %q: %w", id, err)
	}
	st, err := reads.item(0, id, sh, score.Val())
	if err != nil {
		return ItemDetail{}, err
	}
	d := ItemDetail{ItemState: st, Now: now.Val().UnixMilli()}
	d.State = st.StateAt(d.Now)
	if err := reads.lostErrors(); err != nil {
		d.ErrorsLost = s.errorsLost(ctx, sh, err)
	}
	if st.Record != nil || st.RecordErr != nil {
		d.LeaseLeft = max(pttl.Val(), 0)
	}
	if v, ok := entries.Val().([]any); ok { // an error log of another type reads as empty
		for _, e := range v {
			if s, ok := e.(string); ok {
				d.Errors = append(d.Errors, parseErrorEntry(s))
			}
		}
	}
	return d, nil
}

// buildItem makes an item's state, but its record (itemReads.item), from
// the replies read for it: its due score, its meta and err HASH values
// (nil when absent), and whether it is manual.
func buildItem(id string, shard int, score float64, meta, errv any, manual *redis.BoolCmd) (ItemState, error) {
	st := ItemState{ID: id, Shard: shard, Due: dueOf(score)}
	if st.Due == NoDue {
		st.Quarantined, st.Due = true, 0
	}
	if v, ok := meta.(string); ok {
		f, l, a := ParseMeta(v)
		st.Fence, st.LastSync, st.Attempts = f, fromMs(l), a
	}
	if v, ok := errv.(string); ok {
		st.Error = v
	}
	st.Manual = manual.Val() // a manual set of another type reads as none
	return st, nil
}
