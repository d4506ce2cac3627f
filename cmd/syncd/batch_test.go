package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// The batch summary lists a copy planted in another shard than its id's
// on a line of its own, with its shard and the fix, not among the
// quarantined items, whose ids the real items' are.
func TestWriteSummaryWrongShard(t *testing.T) {
	now := time.Now()
	var b bytes.Buffer
	writeSummary(&b, &engine.Report{Items: 3, Synced: 3, Started: now, Finished: now.Add(time.Second),
		WrongShard: []store.ShardItem{{ID: "fine-1", Shard: 1}, {ID: "\x1b[2J", Shard: 0}}, WrongShardCount: 2})
	out := b.String()
	for _, want := range []string{"quarantined                0  \n", `wrong shard                2  fine-1 (shard 1) \x1b[2J (shard 0)`, "syncd items remove --shard N"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// The sync durations are of the syncs that succeeded here: with none,
// the summary says so, where it printed "0s / 0s / 0s" (an outside
// trial, every attempt failed).
func TestWriteSummaryNoneSynced(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		rep  engine.Report
		want string
	}{
		{engine.Report{Items: 3, Failed: 3, Started: now, Finished: now.Add(time.Second)}, "(no sync succeeded in this process)"},
		{engine.Report{Items: 3, Synced: 3, Started: now, Finished: now.Add(time.Second), SyncP50: time.Millisecond, SyncP99: 2 * time.Millisecond, SyncMax: 3 * time.Millisecond}, "1ms / 2ms / 3ms"},
	} {
		var b bytes.Buffer
		writeSummary(&b, &tt.rep)
		if out := b.String(); !strings.Contains(out, tt.want) || strings.Contains(out, "0s / 0s / 0s") {
			t.Errorf("summary of %d synced lacks %q:\n%s", tt.rep.Synced, tt.want, out)
		}
	}
}

// --report is opened before the run: a path that cannot be written is
// refused at once, exit 2, with nothing synced. It was written after the
// run, which an outside trial saw sync 100 items over 14 s, then fail
// with "--report: open ...: no such file or directory", exit 1 (the code
// of "some quarantined").
func TestBatchReportPathCheckedFirst(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "b.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: rep\nownership:\n  ttl: 1s\nitems:\n  ids: [a, b]\n", srv.Addr()))
	dir := t.TempDir()
	for _, tc := range []struct{ path, err string }{
		{filepath.Join(dir, "nodir", "rep.json"), "syncd batch: --report " + filepath.Join(dir, "nodir", "rep.json") + ": no such file or directory\n"},
		{dir, "syncd batch: --report " + dir + ": is a directory\n"},
	} {
		code, out, stderr := syncd("batch", "-c", cfg, "--report", tc.path)
		if code != exitUsage || out != "" || stderr != tc.err {
			t.Errorf("batch --report %s: exit %d, stdout %q, stderr %q; want exit %d, no report, %q", tc.path, code, out, stderr, exitUsage, tc.err)
		}
	}
	if n := srv.Client(t).DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys in redis: a batch run started before --report was refused", n)
	}
	rep := filepath.Join(dir, "rep.json")
	os.WriteFile(rep, []byte(strings.Repeat("an older, longer report\n", 100)), 0o644)
	if code, _, stderr := syncd("batch", "-c", cfg, "--report", rep); code != exitOK {
		t.Fatalf("batch --report %s: exit %d, %s", rep, code, stderr)
	}
	var got struct{ Items, Synced int }
	b, _ := os.ReadFile(rep)
	if err := json.Unmarshal(b, &got); err != nil || got.Items != 2 || got.Synced != 2 {
		t.Errorf("report %s: %+v, %v:\n%s", rep, got, err, b)
	}
}
