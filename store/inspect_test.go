package store_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// setDue sets items' due scores directly: ms from now, or +inf.
func setScores(t *testing.T, s *store.Store, now int64, scores map[string]float64) {
	t.Helper()
	for id, off := range scores {
		z := redis.Z{Score: float64(now) + off, Member: id}
		if err := s.Client().ZAdd(t.Context(), s.Keys().Due(s.Keys().Shard(id)), z).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// pageAll pages through q to the end, failing on a partial page.
func pageAll(t *testing.T, s *store.Store, q store.ListQuery) []store.ItemState {
	t.Helper()
	var out []store.ItemState
	for i := 0; i < 1000; i++ {
		p, err := s.ListPage(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if p.Partial {
			t.Fatalf("partial page at %d items", len(out))
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out
		}
		q.Cursor = p.Next
	}
	t.Fatal("paging does not end")
	return nil
}

func ids(items []store.ItemState) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// ListPage merges the shards in due order, filters by state and prefix,
// and its cursor visits every item exactly once; Counts agrees.
func TestListPageAndCounts(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 4})
		var all []string
		for i := range 60 {
			all = append(all, fmt.Sprintf("item-%02d", i))
		}
		s.Add(ctx, all...)
		now, _ := s.Now(ctx)
		scores := map[string]float64{}
		for i, id := range all {
			scores[id] = float64(i*1000 - 29500) // item-00..29 due
			if i >= 30 {
				// later, by a minute or more: item-30 was due 500 ms on,
				// and a loaded machine's run counted it due (Due 31)
				scores[id] = float64((i - 29) * 60000)
			}
		}
		scores["item-59"] = 0
		setScores(t, s, now, scores)
		s.Client().ZAdd(ctx, s.Keys().Due(s.Keys().Shard("item-59")), redis.Z{Score: math.Inf(1), Member: "item-59"})

		got := ids(pageAll(t, s, store.ListQuery{Limit: 7}))
		if diff := cmp.Diff(got, all); diff != "" {
			t.Errorf("all, 7 a page (-got +want):\n%s", diff)
		}
		due := ids(pageAll(t, s, store.ListQuery{State: store.ItemDue, Limit: 5}))
		if diff := cmp.Diff(due, all[:30]); diff != "" {
			t.Errorf("due (-got +want):\n%s", diff)
		}
		q := ids(pageAll(t, s, store.ListQuery{State: store.ItemQuarantined}))
		if diff := cmp.Diff(q, []string{"item-59"}); diff != "" {
			t.Errorf("quarantined (-got +want):\n%s", diff)
		}
		w := ids(pageAll(t, s, store.ListQuery{State: store.ItemWaiting, Prefix: "item-4", Limit: 3}))
		if diff := cmp.Diff(w, all[40:50]); diff != "" {
			t.Errorf("waiting, prefix item-4 (-got +want):\n%s", diff)
		}
		c, err := s.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.Items != 60 || c.Due != 30 || c.Quarantined != 1 || c.OldestDueAge() < 29000 || c.HeldOff != 0 {
			t.Errorf("Counts = %+v", c)
		}
		// Held-off shards are counted; a marker of another type (made by
		// hand) reads as none and costs no shard its counts.
		s.Client().Set(ctx, s.Keys().Epoch(0), strconv.FormatInt(now+20000, 10), 0)
		s.Client().HSet(ctx, s.Keys().Epoch(1), "x", "y")
		if c, err := s.Counts(ctx); err != nil || c.Items != 60 || c.HeldOff != 1 || c.HeldUntil != now+20000 {
			t.Errorf("Counts with shard 0 held off and a hash at shard 1's marker = %+v, %v", c, err)
		}
	})
}

// States in flight and backing off come from the record and the meta.
func TestListPageStates(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 2})
		s.Add(ctx, "a", "b", "c")
		r := record("w")
		claim(t, s, r, time.Minute, "a")
		rb := record("w")
		claim(t, s, rb, time.Minute, "b")
		s.Release(ctx, s.Keys().Shard("b"), []store.ReleaseRequest{{ID: "b", Token: rb.Token, Kind: store.ReleaseFailed, Delay: time.Hour, Error: "boom"}})
		for state, want := range map[string][]string{store.ItemInFlight: {"a"}, store.ItemBackingOff: {"b"}, store.ItemDue: {"c"}} {
			got := pageAll(t, s, store.ListQuery{State: state})
			if diff := cmp.Diff(ids(got), want); diff != "" {
				t.Errorf("%s (-got +want):\n%s", state, diff)
			}
			for _, it := range got {
				if it.State != state {
					t.Errorf("%s: item %s has state %s", state, it.ID, it.State)
				}
			}
		}
		c, err := s.Counts(ctx)
		if err != nil || c.Items != 3 || c.Due != 1 || c.BackingOff != 1 {
			t.Errorf("Counts = %+v, %v", c, err)
		}
	})
}

// A call reads at most ListScanBudget index entries: a filter that
// matches nothing in a large set returns a partial empty page with a
// cursor that goes on.
func TestListPageBudget(t *testing.T) {
	ctx := t.Context()
	s := open(t, store.Config{Addrs: []string{redisAddr(t)}, Shards: 4})
	var many []string
	for i := range store.ListScanBudget + 2000 {
		many = append(many, fmt.Sprintf("x%05d", i))
	}
	if _, err := s.Add(ctx, many...); err != nil {
		t.Fatal(err)
	}
	s.Add(ctx, "zz-last")
	p, err := s.ListPage(ctx, store.ListQuery{Prefix: "zz-"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Partial || p.Next == "" || len(p.Items) != 0 {
		t.Fatalf("page = %d items, partial %v, next %q; want partial with a cursor", len(p.Items), p.Partial, p.Next)
	}
	p, err = s.ListPage(ctx, store.ListQuery{Prefix: "zz-", Cursor: p.Next})
	if err != nil || len(p.Items) != 1 || p.Items[0].ID != "zz-last" {
		t.Fatalf("second page = %+v, %v", p, err)
	}
}

// Bad queries and cursors are refused, naming why.
func TestListPageRefuses(t *testing.T) {
	s := open(t, store.Config{Shards: 2})
	other := open(t, store.Config{Shards: 3})
	other.Add(t.Context(), "a", "b")
	p, _ := other.ListPage(t.Context(), store.ListQuery{Limit: 1})
	for _, q := range []store.ListQuery{{State: "sleeping"}, {Limit: 501}, {Limit: -1}, {Cursor: "!!"}, {Cursor: p.Next},
		{Prefix: strings.Repeat("x", store.MaxIDLen+1)}} {
		if _, err := s.ListPage(t.Context(), q); !errors.Is(err, store.ErrBadQuery) && !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("ListPage(%+v) = %v", q, err)
		}
	}
}

// Item returns the record, lease, fence and the last ten failures,
// newest first; Remove deletes the error log.
func TestItemErrorLog(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 2})
		s.Add(ctx, "p")
		sh := s.Keys().Shard("p")
		long := strings.Repeat("é", 400)
		for i := range 12 {
			r := record("w")
			claim(t, s, r, time.Minute, "p")
			msg := fmt.Sprintf("boom %d", i)
			if i == 11 {
				msg = long
			}
			s.Release(ctx, sh, []store.ReleaseRequest{{ID: "p", Token: r.Token, Kind: store.ReleaseFailed, Error: msg}})
		}
		r := record("w")
		claim(t, s, r, time.Minute, "p")
		d, err := s.Item(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		if d.State != store.ItemInFlight || d.Record == nil || d.LeaseLeft <= 0 || d.LeaseLeft > time.Minute || d.Attempts != 12 {
			t.Errorf("Item = %+v", d)
		}
		if len(d.Errors) != store.ErrLogMax || d.Errors[1].Error != "boom 10" || d.Errors[9].Error != "boom 2" || d.Errors[1].At == 0 || d.Errors[1].Fence == 0 {
			t.Fatalf("errors = %+v", d.Errors)
		}
		if e := d.Errors[0].Error; len(e) > store.ErrLogTextMax || !strings.HasPrefix(long, e) || len(e) < 500 {
			t.Errorf("long error kept as %d bytes", len(e))
		}
		if _, err := s.Item(ctx, "nope"); !errors.Is(err, store.ErrUnknownItem) {
			t.Errorf("Item(nope) = %v", err)
		}
		// release.lua names the error log of an id that needs encoding
		// as Keys.ErrLog does.
		odd := "odd id:{1} 50%"
		s.Add(ctx, odd)
		ro := record("w")
		claim(t, s, ro, time.Minute, odd)
		s.Release(ctx, s.Keys().Shard(odd), []store.ReleaseRequest{{ID: odd, Token: ro.Token, Kind: store.ReleaseFailed, Error: "odd boom"}})
		if d, err := s.Item(ctx, odd); err != nil || len(d.Errors) != 1 || d.Errors[0].Error != "odd boom" {
			t.Errorf("Item(%q) = %+v, %v; want its one error", odd, d, err)
		}
		s.Remove(ctx, "p")
		if n := s.Client().Exists(ctx, s.Keys().ErrLog(sh, "p")).Val(); n != 0 {
			t.Errorf("error log kept after Remove")
		}
	})
}

// The registry lists daemons until their entries expire, then prunes
// them; RemoveDaemon takes one out at once.
func TestDaemonRegistry(t *testing.T) {
	ctx := t.Context()
	s := open(t, store.Config{Addrs: []string{redisAddr(t)}, Shards: 2})
	a := store.DaemonInfo{ID: "h:1", Host: "h", PID: 1, Workers: 4, InFlight: []string{"x", "y"}, Version: "v1"}
	b := store.DaemonInfo{ID: "h:2", Host: "h", PID: 2, Workers: 2}
	if err := s.WriteDaemon(ctx, a, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteDaemon(ctx, b, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	ds, now, err := s.Daemons(ctx)
	if err != nil || len(ds) != 2 || now == 0 {
		t.Fatalf("Daemons = %+v, %d, %v", ds, now, err)
	}
	c, _ := s.Counts(ctx)
	if c.Daemons != 2 || c.Workers != 6 || c.InFlight != 2 {
		t.Errorf("Counts = %+v", c)
	}
	waitUntil(t, 5*time.Second, func() bool {
		ds, _, _ := s.Daemons(ctx)
		return len(ds) == 1 && ds[0].ID == "h:2"
	})
	if n := s.Client().ZCard(ctx, s.Keys().Daemons()).Val(); n != 1 {
		t.Errorf("registry holds %d after the expiry, want 1", n)
	}
	s.RemoveDaemon(ctx, "h:2")
	if ds, _, _ := s.Daemons(ctx); len(ds) != 0 {
		t.Errorf("after RemoveDaemon: %+v", ds)
	}
	// A planted entry past the limit is read no further than the limit,
	// and named with its size.
	s.Client().Set(ctx, s.Keys().Daemon("big"), strings.Repeat("x", 3<<20), 0)
	s.Client().ZAdd(ctx, s.Keys().Daemons(), redis.Z{Score: float64(time.Now().UnixMilli() + 60000), Member: "big"})
	if ds, _, err := s.Daemons(ctx); err != nil || len(ds) != 1 || ds[0].Problem != "3145728 bytes, more than 1048576" {
		t.Errorf("a 3 MiB entry: %+v, %v", ds, err)
	}
	// Planted counts past any daemon's are a problem, not in the sums.
	s.Client().Del(ctx, s.Keys().Daemon("big"))
	s.Client().ZRem(ctx, s.Keys().Daemons(), "big")
	s.Client().Set(ctx, s.Keys().Daemon("huge"), `{"workers": 9223372036854775807, "in_flight_count": 3}`, 0)
	s.Client().ZAdd(ctx, s.Keys().Daemons(), redis.Z{Score: float64(time.Now().UnixMilli() + 60000), Member: "huge"})
	if c, err := s.Counts(ctx); err != nil || c.Workers != 0 || c.InFlight != 0 {
		t.Errorf("Counts with a planted entry: %+v, %v", c, err)
	}
}

func waitUntil(t *testing.T, d time.Duration, f func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !f(); {
		if time.Now().After(end) {
			t.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func redisAddr(t *testing.T) string { return redistest.Start(t, nil).Addr() }

// A damaged shard is reported by the page that meets it and left out of
// the pages after it; paging still ends.
func TestListPageDamagedShard(t *testing.T) {
	ctx := t.Context()
	s := open(t, store.Config{Shards: 4})
	var all []string
	for i := range 40 {
		all = append(all, fmt.Sprintf("i%02d", i))
	}
	s.Add(ctx, all...)
	s.Client().Set(ctx, s.Keys().Meta(2), "garbage", 0)
	healthy := 0
	for _, id := range all {
		if s.Keys().Shard(id) != 2 {
			healthy++
		}
	}
	q := store.ListQuery{Limit: 7}
	var got []store.ItemState
	damaged := 0
	for range 100 {
		p, err := s.ListPage(ctx, q)
		if errors.Is(err, store.ErrDamaged) {
			damaged++
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Items...)
		if q.Cursor = p.Next; q.Cursor == "" {
			break
		}
	}
	if len(got) != healthy || damaged != 1 {
		t.Errorf("%d items (want %d), %d damage errors (want 1)", len(got), healthy, damaged)
	}
	if _, err := s.Counts(ctx); !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), s.Keys().Meta(2)) {
		t.Errorf("Counts: %v", err)
	}
}

// Paging through a long run of one score reads each window by rank (a
// crafted cursor that skipped far into a run cost Redis a walk of every
// skipped entry): every item once, in order, within the window's bound.
func TestListPageLongRunOfOneScore(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 2})
		now := time.Now().UnixMilli()
		scores := map[string]float64{}
		var want []string
		for i := range 300 {
			id := fmt.Sprintf("due-%03d", i)
			scores[id] = -1000 // one score: due
			want = append(want, id)
		}
		for i := range 50 {
			scores[fmt.Sprintf("later-%02d", i)] = 3600e3 // past the due window
		}
		setScores(t, s, now, scores)
		got := ids(pageAll(t, s, store.ListQuery{State: store.ItemDue, Limit: 7}))
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("due items (-got +want):\n%s", diff)
		}
		if n := len(pageAll(t, s, store.ListQuery{Limit: 13})); n != 350 {
			t.Errorf("all: %d items, want 350", n)
		}
	})
}

// Values planted in Redis are read no further than syncd writes them:
// an error text, a record and an error log far past their bounds are
// named by their size (an attacker's planted 100 MB record and 80 MB
// errors took a daemon to 1.45 GB and Redis to 8 GB per few reads).
func TestPlantedHugeValuesNotRead(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		ctx := t.Context()
		s := open(store.Config{Shards: 1})
		s.Add(ctx, "big", "fine")
		c, k := s.Client(), s.Keys()
		c.HSet(ctx, k.Errors(0), "big", strings.Repeat("e", 200<<10), "fine", "a short error")
		c.Set(ctx, k.Record(0, "big"), strings.Repeat("r", 2048), time.Minute)
		d, err := s.Item(ctx, "big")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(d.Error, "(an error text of 204800 bytes, more than 65536") || len(d.Error) > 200 {
			t.Errorf("Item's error: %.200q", d.Error)
		}
		if d.Record != nil || d.RecordErr == nil || !strings.Contains(d.RecordErr.Error(), "2048 bytes, more than 512") {
			t.Errorf("Item's record: %v, %v", d.Record, d.RecordErr)
		}
		p, err := s.ListPage(ctx, store.ListQuery{})
		if err != nil || len(p.Items) != 2 {
			t.Fatalf("ListPage = %+v, %v", p, err)
		}
		for _, it := range p.Items {
			if len(it.Error) > 200 || it.ID == "fine" && it.Error != "a short error" {
				t.Errorf("listed %s with error %.200q", it.ID, it.Error)
			}
		}
	})
	// The error log's entries leave Redis cut.
	ctx := t.Context()
	s := open(t, store.Config{Addrs: []string{redisAddr(t)}, Shards: 1})
	s.Add(ctx, "big")
	for range 3 {
		s.Client().LPush(ctx, s.Keys().ErrLog(0, "big"), strings.Repeat("l", 100<<10))
	}
	d, err := s.Item(ctx, "big")
	if err != nil || len(d.Errors) != 3 || len(d.Errors[0].Error) > store.ErrLogTextMax {
		t.Errorf("Item's error log: %d entries, %v", len(d.Errors), err)
	}
}
