package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// statusOut runs syncd status -c cfg args and returns its output.
func statusOut(t *testing.T, cfg string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runMain(append([]string{"status", "-c", cfg}, args...), &out, &errb); code != exitOK {
		t.Fatalf("status: exit %d, %s", code, errb.String())
	}
	return out.String()
}

// status shows the target's breaker: up, then unavailable with its last
// error and next probe, in text and JSON.
func TestStatusShowsTarget(t *testing.T) {
	cfg, st := adminConfig(t, "tg")
	ctx := context.Background()
	status := func(args ...string) string { return statusOut(t, cfg, args...) }
	if out := status(); !strings.Contains(out, "\ntarget: up (breaker opened 0 times") {
		t.Errorf("status of a healthy target:\n%s", out)
	}
	if _, err := st.TargetReport(ctx, store.ReportParams{Outcome: store.TargetFailed, RetryAfter: 30 * time.Second,
		ProbeEvery: time.Second, Reason: "status 503 Service Unavailable"}); err != nil {
		t.Fatal(err)
	}
	if out := status(); !strings.Contains(out, "\ntarget: UNAVAILABLE for 0s") || !strings.Contains(out, "next probe in 30s") ||
		!strings.Contains(out, "status 503 Service Unavailable") {
		t.Errorf("status of an unavailable target:\n%s", out)
	}
	var got struct{ Summary summary }
	if err := json.Unmarshal([]byte(status("--json")), &got); err != nil {
		t.Fatal(err)
	}
	if tg := got.Summary.Target; tg.State != "unavailable" || tg.Opens != 1 || tg.NextProbe == nil || tg.LastError == "" {
		t.Errorf("status --json target = %+v", tg)
	}
}

// status marks items added by hand, which no reconcile removes.
func TestStatusMarksManualItems(t *testing.T) {
	cfg, st := adminConfig(t, "man")
	ctx := context.Background()
	st.Add(ctx, "from-config")
	var out, errb bytes.Buffer
	if code := runMain([]string{"items", "add", "-c", cfg, "by-hand"}, &out, &errb); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb.String())
	}
	out.Reset()
	if code := runMain([]string{"status", "-c", cfg}, &out, &errb); code != exitOK {
		t.Fatalf("status: exit %d, %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "by-hand (manual)") || strings.Contains(out.String(), "from-config (manual)") {
		t.Errorf("status does not mark the item added by hand, and only it:\n%s", out.String())
	}
}

// status says when --limit cut the list short.
func TestStatusSaysWhenTruncated(t *testing.T) {
	cfg, st := adminConfig(t, "trunc")
	st.Add(context.Background(), "a", "b", "c")
	var out, errb bytes.Buffer
	if code := runMain([]string{"status", "-c", cfg, "--limit", "2"}, &out, &errb); code != exitOK {
		t.Fatalf("status: exit %d, %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "showing 2 of 3 items; use --limit (0: all) or --cursor ") {
		t.Errorf("status does not say the list was cut:\n%s", out.String())
	}
	out.Reset()
	runMain([]string{"status", "-c", cfg}, &out, &errb)
	if strings.Contains(out.String(), "showing ") {
		t.Errorf("status says the list was cut when it was not:\n%s", out.String())
	}
}

// status says when claims wait out a hold-off (a new deployment waits one
// ttl): an operator saw due items and nothing syncing for 30 s, and no
// reason anywhere.
func TestStatusSaysClaimsWait(t *testing.T) {
	cfg, st := adminConfig(t, "hold")
	ctx := context.Background()
	st.Add(ctx, "a")
	status := func(args ...string) string { return statusOut(t, cfg, args...) }
	if out := status(); strings.Contains(out, "claims wait") {
		t.Errorf("status with no hold-off:\n%s", out)
	}
	if _, err := st.MarkEpoch(ctx, 1, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if out := status(); !strings.Contains(out, "claims wait: 1 shard held off for up to 2") {
		t.Errorf("status while a shard is held off:\n%s", out)
	}
	var got struct{ Summary summary }
	if err := json.Unmarshal([]byte(status("--json")), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Summary; s.HeldOffShards != 1 || s.HeldOffLeftMs <= 19000 || s.HeldOffLeftMs > 20000 {
		t.Errorf("status --json: %d shards held off for %d ms; want 1 for about 20000", s.HeldOffShards, s.HeldOffLeftMs)
	}
}

// status shows an item's last error and the target's without the sink's
// name, and the item's without its own id, which its row names: an
// outside trial read "exec:" and "http:" as syncd's internals. The
// target's keeps the item whose sync it was.
func TestStatusErrorsWithoutSinkName(t *testing.T) {
	cfg, st := adminConfig(t, "sinkname")
	ctx := context.Background()
	st.Add(ctx, "a")
	sh := st.Keys().Shard("a")
	if _, err := st.MarkEpoch(ctx, sh, 0); err != nil {
		t.Fatal(err)
	}
	rec := &store.Record{Version: store.RecordVersion, Token: store.NewToken(), State: store.StateSyncing,
		Owner: store.Owner{Host: "h", PID: 1, Run: "r"}}
	if res, err := st.ClaimIDs(ctx, store.ClaimIDsParams{Shard: sh, IDs: []string{"a"}, Records: []*store.Record{rec}, TTL: time.Minute}); err != nil || res.Items[0].Code != store.ClaimOK {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	if _, err := st.Release(ctx, sh, []store.ReleaseRequest{{ID: "a", Token: rec.Token, Kind: store.ReleaseFailed,
		Delay: time.Hour, Error: `exec: item "a": exit status 3; stderr: "boom"`}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TargetReport(ctx, store.ReportParams{Outcome: store.TargetFailed, RetryAfter: 30 * time.Second,
		ProbeEvery: time.Second, Reason: `http: item "a": target unavailable: status 503`}); err != nil {
		t.Fatal(err)
	}
	out := statusOut(t, cfg)
	if !strings.Contains(out, "  exit status 3; stderr: \"boom\"\n") || !strings.HasSuffix(out, `: item "a": target unavailable: status 503`+"\n") ||
		strings.Contains(out, "exec:") || strings.Contains(out, "http:") {
		t.Errorf("status:\n%s", out)
	}
	var got struct {
		Summary summary
		Items   []itemRow
	}
	if err := json.Unmarshal([]byte(statusOut(t, cfg, "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 1 || got.Items[0].LastError != `exit status 3; stderr: "boom"` ||
		got.Summary.Target.LastError != `item "a": target unavailable: status 503` {
		t.Errorf("status --json: items %+v, target %+v", got.Items, got.Summary.Target)
	}
}

// An item planted in another shard than its id's shows in status as a
// row of its own, told apart by its shard in --json, with its whole
// error, fix included, even at 1024 shards: the old text was cut at
// "never..." and the rows had no shard.
func TestStatusShowsPlantedCopy(t *testing.T) {
	cfg, st := adminConfig(t, "pc")
	ctx := context.Background()
	const id = "customer-7"
	home := st.Keys().Shard(id)
	other := (home + 1) % 4
	st.Add(ctx, id)
	msg := "in shard 1023, not its own (1022): syncd items remove --shard 1023"
	st.Client().ZAdd(ctx, st.Keys().Due(other), redis.Z{Score: math.Inf(1), Member: id})
	st.Client().HSet(ctx, st.Keys().Errors(other), id, msg)
	if out := statusOut(t, cfg); !strings.Contains(out, msg+"\n") {
		t.Errorf("status does not show the whole error %q:\n%s", msg, out)
	}
	var got struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(statusOut(t, cfg, "--json")), &got); err != nil {
		t.Fatal(err)
	}
	shards := map[any]any{}
	for _, r := range got.Items {
		shards[r["shard"]] = r["state"]
	}
	if want := map[any]any{float64(home): "due", float64(other): "quarantined"}; fmt.Sprint(shards) != fmt.Sprint(want) {
		t.Errorf("status --json rows by shard: %v, want %v", shards, want)
	}
}
