package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
