package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/syncd/syncd/store"
)

// Target is the target's state in the API.
type Target struct {
	State        string `json:"state"` // closed, open or half_open (a probe may go)
	SinceMs      int64  `json:"since_ms"`
	NextProbeMs  int64  `json:"next_probe_ms,omitempty"`
	PermitsInUse int    `json:"permits_in_use"`
	Limit        int    `json:"limit"` // max_in_flight, 0: none
	Opens        int64  `json:"opens"`
	Closes       int64  `json:"closes"`
	Suspects     int    `json:"suspects"`
	LastError    string `json:"last_error,omitempty"`
}

func targetOf(ts store.TargetState, limit int) *Target {
	t := &Target{State: "closed", SinceMs: ts.Since, PermitsInUse: ts.InFlight, Limit: limit, Opens: ts.Opens,
		Closes: ts.Closes, Suspects: ts.Suspects}
	if ts.Open {
		t.State, t.NextProbeMs, t.LastError = "open", ts.Next, TargetError(ts.Reason)
		if ts.Now >= ts.Next {
			t.State = "half_open"
		}
	}
	return t
}

// Summary is GET /api/v1/summary, and what `syncd status` prints. Due
// (due now, not claimed), InFlight and Quarantined count the items in
// those states; the rest wait for their next sync. BackingOff is no
// state of its own: it counts the items whose last attempt failed and
// that are not quarantined (store.Counts), a subset of Items that
// overlaps Due and InFlight, since an item due for its retry, or being
// retried, is counted there too: Due + BackingOff can be more than
// Items.
type Summary struct {
	NowMs       int64 `json:"now_ms"`
	Items       int64 `json:"items"`
	Due         int64 `json:"due"`
	InFlight    int64 `json:"in_flight"`
	BackingOff  int64 `json:"backing_off"`
	Quarantined int64 `json:"quarantined"`
	OldestDueMs int64 `json:"oldest_due_ms"` // age of the longest-waiting due item
	Daemons     int   `json:"daemons"`
	Workers     int   `json:"workers"`
	// HeldOffShards counts the shards whose claims wait after Redis lost
	// its data or on a new deployment, until HeldOffUntilMs (Redis
	// clock; 0 when none waits).
	HeldOffShards  int      `json:"held_off_shards"`
	HeldOffUntilMs int64    `json:"held_off_until_ms"`
	Target         *Target  `json:"target"`
	Writable       bool     `json:"writable"`
	History        []Sample `json:"history"`
	// Damaged names the shards whose keys are damaged: their items are
	// not counted, except where the err hash alone is (its items are
	// counted, without backing_off; store.DamageError.ErrorsLost).
	Damaged []string `json:"damaged,omitempty"`
	// RedisOutOfMemory names each Redis master that refuses writes for
	// lack of memory (maxmemory reached under noeviction; see
	// store.ServerInfo.OutOfMemory): the daemons can neither claim nor
	// write their registry entries there, so Daemons and Workers may
	// count too few. Absent while every master takes writes.
	RedisOutOfMemory []string `json:"redis_out_of_memory,omitempty"`
	// WrongShard counts the copies of items planted in another shard
	// than their ids' (by hand, or by a daemon with another
	// redis.shards), which claims quarantine there: they are no items,
	// so neither Items nor Quarantined counts them, and the real item of
	// each id, in its own shard, is counted as any other (as the batch
	// report's wrong_shard_count). WrongShardPartial says that the scan
	// budget ran out first (store.CountWrongShard): there may be more,
	// still counted in Items and Quarantined. A copy no claim has met
	// yet is counted as an item.
	WrongShard        int  `json:"wrong_shard_count,omitempty"`
	WrongShardPartial bool `json:"wrong_shard_partial,omitempty"`
	// DataLoss is the last time Redis lost the deployment's data, as the
	// daemon that found it recorded it (store.LastDataLoss); absent when
	// none is recorded. `syncd status` prints this one, so the page and
	// status cannot disagree.
	DataLoss *store.DataLoss `json:"data_loss,omitempty"`
	// TargetState is the target's state as the store read it.
	TargetState store.TargetState `json:"-"`
	// DamagedShards are the damaged shards' errors (*store.DamageError).
	DamagedShards []error `json:"-"`
}

// ReadSummary reads the counts, the daemons and the target, in a fixed
// number of round trips whatever the item set's size (store.Counts,
// store.TargetState). A damaged shard is named in Damaged, not an error.
func ReadSummary(ctx context.Context, st *store.Store) (Summary, error) {
	c, err := st.Counts(ctx)
	damaged := store.Damages(err)
	if err != nil && damaged == nil {
		return Summary{}, err
	}
	ts, err := st.TargetState(ctx)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{NowMs: c.Now, Items: c.Items, Due: c.Due, InFlight: c.InFlight, BackingOff: c.BackingOff,
		Quarantined: c.Quarantined, OldestDueMs: c.OldestDueAge(), Daemons: c.Daemons, Workers: c.Workers,
		HeldOffShards: c.HeldOff, HeldOffUntilMs: c.HeldUntil,
		Target: targetOf(ts, 0), History: []Sample{}, TargetState: ts, DamagedShards: damaged}
	for _, d := range damaged {
		s.Damaged = append(s.Damaged, Plain(d, ""))
	}
	if err := s.countWrongShard(ctx, st); err != nil {
		return Summary{}, err
	}
	if s.DataLoss, err = st.LastDataLoss(ctx); err != nil {
		return Summary{}, err
	}
	// A user without INFO (not the README's ACL) reads the rest.
	if s.RedisOutOfMemory, err = st.OutOfMemory(ctx); err != nil && !store.IsPermission(err) {
		return Summary{}, err
	}
	return s, nil
}

// countWrongShard takes the copies planted in another shard than their
// ids' out of Items and Quarantined, and counts them in WrongShard. The
// shards Counts left out (damaged) are left out here too.
func (s *Summary) countWrongShard(ctx context.Context, st *store.Store) error {
	var skip []int
	for _, err := range s.DamagedShards {
		var d *store.DamageError
		if errors.As(err, &d) && !d.ErrorsLost {
			skip = append(skip, d.Shard)
		}
	}
	w, err := st.CountWrongShard(ctx, skip...)
	if err != nil && !errors.Is(err, store.ErrDamaged) { // damaged since Counts: named next time
		return err
	}
	s.WrongShard, s.WrongShardPartial = w.N, w.Partial
	s.Items, s.Quarantined = max(s.Items-int64(w.N), 0), max(s.Quarantined-int64(w.N), 0)
	return nil
}

func (a *api) summary(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := storeCtx(r)
	defer cancel()
	s, err := ReadSummary(ctx, a.st)
	if err != nil {
		a.storeFailed(w, err)
		return
	}
	s.Writable, s.Target = a.writable, nil
	if a.target != nil {
		s.Target = targetOf(s.TargetState, *a.target)
	}
	if a.hist != nil {
		s.History = a.hist.Samples()
	}
	writeJSON(w, http.StatusOK, s)
}

func (a *api) targetState(w http.ResponseWriter, r *http.Request) {
	if a.target == nil {
		writeError(w, http.StatusNotFound, "no target configured")
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	ts, err := a.st.TargetState(ctx)
	if err != nil {
		a.storeFailed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, targetOf(ts, *a.target))
}

// Item is one item in GET /api/v1/items.
type Item struct {
	ID string `json:"id"`
	// Shard is the shard the item was read from: its id's, but for a
	// copy planted in another, which a claim quarantines; two items with
	// one id are told apart by it.
	Shard      int    `json:"shard"`
	State      string `json:"state"`
	DueMs      int64  `json:"due_ms"` // 0 for a quarantined item
	WaitMs     int64  `json:"wait_ms"`
	LastSyncMs int64  `json:"last_sync_ms"`
	Owner      string `json:"owner"`
	Fence      uint64 `json:"fence"`
	Attempts   int    `json:"attempts"`
	LastError  string `json:"last_error"`
	Manual     bool   `json:"manual"`
}

// ItemOf makes an item's API form from what the store read at now.
func ItemOf(it store.ItemState, now int64) Item {
	out := Item{ID: it.ID, Shard: it.Shard, State: it.State, DueMs: it.Due, Fence: it.Fence, Attempts: it.Attempts,
		LastError: ItemError(it.ID, it.Error), Manual: it.Manual}
	if out.State == "" {
		out.State = it.StateAt(now)
	}
	if out.State == store.ItemDue {
		out.WaitMs = max(now-it.Due, 0)
	}
	if !it.LastSync.IsZero() {
		out.LastSyncMs = it.LastSync.UnixMilli()
	}
	switch {
	case it.Record != nil:
		out.Owner, out.Fence = it.Record.Owner.String(), it.Record.Fence
	case it.RecordErr != nil:
		out.Owner = "(unreadable record)"
	}
	return out
}

// ItemsPage is GET /api/v1/items.
type ItemsPage struct {
	Items      []Item   `json:"items"`
	NextCursor string   `json:"next_cursor"`
	Partial    bool     `json:"partial"`
	Damaged    []string `json:"damaged,omitempty"`
}

func (a *api) items(w http.ResponseWriter, r *http.Request) {
	q, ok := queryOnce(w, r) // ?state=due&state=all read as due (an outside trial)
	if !ok {
		return
	}
	lq := store.ListQuery{State: q.Get("state"), Prefix: q.Get("prefix"), Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.ListLimitMax {
			writeError(w, http.StatusBadRequest, "limit: "+Shown(v, 20)+" is not a number in 1.."+strconv.Itoa(store.ListLimitMax))
			return
		}
		lq.Limit = n
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	p, err := a.st.ListPage(ctx, lq)
	damaged := store.Damages(err)
	if err != nil && damaged == nil {
		a.storeFailed(w, err)
		return
	}
	out := ItemsPage{Items: make([]Item, len(p.Items)), NextCursor: p.Next, Partial: p.Partial}
	for i, it := range p.Items {
		out.Items[i] = ItemOf(it, p.Now)
	}
	for _, d := range damaged {
		out.Damaged = append(out.Damaged, Plain(d, ""))
	}
	writeJSON(w, http.StatusOK, out)
}
