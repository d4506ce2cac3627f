package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Bounds of ListPage: items per page, and the index entries one call
// reads at most (its scan budget) in at most listRoundsMax rounds.
const (
	ListLimitDefault = 50
	ListLimitMax     = 500
	ListScanBudget   = 5000
	listRoundsMax    = 16
)

// ErrBadQuery reports a ListQuery that ListPage refuses.
var ErrBadQuery = errors.New("store: bad list query")

// ListQuery asks ListPage for one page of items.
type ListQuery struct {
	// State is "" or "all" for every item, else one of the Item* states.
	State string
	// Prefix keeps the items whose ID starts with it.
	Prefix string
	// Limit is the page's size, 1..ListLimitMax; 0 means
	// ListLimitDefault.
	Limit int
	// Cursor is a Page's Next, "" for the first page.
	Cursor string
}

// Page is one page of items (see ListPage).
type Page struct {
	Items []ItemState // longest waiting first, each with its State
	// Next is the cursor of the next page, "" when there is none.
	Next string
	// Partial reports that the scan budget ran out before the page
	// filled: more items may match, from Next on.
	Partial bool
	Now     int64 // Redis's clock, ms
}

// window returns the due scores to scan for state, and whether every
// item in them has that state (no per-item check is needed to count it
// against the page).
func window(state string, now int64) (lo, hi string, exact bool, err error) {
	n := strconv.FormatInt(now, 10)
	switch state {
	case "", "all":
		return "-inf", "+inf", true, nil
	case ItemDue:
		return "-inf", n, true, nil
	case ItemQuarantined:
		return "+inf", "+inf", true, nil
	case ItemInFlight, ItemBackingOff, ItemWaiting:
		return "(" + n, "(+inf", false, nil
	}
	return "", "", false, fmt.Errorf("%w: state %q is not all, %s, %s, %s, %s or %s", ErrBadQuery, state,
		ItemDue, ItemInFlight, ItemBackingOff, ItemQuarantined, ItemWaiting)
}

// ListPage returns one page of items across every shard, the longest
// waiting (earliest due) first: a k-way merge of each shard's due index,
// read in windows of ZRANGEBYSCORE. Its cost is bounded whatever the
// set's size: at most ListScanBudget index entries, in at most
// listRoundsMax rounds of two round trips (the windows, then the
// candidates' meta, last error and record); when the budget runs out
// the page comes back Partial with a cursor to go on from. The cursor
// holds each shard's position by score, so paging visits every item of
// a set that does not change exactly once; while items move, one may be
// seen twice or missed. A shard whose keys are damaged is left out: the
// error then wraps ErrDamaged and the page is the other shards' (the
// pages after it leave the shard out without an error). A shard whose
// err hash alone is damaged is listed, its items without their last
// errors, and named the same way (DamageError.ErrorsLost).
func (s *Store) ListPage(ctx context.Context, q ListQuery) (Page, error) {
	sc, err := s.newPageScan(ctx, q)
	if err != nil {
		return Page{}, err
	}
	for round := 0; len(sc.page) < sc.limit && !sc.exhausted(); round++ {
		if round == listRoundsMax {
			sc.partial = true
			break
		}
		if err := sc.refill(ctx, round); err != nil {
			return Page{}, err
		}
		if sc.partial {
			break
		}
		entries := sc.merge()
		items, err := sc.details(ctx, entries)
		if err != nil {
			return Page{}, err
		}
		sc.accept(entries, items)
	}
	p := Page{Items: sc.page, Partial: sc.partial, Now: sc.now}
	if !sc.finished() {
		p.Next = sc.cursor()
	}
	return p, errors.Join(sc.damaged...)
}

// pageScan is one ListPage call's state.
type pageScan struct {
	s       *Store
	prefix  string
	state   string
	now     int64
	lo, hi  string
	exact   bool
	limit   int
	budget  int
	shards  []shardScan
	page    []ItemState
	partial bool
	damaged []error
}

// shardScan is one shard's part: fetch is after the last index entry
// read, commit after the last one the page went past; buf holds those
// read and not yet merged.
type shardScan struct {
	buf           []redis.Z
	fetch, commit shardPos
	damaged       bool
	errorsLost    bool // its err hash is damaged, named in damaged once
}

// pageEntry is one index entry in merge order; cand: it matches the
// prefix and needs its details read.
type pageEntry struct {
	shard int
	id    string
	score float64
	cand  bool
}

func (s *Store) newPageScan(ctx context.Context, q ListQuery) (*pageScan, error) {
	if q.Limit < 0 || q.Limit > ListLimitMax {
		return nil, fmt.Errorf("%w: limit %d is outside 1..%d", ErrBadQuery, q.Limit, ListLimitMax)
	}
	if len(q.Prefix) > MaxIDLen {
		return nil, fmt.Errorf("%w: prefix of %d bytes, longer than an id", ErrBadQuery, len(q.Prefix))
	}
	if _, _, _, err := window(q.State, 0); err != nil {
		return nil, err
	}
	pos, err := decodeCursor(q.Cursor, s.keys.Shards())
	if err != nil {
		return nil, err
	}
	now, err := s.Now(ctx)
	if err != nil {
		return nil, err
	}
	sc := &pageScan{s: s, prefix: q.Prefix, state: q.State, now: now, limit: q.Limit, budget: ListScanBudget,
		shards: make([]shardScan, len(pos))}
	if sc.limit == 0 {
		sc.limit = ListLimitDefault
	}
	sc.lo, sc.hi, sc.exact, _ = window(q.State, now)
	for i, p := range pos {
		sc.shards[i] = shardScan{fetch: p, commit: p}
	}
	return sc, nil
}

// exhausted reports that every shard's window is read and merged.
func (sc *pageScan) exhausted() bool {
	for _, sh := range sc.shards {
		if !sh.damaged && (!sh.fetch.done || len(sh.buf) > 0) {
			return false
		}
	}
	return true
}

// finished reports that no page follows: every shard is read, and the
// page went past everything read, or damaged.
func (sc *pageScan) finished() bool {
	for _, sh := range sc.shards {
		if !sh.damaged && (!sh.fetch.done || !sh.commit.at(sh.fetch)) {
			return false
		}
	}
	return true
}

// cursor encodes where each shard's scan goes on. A damaged shard is
// done: the page that met it reported it, the next ones leave it out.
func (sc *pageScan) cursor() string {
	pos := make([]shardPos, len(sc.shards))
	for i, sh := range sc.shards {
		pos[i] = sh.commit
		pos[i].done = sh.damaged || sh.fetch.done && sh.commit.at(sh.fetch)
	}
	return encodeCursor(pos)
}
