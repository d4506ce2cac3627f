package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

// get fetches url and decodes its JSON into out, returning the status.
func get(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", url, ct)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %d, %q is not JSON: %v", url, resp.StatusCode, b, err)
	}
	return resp.StatusCode
}

// failItem claims id and releases it as failed with msg.
func failItem(t *testing.T, st *store.Store, id, msg string, delay time.Duration) {
	t.Helper()
	ctx := t.Context()
	sh := st.Keys().Shard(id)
	if _, err := st.MarkEpoch(ctx, sh, 0); err != nil {
		t.Fatal(err)
	}
	rec := &store.Record{Version: store.RecordVersion, Token: store.NewToken(), State: store.StateSyncing,
		Owner: store.Owner{Host: "h", PID: 1, Run: "r"}}
	res, err := st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: sh, IDs: []string{id}, Records: []*store.Record{rec}, TTL: time.Minute})
	if err != nil || res.Items[0].Code != store.ClaimOK {
		t.Fatalf("claim %s: %+v, %v", id, res, err)
	}
	st.Release(ctx, sh, []store.ReleaseRequest{{ID: id, Token: rec.Token, Kind: store.ReleaseFailed, Delay: delay, Error: msg}})
}

// The read routes: summary, items by state and prefix with paging, one
// item with its errors, owners and the target; bad input gets 400,
// an unknown item 404.
func TestAPIReads(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	st.Add(ctx, "cust-1", "cust-2", "cust-3", "other", "q")
	setDue(t, st, "cust-1", -time.Minute, false)
	setDue(t, st, "cust-2", -time.Second, false)
	setDue(t, st, "q", 0, true)
	failItem(t, st, "other", "boom\x1b[31m", time.Hour)
	st.WriteDaemon(ctx, store.DaemonInfo{ID: "h:1", Host: "h", PID: 1, Workers: 3, InFlight: []string{"x"}}, time.Minute)
	srv, _ := apiServer(t, st, "", WithTarget(7))

	var sum Summary
	if code := get(t, srv.URL+"/api/v1/summary", &sum); code != 200 || sum.Items != 5 || sum.Due != 3 || sum.Quarantined != 1 ||
		sum.BackingOff != 1 || sum.InFlight != 1 || sum.Daemons != 1 || sum.Workers != 3 || sum.OldestDueMs < 59000 ||
		sum.Writable || sum.Target == nil || sum.Target.State != "closed" || sum.Target.Limit != 7 || sum.History == nil {
		t.Errorf("summary: %d %+v", code, sum)
	}
	var page ItemsPage
	get(t, srv.URL+"/api/v1/items?state=due&limit=2", &page)
	if got := []string{page.Items[0].ID, page.Items[1].ID}; !cmp.Equal(got, []string{"cust-1", "cust-2"}) || page.NextCursor == "" ||
		page.Items[0].WaitMs < 59000 || page.Items[0].State != "due" {
		t.Errorf("due page: %+v", page)
	}
	next := page.NextCursor
	page = ItemsPage{}
	get(t, srv.URL+"/api/v1/items?state=due&limit=2&cursor="+url.QueryEscape(next), &page)
	if len(page.Items) != 1 || page.Items[0].ID != "cust-3" || page.NextCursor != "" {
		t.Errorf("second due page: %+v", page)
	}
	page = ItemsPage{}
	get(t, srv.URL+"/api/v1/items?prefix=cust-&state=all", &page)
	if len(page.Items) != 3 {
		t.Errorf("prefix cust-: %+v", page)
	}
	page = ItemsPage{}
	get(t, srv.URL+"/api/v1/items?state=backing_off", &page)
	if len(page.Items) != 1 || page.Items[0].ID != "other" || page.Items[0].Attempts != 1 || page.Items[0].LastError == "" {
		t.Errorf("backing off: %+v", page)
	}
	var d ItemDetail
	if code := get(t, srv.URL+"/api/v1/items/other", &d); code != 200 || d.State != "backing_off" || len(d.Errors) != 1 ||
		d.Errors[0].Error != "boom\x1b[31m" || d.Errors[0].AtMs == 0 || d.Errors[0].Fence == 0 || d.LeaseLeftMs != 0 {
		t.Errorf("item other: %d %+v", code, d)
	}
	d = ItemDetail{}
	if code := get(t, srv.URL+"/api/v1/items/q", &d); code != 200 || !d.Quarantined || d.State != "quarantined" || d.Errors == nil {
		t.Errorf("item q: %d %+v", code, d)
	}
	var owners Owners
	if get(t, srv.URL+"/api/v1/owners", &owners); len(owners.Daemons) != 1 || owners.Daemons[0].Workers != 3 ||
		!cmp.Equal(owners.Daemons[0].InFlight, []string{"x"}) || owners.Daemons[0].HeartbeatAgeMs > 10000 {
		t.Errorf("owners: %+v", owners)
	}
	var tg Target
	if code := get(t, srv.URL+"/api/v1/target", &tg); code != 200 || tg.State != "closed" || tg.Limit != 7 {
		t.Errorf("target: %d %+v", code, tg)
	}

	for path, want := range map[string]int{
		"/api/v1/items?limit=0":         400,
		"/api/v1/items?limit=501":       400,
		"/api/v1/items?limit=x":         400,
		"/api/v1/items?state=sleeping":  400,
		"/api/v1/items?cursor=garbage!": 400,
		"/api/v1/items/nope":            404,
		"/api/v1/nothing":               404,
		"/api/v1/items/%01":             404,
	} {
		var e errorBody
		if code := get(t, srv.URL+path, &e); code != want || e.Error == "" {
			t.Errorf("GET %s: %d %q, want %d and an error", path, code, e.Error, want)
		}
	}
	// A parameter given twice, or one that cannot be read, is refused as
	// the actions refuse it: ?state=due&state=all was read as due (an
	// outside trial), and a pair URL.Query cannot parse was dropped.
	for path, want := range map[string]string{
		"/api/v1/items?state=due&state=all":      "query: state given 2 times",
		"/api/v1/items?limit=1&prefix=a&limit=2": "query: limit given 2 times",
		"/api/v1/items?state=due&prefix=%ZZ":     `query: invalid URL escape "%ZZ"`,
	} {
		var e errorBody
		if code := get(t, srv.URL+path, &e); code != 400 || e.Error != want {
			t.Errorf("GET %s: %d %q, want 400 %q", path, code, e.Error, want)
		}
	}
	noTarget, _ := apiServer(t, st, "")
	var e errorBody
	if code := get(t, noTarget.URL+"/api/v1/target", &e); code != 404 || e.Error != "no target configured" {
		t.Errorf("target without one: %d %q", code, e.Error)
	}
}

// An item whose shard's err hash is damaged says its last error is
// unknown (errors_lost and a note naming the key), and a copy planted
// in another shard than its id's is found there, with the fix. Before,
// the first answered last_error "" with no hint, and the second 404.
func TestAPIItemDamageNotes(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	const id, planted = "cust-1", "cust-2"
	st.Add(ctx, id)
	sh := st.Keys().Shard(id)
	st.Client().Set(ctx, st.Keys().Errors(sh), "garbage", 0)
	home := st.Keys().Shard(planted)
	other := (home + 1) % st.Keys().Shards()
	st.Client().ZAdd(ctx, st.Keys().Due(other), redis.Z{Score: math.Inf(1), Member: planted})
	srv, _ := apiServer(t, st, "")

	var d ItemDetail
	if code := get(t, srv.URL+"/api/v1/items/"+id, &d); code != 200 || !d.ErrorsLost || d.LastError != "" || d.WrongShard ||
		!strings.Contains(d.Note, "last error unknown: shard "+fmt.Sprint(sh)+": "+st.Keys().Errors(sh)+" is a string, want a hash") {
		t.Errorf("item %s with its err hash damaged: %d %+v; want errors_lost and a note naming %s", id, code, d, st.Keys().Errors(sh))
	}
	d = ItemDetail{}
	want := fmt.Sprintf("in shard %d, not its own (%d): syncd items remove --shard %d", other, home, other)
	if code := get(t, srv.URL+"/api/v1/items/"+planted, &d); code != 200 || d.ID != planted || d.Shard != other ||
		!d.WrongShard || !d.Quarantined || d.Note != want {
		t.Errorf("item %s planted in shard %d: %d %+v; want it found there, with note %q", planted, other, code, d, want)
	}
	// Its own shard first: the real item, no note.
	st.Add(ctx, planted)
	d = ItemDetail{}
	if code := get(t, srv.URL+"/api/v1/items/"+planted, &d); code != 200 || d.Shard != home || d.WrongShard || d.Note != "" {
		t.Errorf("item %s in its own shard too: %d %+v; want its own shard %d's, no note", planted, code, d, home)
	}
}

// The summary counts a copy planted in another shard than its id's
// apart, as the batch report does (wrong_shard_count): it is no item,
// and its id's real item is counted as any other. Before, it counted 3
// items, 1 quarantined, where the set held 2 items, none quarantined.
func TestAPISummaryWrongShard(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	st.Add(ctx, "a", "b")
	other := (st.Keys().Shard("a") + 1) % st.Keys().Shards()
	st.Client().ZAdd(ctx, st.Keys().Due(other), redis.Z{Score: math.Inf(1), Member: "a"})
	srv, _ := apiServer(t, st, "")

	var sum Summary
	if code := get(t, srv.URL+"/api/v1/summary", &sum); code != 200 || sum.Items != 2 || sum.Quarantined != 0 ||
		sum.WrongShard != 1 || sum.WrongShardPartial {
		t.Errorf("summary with a copy in shard %d: %d, %d items, %d quarantined, %d copies (partial %t); want 2, 0 and 1",
			other, code, sum.Items, sum.Quarantined, sum.WrongShard, sum.WrongShardPartial)
	}
}

// nopSink syncs nothing, successfully.
type nopSink struct{}

func (nopSink) Sync(context.Context, sinks.Item) error { return nil }
func (nopSink) Close() error                           { return nil }

// The summary carries the last data loss a daemon recorded (data_loss),
// the one `syncd status` prints, and none before Redis lost any data.
// Before, status read it and the summary, so the page, did not.
func TestAPISummaryDataLoss(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	ids := []string{"a", "b"}
	st.Add(ctx, ids...)
	st.AddByHand(ctx, "by-hand")
	srv, _ := apiServer(t, st, "")
	raw := map[string]json.RawMessage{}
	if get(t, srv.URL+"/api/v1/summary", &raw); raw["data_loss"] != nil {
		t.Errorf("summary before any loss has data_loss %s", raw["data_loss"])
	}

	e, err := engine.New(st, nopSink{}, engine.Config{Workers: 1, Interval: 200 * time.Millisecond, Poll: 5 * time.Millisecond,
		Items:     engine.ItemsConfig{Source: func(context.Context) ([]string, error) { return ids, nil }},
		Ownership: ownership.Config{TTL: 500 * time.Millisecond},
		Logger:    zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	e.Start(ctx)
	// The monitor reads the marker and counts the items (3) before the
	// loss, and finds the loss on a later tick.
	time.Sleep(2 * time.Second)
	st.Client().FlushAll(ctx)
	// Decoded by its JSON name, as the page reads it.
	var sum struct {
		DataLoss *store.DataLoss `json:"data_loss"`
	}
	testutil.WaitFor(t, 10*time.Second, 50*time.Millisecond, "the data loss in the summary", func() bool {
		sum.DataLoss = nil
		get(t, srv.URL+"/api/v1/summary", &sum)
		return sum.DataLoss != nil && sum.DataLoss.Restored == 2
	})
	want, err := st.LastDataLoss(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sum.DataLoss, want); diff != "" {
		t.Errorf("summary data_loss differs from store.LastDataLoss (-got +want):\n%s", diff)
	}
	if l := sum.DataLoss; l.Count != 1 || l.Lost != 1 || l.At.IsZero() || l.By == "" {
		t.Errorf("summary data_loss = %+v; want counted once, 1 lost, with its time and finder", l)
	}
}

// POSTs need application/json and, with an Origin, the same host.
func TestAPICSRF(t *testing.T) {
	st := newStore(t)
	st.Add(t.Context(), "a")
	srv, _ := apiServer(t, st, testToken)
	post := func(ct, origin string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/items/requeue", strings.NewReader(`{"ids": ["a"]}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tt := range []struct {
		ct, origin string
		code       int
	}{
		{"", "", 415},
		{"text/plain", "", 415},
		{"application/x-www-form-urlencoded", "", 415},
		{"application/json", "http://evil.example", 403},
		{"application/json", "null", 403},
		{"application/json", "http://" + host, 200},
		{"application/json; charset=utf-8", "", 200},
	} {
		if code := post(tt.ct, tt.origin); code != tt.code {
			t.Errorf("Content-Type %q, Origin %q: %d, want %d", tt.ct, tt.origin, code, tt.code)
		}
	}
}

// Requeue brings a quarantined item back; release force-releases a
// claim; both name what they did nothing with. Unknown IDs get 404 naming
// them, as the trigger routes answer (the known ones are acted on all the
// same); they got 200, even when no ID was known.
func TestAPIRequeueRelease(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	st.Add(ctx, "q", "held", "free")
	setDue(t, st, "q", 0, true)
	srv, _ := apiServer(t, st, testToken)
	auth := "Bearer " + testToken
	const nope = "1 unknown id (not in the item set; syncd items add adds it): nope"
	r := callRaw(t, srv.URL+"/api/v1/items/requeue", auth, `{"ids": ["q", "nope"]}`)
	if r.code != 404 || r.body["requeued"] != float64(1) || !cmp.Equal(r.body["unknown"], []any{"nope"}) || r.body["error"] != nope {
		t.Errorf("requeue: %d %v", r.code, r.body)
	}
	for _, route := range []string{"requeue", "release"} {
		r := callRaw(t, srv.URL+"/api/v1/items/"+route, auth, `{"ids": ["nope", "nope2"]}`)
		if r.code != 404 || r.body[route+"d"] != float64(0) || !cmp.Equal(r.body["unknown"], []any{"nope", "nope2"}) ||
			r.body["error"] != "2 unknown ids (not in the item set; syncd items add adds them): nope, nope2" {
			t.Errorf("%s of unknown ids only: %d %v; want 404 naming them", route, r.code, r.body)
		}
	}
	if r := callRaw(t, srv.URL+"/api/v1/items/requeue", auth, `{"ids": ["q"]}`); r.code != 200 || r.body["error"] != nil {
		t.Errorf("requeue of a known id: %d %v", r.code, r.body)
	}
	if d := testutil.DueIn(t, st, "q"); d > 0 {
		t.Errorf("q due in %v after requeue", d)
	}
	sh := st.Keys().Shard("held")
	st.MarkEpoch(ctx, sh, 0)
	rec := &store.Record{Version: store.RecordVersion, Token: store.NewToken(), State: store.StateSyncing, Owner: store.Owner{Host: "h"}}
	st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: sh, IDs: []string{"held"}, Records: []*store.Record{rec}, TTL: time.Minute})
	r = callRaw(t, srv.URL+"/api/v1/items/release", auth, `{"ids": ["held", "free", "nope"]}`)
	if r.code != 404 || r.body["released"] != float64(1) || !cmp.Equal(r.body["not_held"], []any{"free"}) ||
		!cmp.Equal(r.body["unknown"], []any{"nope"}) || r.body["error"] != nope {
		t.Errorf("release: %d %v", r.code, r.body)
	}
	for _, body := range []string{`{"ids": []}`, `{}`, `{"ids": ["a\u0001"]}`, `{"ids": ["a"], "x": 1}`} {
		if r := callRaw(t, srv.URL+"/api/v1/items/requeue", auth, body); r.code != 400 {
			t.Errorf("requeue %s: %d, want 400", body, r.code)
		}
	}
}

type rawReply struct {
	code int
	body map[string]any
}

func callRaw(t *testing.T, url, auth, body string) rawReply {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return rawReply{resp.StatusCode, out}
}

// The history keeps a sample per tick, oldest first, at most keep.
func TestHistory(t *testing.T) {
	st := newStore(t)
	st.Add(t.Context(), "a")
	var ok int64
	h := NewHistory(st, func() (int64, int64) { ok += 3; return ok, 1 })
	h.keep = 3
	for range 5 {
		h.sample(t.Context())
	}
	s := h.Samples()
	if len(s) != 3 || s[0].SyncsOK != 3 || s[2].Due != 1 || s[0].TMs > s[2].TMs {
		t.Errorf("samples %+v", s)
	}
}
