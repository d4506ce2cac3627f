package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// status --watch on a Redis that holds no deployment yet waits for one,
// saying so, and shows it once it is there, where it ended at once with
// "no deployment" (exit 1), as status without --watch still does.
func TestStatusWatchWaitsForDeployment(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: w\n  shards: 4\nlog:\n  format: json\n", srv.Addr()))
	if code, _, errb := syncd("status", "-c", cfg); code != exitFailed || !strings.Contains(errb, "no deployment") {
		t.Errorf("status on an empty redis: exit %d, stderr %q; want exit 1, no deployment", code, errb)
	}
	f := newFlags("status", io.Discard)
	if _, err := f.parse([]string{"-c", cfg}); err != nil {
		t.Fatal(err)
	}
	st, err := adminOpenRead(t.Context(), f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var out testutil.Buffer
	done := make(chan error, 1)
	go func() { done <- watchStatus(ctx, st, statusOpts{limit: 100}, 100*time.Millisecond, &out) }()
	waiting := fmt.Sprintf("waiting for a deployment in redis (%s) under key prefix \"w\"", srv.Addr())
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the waiting line", func() bool { return strings.Contains(out.String(), waiting) })
	if code, _, errb := syncd("items", "add", "watched-item", "-c", cfg); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the item", func() bool { return strings.Contains(out.String(), "watched-item") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("watchStatus after Ctrl-C = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watchStatus did not end with its ctx")
	}
	screens := strings.Split(out.String(), "status at ")
	if last := screens[len(screens)-1]; strings.Contains(last, "waiting") || !strings.Contains(last, "1 item") {
		t.Errorf("the last screen:\n%s\nwant the deployment's status", last)
	}
}

// status --watch into a file (not a terminal) writes each refresh after
// the last, text after a blank line and a line with its time, JSON as a
// stream of documents, and no escape: it wrote the ones that clear a
// terminal's screen into the file (an outside trial).
func TestStatusWatchNotTerminal(t *testing.T) {
	cfg, st := adminConfig(t, "wf")
	if _, err := st.Add(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	f := newFlags("status", io.Discard)
	if _, err := f.parse([]string{"-c", cfg}); err != nil {
		t.Fatal(err)
	}
	rst, err := adminOpenRead(t.Context(), f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer rst.Close()
	for _, asJSON := range []bool{false, true} {
		out, err := os.Create(filepath.Join(t.TempDir(), "w.out"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		read := func() string { b, _ := os.ReadFile(out.Name()); return string(b) }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- watchStatus(ctx, rst, statusOpts{limit: 100, asJSON: asJSON}, 100*time.Millisecond, out)
		}()
		each := "1 item:" // a line of each refresh
		if asJSON {
			each = `"summary"`
		}
		for deadline := time.Now().Add(10 * time.Second); strings.Count(read(), each) < 3; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("json %v: no three refreshes in 10s:\n%s", asJSON, read())
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watchStatus after Ctrl-C = %v, want nil", err)
		}
		got := read()
		if strings.Contains(got, "\x1b") {
			t.Errorf("json %v: an escape in the output:\n%q", asJSON, got)
		}
		if asJSON {
			dec := json.NewDecoder(strings.NewReader(got))
			n := 0
			for ; dec.More(); n++ {
				var doc struct{ Summary summary }
				if err := dec.Decode(&doc); err != nil || doc.Summary.Items != 1 {
					t.Fatalf("refresh %d: %+v, %v", n, doc, err)
				}
			}
			if n < 3 {
				t.Errorf("%d JSON documents, want 3 or more:\n%s", n, got)
			}
			continue
		}
		screens := strings.Split(got, "\n\nstatus at ")
		if len(screens) < 3 || !strings.HasPrefix(screens[0], "status at ") {
			t.Errorf("text: want refreshes each after a blank line and its time:\n%s", got)
		}
	}
}

// A bad --watch interval is a usage error that says what to give, on
// one line: --watch=0s said `invalid boolean value "0s" for -watch`
// (package flag's words for a bool flag) and printed every flag after it
// (an outside trial).
func TestStatusWatchInterval(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--watch=0s"}, "syncd status: --watch: 0s is too short: give a duration of at least 100ms\n"},
		{[]string{"--watch=-1s"}, "syncd status: --watch: -1s is too short: give a duration of at least 100ms\n"},
		{[]string{"--watch=soon"}, `syncd status: --watch: "soon" is not a duration: give one of at least 100ms, such as --watch=5s` + "\n"},
		// The first bad one is told, as package flag tells it.
		{[]string{"--watch=0s", "--watch=5s", "--watch=x"}, "syncd status: --watch: 0s is too short: give a duration of at least 100ms\n"},
		{[]string{"--watch=5s"}, "syncd status: /nonexistent/config.yaml: no such file or directory\n"},
	} {
		code, out, errb := syncd(append([]string{"status", "-c", "/nonexistent/config.yaml"}, tt.args...)...)
		if code != exitUsage || out != "" || errb != tt.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q", tt.args, code, out, errb, exitUsage, tt.want)
		}
	}
}

// The summary line says that the items backing off are some of the
// items, counted among the due or in flight too, not a count to add to
// theirs: "10 items: 10 due, 0 in flight, 4 backing off" read as 14
// items (an outside trial).
func TestStatusSummaryBackingOffSubset(t *testing.T) {
	var out strings.Builder
	sum := summary{Items: 10, Due: 10, BackingOff: 4, OldestWait: "5s", Daemons: 1, Workers: 4, Redis: "127.0.0.1:6379",
		Target: targetSummary{State: "up"}}
	printStatus(&out, sum, nil, statusOpts{}, 0)
	want := "10 items: 10 due, 0 in flight, 0 quarantined; 4 of the 10 backing off after a failure (those due or in flight counted there too); " +
		"oldest wait 5s; 1 daemon, 4 workers (127.0.0.1:6379)\n"
	if !strings.Contains(out.String(), "\n\n"+want) {
		t.Errorf("status:\n%s\nwant the line\n%s", out.String(), want)
	}
}

// status on a Redis out of memory says so under its count of daemons,
// which registry entries that cannot be written leave too low, and
// names the master in --json's redis_out_of_memory; an outside trial saw
// "0 daemons, 0 workers" as a fact while two daemons ran.
func TestStatusRedisOutOfMemory(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: oom\n  shards: 4\nlog:\n  format: json\n", srv.Addr()))
	if code, _, errb := syncd("items", "add", "a", "b", "-c", cfg); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	warning := fmt.Sprintf("warning: redis %s is out of memory (maxmemory reached, maxmemory-policy noeviction) and refuses writes: daemons cannot claim, release or register, so the daemon count may be low", srv.Addr())
	if code, out, errb := syncd("status", "-c", cfg); code != exitOK || strings.Contains(out, "out of memory") {
		t.Errorf("status with memory to spare: exit %d, stdout:\n%s\nstderr: %s\nwant exit 0 and no out-of-memory line", code, out, errb)
	}
	free := srv.FillMemory(t)
	code, out, errb := syncd("status", "-c", cfg)
	if code != exitOK || !strings.Contains(out, "0 daemons, 0 workers ("+srv.Addr()+")\n"+warning) {
		t.Errorf("status out of memory: exit %d, stdout:\n%s\nstderr: %s\nwant exit 0 and under the count:\n%s", code, out, errb, warning)
	}
	code, out, errb = syncd("status", "--json", "-c", cfg)
	var got struct {
		Summary struct {
			Daemons          *int     `json:"daemons"`
			RedisOutOfMemory []string `json:"redis_out_of_memory"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil {
		t.Fatalf("status --json out of memory: exit %d, %v, stderr: %s", code, err, errb)
	}
	if s := got.Summary; s.Daemons == nil || len(s.RedisOutOfMemory) != 1 || s.RedisOutOfMemory[0] != srv.Addr() {
		t.Errorf("status --json out of memory: daemons present %t, redis_out_of_memory %q; want daemons kept and [%q]", s.Daemons != nil, s.RedisOutOfMemory, srv.Addr())
	}
	free()
	if code, out, _ := syncd("status", "--json", "-c", cfg); code != exitOK || strings.Contains(out, "redis_out_of_memory") {
		t.Errorf("status --json once memory is freed: exit %d, stdout:\n%s\nwant no redis_out_of_memory", code, out)
	}
}

// While Redis hangs (SIGSTOP), status --watch goes on: a refresh says
// Redis gives no answer, within watchTimeout, and the status comes back
// when Redis does. Before, the last refresh stayed on screen for as long
// as go-redis retried, with nothing said (10 s of a 14 s hang).
func TestStatusWatchRedisHung(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: wh\n  shards: 4\nlog:\n  format: json\n", srv.Addr()))
	if code, _, errb := syncd("items", "add", "hung-item", "-c", cfg); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	f := newFlags("status", io.Discard)
	if _, err := f.parse([]string{"-c", cfg}); err != nil {
		t.Fatal(err)
	}
	st, err := adminOpenRead(t.Context(), f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var out testutil.Buffer
	done := make(chan error, 1)
	go func() { done <- watchStatus(ctx, st, statusOpts{limit: 100}, 200*time.Millisecond, &out) }()
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the item", func() bool { return strings.Contains(out.String(), "hung-item") })
	srv.Pause(t)
	paused := time.Now()
	want := fmt.Sprintf("redis (%s) not answering: ", srv.Addr())
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the refresh saying redis does not answer", func() bool { return strings.Contains(out.String(), want) })
	if took := time.Since(paused); took > watchTimeout+2*time.Second {
		t.Errorf("status --watch said redis does not answer %v after the pause, want within %v", took.Round(time.Millisecond), watchTimeout+2*time.Second)
	}
	srv.Resume(t)
	testutil.WaitFor(t, 15*time.Second, 10*time.Millisecond, "the status again", func() bool {
		screens := strings.Split(out.String(), "status at ")
		return strings.Contains(screens[len(screens)-1], "hung-item")
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("watchStatus after Ctrl-C = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watchStatus did not end with its ctx")
	}
}

// status counts a copy planted in another shard than its id's apart
// from the items, in the batch report's words (wrong shard ... copies
// planted in another shard than their id's), and --json gives it as
// wrong_shard_count. Before, status said "3 items: ..., 1 quarantined"
// of a set of 2 items, none quarantined, and nothing of the copy.
func TestStatusWrongShard(t *testing.T) {
	cfg, st := adminConfig(t, "ws")
	if code, _, errb := syncd("items", "add", "a", "b", "-c", cfg); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	other := (st.Keys().Shard("a") + 1) % 4
	st.Client().ZAdd(t.Context(), st.Keys().Due(other), redis.Z{Score: math.Inf(1), Member: "a"})

	code, out, errb := syncd("status", "-c", cfg)
	for _, want := range []string{
		"\n2 items: 2 due, 0 in flight, 0 quarantined;",
		"\nwrong shard: 1 copy planted in another shard than their id's, quarantined there; the real items are counted above; syncd items remove --shard N removes one\n",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("status with a copy in shard %d: exit %d, stdout:\n%s\nstderr: %s\nwant exit 0 and\n%s", other, code, out, errb, want)
		}
	}
	code, out, errb = syncd("status", "--json", "-c", cfg)
	var got struct {
		Summary struct {
			Items       int64 `json:"items"`
			Quarantined int64 `json:"quarantined"`
			WrongShard  int   `json:"wrong_shard_count"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil {
		t.Fatalf("status --json: exit %d, %v, stderr: %s", code, err, errb)
	}
	if s := got.Summary; s.Items != 2 || s.Quarantined != 0 || s.WrongShard != 1 {
		t.Errorf("status --json: %d items, %d quarantined, wrong_shard_count %d; want 2, 0 and 1", s.Items, s.Quarantined, s.WrongShard)
	}
	want := "wrong shard: at least 3 copies planted in another shard than their id's, quarantined there (it reads at most 5000 quarantined entries, spread over the shards: more may be counted above as items); the real items are counted above; syncd items remove --shard N removes one"
	if got := wrongShardLine(3, true); got != want {
		t.Errorf("wrongShardLine(3, partial) = %q; want %q", got, want)
	}
	// Its row is listed with the items': the list says of how many.
	if code, out, _ := syncd("status", "--limit", "2", "-c", cfg); code != exitOK || !strings.Contains(out, "\nshowing 2 of 3 items and copies;") {
		t.Errorf("status --limit 2: exit %d, stdout:\n%s\nwant showing 2 of 3 items and copies", code, out)
	}
}
