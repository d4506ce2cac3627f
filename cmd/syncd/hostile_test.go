package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// adminConfig writes a config for a fresh redis-server with 4 shards and
// returns its path and a store on it.
func adminConfig(t *testing.T, prefix string) (string, *store.Store) {
	t.Helper()
	srv := redistest.Start(t, nil)
	path := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: %s\n  shards: 4\nlog:\n  format: json\n", srv.Addr(), prefix))
	st, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return path, st
}

// status says which shard is damaged, in its summary and in --json, and
// shows every other shard's items, then exits 1 since it could not show
// the damaged shard's. Before, one wrong-type key made status fail as a
// whole.
func TestStatusNamesDamagedShard(t *testing.T) {
	cfg, st := adminConfig(t, "st")
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("item-%d", i))
	}
	st.Add(ctx, ids...)
	healthy := 0
	for _, id := range ids {
		if st.Keys().Shard(id) != 3 {
			healthy++
		}
	}
	st.Client().Set(ctx, st.Keys().Meta(3), "garbage", 0)

	// It exits 1, as items list does, saying on stderr that not every
	// item was shown: it exited 0 (an operator's trial).
	var out, errb bytes.Buffer
	const unshown = "syncd status: not every item was shown: the items of damaged shard 3 are left out (and wait); fix or delete the key named above\n"
	if code := runMain([]string{"status", "-c", cfg}, &out, &errb); code != exitFailed || errb.String() != unshown {
		t.Fatalf("status: exit %d, stderr %q; want 1, %q", code, errb.String(), unshown)
	}
	if !strings.Contains(out.String(), "shard 3 damaged") || !strings.Contains(out.String(), st.Keys().Meta(3)) ||
		!strings.Contains(out.String(), fmt.Sprintf("\n%d items:", healthy)) {
		t.Errorf("status does not name shard 3 and show the %d other items:\n%s", healthy, out.String())
	}
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"status", "-c", cfg, "--json"}, &out, &errb); code != exitFailed || errb.String() != unshown {
		t.Fatalf("status --json: exit %d, stderr %q; want 1, %q", code, errb.String(), unshown)
	}
	var got struct{ Summary summary }
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if d := got.Summary.Damaged; len(d) != 1 || d[0].Shard != 3 || !strings.Contains(d[0].Error, "WRONGTYPE") || got.Summary.Items != int64(healthy) {
		t.Errorf("status --json summary = %+v, want shard 3 damaged and %d items", got.Summary, healthy)
	}
}

// A shard whose err hash alone is damaged syncs on: status shows its
// items and says only their last errors are lost, and items list lists
// every item. A shard whose meta is damaged is left out of items list,
// which lists the others and then fails naming it. Before, status said
// the err-damaged shard's items "are not shown and wait" while the
// daemons synced them, and items list stopped at the first damaged
// shard (an operator's trial).
func TestDamagedShardErrorsLost(t *testing.T) {
	cfg, st := adminConfig(t, "el")
	ctx := context.Background()
	var ids []string
	on := map[int]int{}
	for i := range 20 {
		id := fmt.Sprintf("item-%d", i)
		ids = append(ids, id)
		on[st.Keys().Shard(id)]++
	}
	st.Add(ctx, ids...)
	st.Client().Set(ctx, st.Keys().Errors(2), "garbage", 0)

	code, out, stderr := syncd("status", "-c", cfg)
	if code != exitOK || !strings.Contains(out, "\nshard 2: "+st.Keys().Errors(2)+" is a string, want a hash: its items sync and are listed, but their last errors are lost") ||
		!strings.Contains(out, st.Keys().Errors(2)) || !strings.Contains(out, "\n20 items:") {
		t.Errorf("status: exit %d, stderr %q; want shard 2's err hash named and all 20 items:\n%s", code, stderr, out)
	}
	code, out, _ = syncd("status", "-c", cfg, "--json")
	var got struct{ Summary summary }
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitOK {
		t.Fatalf("status --json: exit %d, %v", code, err)
	}
	if d := got.Summary.Damaged; len(d) != 1 || d[0].Shard != 2 || !d[0].ErrorsLost || got.Summary.Items != 20 {
		t.Errorf("status --json summary = %+v, want shard 2 with errors_lost and 20 items", got.Summary)
	}
	if code, out, stderr := syncd("items", "list", "-c", cfg); code != exitOK || strings.Count(out, "\n") != 20 {
		t.Errorf("items list: exit %d, %d lines, stderr %q; want all 20", code, strings.Count(out, "\n"), stderr)
	}

	st.Client().Set(ctx, st.Keys().Meta(1), "garbage", 0)
	code, out, stderr = syncd("items", "list", "-c", cfg)
	if want := 20 - on[1]; code != exitFailed || strings.Count(out, "\n") != want ||
		!strings.Contains(stderr, "1 damaged shard not listed") && !strings.Contains(stderr, "items of 1 damaged shard not listed") ||
		!strings.Contains(stderr, st.Keys().Meta(1)) {
		t.Errorf("items list with shard 1 damaged: exit %d, %d lines (want %d), stderr %q", code, strings.Count(out, "\n"), want, stderr)
	}
}

// items remove --shard removes an item planted in another shard than its
// id's (claims quarantine it, naming this command), which items remove
// alone cannot reach: it goes to the id's own shard.
func TestItemsRemoveInShard(t *testing.T) {
	cfg, st := adminConfig(t, "ris")
	ctx := context.Background()
	const id = "customer-7"
	home := st.Keys().Shard(id)
	other := (home + 1) % 4
	st.Add(ctx, id)
	st.Client().ZAdd(ctx, st.Keys().Due(other), redis.Z{Score: 0, Member: id})

	code, out, stderr := syncd("items", "remove", "-c", cfg, "--shard", fmt.Sprint(other), id, "ghost")
	if want := fmt.Sprintf("1 of 2 items removed from shard %d\n", other); code != exitFailed || out != want ||
		!strings.Contains(stderr, fmt.Sprintf("1 unknown id (not in shard %d): ghost", other)) {
		t.Errorf("items remove --shard: exit %d, %q, %q; want 1, %q and the id not there", code, out, stderr, want)
	}
	if st.Client().Exists(ctx, st.Keys().Due(other)).Val() != 0 || st.Client().ZScore(ctx, st.Keys().Due(home), id).Err() != nil {
		t.Errorf("after items remove --shard %d: the planted copy is still there, or the item left shard %d", other, home)
	}
	// -1, the flag's default, is refused too: taken as unset, it removed
	// the item from its own shard (an outside trial).
	st.Client().ZAdd(ctx, st.Keys().Due(other), redis.Z{Score: 0, Member: id})
	for _, bad := range []string{"-1", "-2", "4", "x"} {
		if code, _, stderr := syncd("items", "remove", "-c", cfg, "--shard", bad, id); code != exitUsage || stderr == "" {
			t.Errorf("items remove --shard %s: exit %d, %q; want 2 and why", bad, code, stderr)
		}
	}
	if st.Client().ZScore(ctx, st.Keys().Due(home), id).Err() != nil || st.Client().ZScore(ctx, st.Keys().Due(other), id).Err() != nil {
		t.Errorf("a refused --shard removed %s from shard %d or %d", id, home, other)
	}
}

// items remove takes ids that items add refuses, so an operator can
// clean up items planted in Redis under them (claims quarantine those):
// the empty id, escape sequences as arguments, and a 200 KB id from a
// file. Before, every one was refused as invalid.
func TestItemsRemovePlantedIDs(t *testing.T) {
	cfg, st := adminConfig(t, "rm")
	ctx := context.Background()
	long := strings.Repeat("z", 200<<10)
	for _, id := range []string{"", "\x1b[31mred", long} {
		st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard(id)), redis.Z{Score: 0, Member: id})
	}
	file := testutil.WriteFile(t, "ids.txt", "# planted\n"+long+"\n")
	var out, errb bytes.Buffer
	if code := runMain([]string{"items", "add", "-c", cfg, "\x1b[31mred"}, &out, &errb); code != exitUsage {
		t.Errorf("items add of an invalid id: exit %d, want %d", code, exitUsage)
	}
	out.Reset()
	if code := runMain([]string{"items", "remove", "-c", cfg, "", "\x1b[31mred", "--file", file}, &out, &errb); code != exitOK ||
		!strings.Contains(out.String(), "3 of 3 items removed") {
		t.Errorf("items remove: exit %d, %q, %s; want 3 of 3 removed", code, out.String(), errb.String())
	}
}

// The admin commands say once on stderr, in plain text, what run logs as
// a warning: here a Redis password file any user can read (an outside
// trial: status and the others said nothing). Their stdout is left as it
// was: status --json still parses.
func TestAdminConfigWarnings(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{Password: "admin-pw"})
	pw := testutil.WriteFile(t, "pw", "admin-pw\n")
	if err := os.Chmod(pw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  password_file: %s\n  key_prefix: warn\n  shards: 4\nlog:\n  format: json\n", srv.Addr(), pw))
	warning := "syncd: warning: " + cfg + ":3: redis.password_file: " + pw +
		" is readable by others (mode 0644): any user on the host can read the Redis password; chmod 600 " + pw + "\n"
	for _, args := range [][]string{
		{"items", "add", "x"}, {"items", "list"}, {"status"}, {"status", "--json"}, {"requeue", "x"}, {"trigger", "x"},
		{"release", "--force", "x"}, {"items", "reconcile", "--force"}, {"items", "remove", "x"},
	} {
		code, stdout, stderr := syncd(append(args, "-c", cfg)...)
		if strings.Count(stderr, warning) != 1 || code == exitUsage {
			t.Errorf("syncd %q: exit %d, stderr %q; want the warning once:\n%s", args, code, stderr, warning)
		}
		if strings.Contains(stdout, "warning") {
			t.Errorf("syncd %q: stdout %q has the warning", args, stdout)
		}
		if args[0] == "status" && len(args) > 1 && !json.Valid([]byte(stdout)) {
			t.Errorf("status --json: stdout is not JSON: %q", stdout)
		}
	}
}

// status and items list write nothing to Redis: on an empty one they
// say that it holds no deployment under the prefix (exit 1), and leave
// it empty, where they created the deployment's shard count, marker and
// epoch markers, and a daemon then took a FLUSHALL for no loss. A
// command that writes creates the deployment, as before.
func TestReadCommandsCreateNothing(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: ro\n  shards: 4\nlog:\n  format: json\n", srv.Addr()))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	want := fmt.Sprintf("no deployment in redis (%s) under key prefix \"ro\": nothing was added there yet", srv.Addr())
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"items", "list"}} {
		code, out, errb := syncd(append(args, "-c", cfg)...)
		if code != exitFailed || out != "" || !strings.Contains(errb, want) {
			t.Errorf("syncd %q on an empty redis: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, out, errb, want)
		}
		if keys, _ := rdb.Keys(t.Context(), "*").Result(); len(keys) > 0 {
			t.Errorf("syncd %q wrote %q", args, keys)
		}
		// A shard count alone is no deployment either (status showed
		// an empty one, exit 0).
		rdb.Set(t.Context(), "ro:shards", 4, 0)
		code, out, errb = syncd(append(args, "-c", cfg)...)
		if code != exitFailed || out != "" || !strings.Contains(errb, want) {
			t.Errorf("syncd %q on a redis with only ro:shards: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, out, errb, want)
		}
		rdb.Del(t.Context(), "ro:shards")
	}
	if code, _, errb := syncd("items", "add", "a", "-c", cfg); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	if n, _ := rdb.Exists(t.Context(), "ro:deployment", "ro:shards").Result(); n != 2 {
		t.Errorf("items add created %d of the marker and the shard count, want both", n)
	}
	if code, out, errb := syncd("items", "list", "-c", cfg); code != exitOK || out != "a\n" {
		t.Errorf("items list: exit %d, stdout %q, stderr %q", code, out, errb)
	}
	// The shard count is still checked.
	other := testutil.WriteFile(t, "other.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: ro\n  shards: 8\n", srv.Addr()))
	// Named at redis.shards, with the fix (an outside trial: neither
	// the key nor the line was named).
	want = other + `:4: redis.shards: shard count differs from the deployment's: configured 8, deployment "ro" has 4 (a deployment keeps its shard count: set redis.shards to its count, or use another redis.key_prefix for a new one)`
	if code, _, errb := syncd("status", "-c", other); code != exitUsage || !strings.Contains(errb, want) {
		t.Errorf("status with another shard count: exit %d, stderr %q; want %q", code, errb, want)
	}
	// With redis.shards unset, the count is the default: said, as the
	// line is redis:'s (an outside trial read "configured 16" as a
	// setting it could not find).
	unset := testutil.WriteFile(t, "unset.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: ro\n", srv.Addr()))
	want = unset + `:1: redis.shards: shard count differs from the deployment's: configured 16, deployment "ro" has 4 (16 is the default: redis.shards is not set; a deployment keeps its shard count`
	if code, _, errb := syncd("status", "-c", unset); code != exitUsage || !strings.Contains(errb, want) {
		t.Errorf("status with redis.shards unset: exit %d, stderr %q; want %q", code, errb, want)
	}
	// A shard count that is no count names its key.
	rdb.Set(t.Context(), "ro:shards", "banana", 0)
	want = `syncd status: ro:shards, the deployment's shard count, holds "banana", not a count: set it to the deployment's count (redis.shards)`
	if code, _, errb := syncd("status", "-c", cfg); code != exitUsage || !strings.Contains(errb, want) {
		t.Errorf("status with a shard count of banana: exit %d, stderr %q; want %q", code, errb, want)
	}
}

// status says a data loss whose time the record lacks happened at an
// unknown time, never at 1970 (the Unix epoch of a missing field).
func TestStatusDataLossUnknownTime(t *testing.T) {
	cfg, st := adminConfig(t, "dl")
	st.Client().HSet(t.Context(), st.Keys().DataLoss(), "restored", 3, "lost", 0)
	out := statusOut(t, cfg)
	if !strings.Contains(out, "redis last lost this deployment's data at an unknown time: 3 items restored") || strings.Contains(out, "1970") {
		t.Errorf("status:\n%s", out)
	}
}

// An admin command that Redis's ACL refuses a command says that the
// Redis user lacks a permission, naming redis.username and the user, as
// a refused login names its key: syncd requeue said "unknown: NOPERM
// this user has no permissions to run the 'zscore' command", and a
// command refused inside a script ("ERR The user executing the script
// can't run this command") or at Open (evalsha) said no more. Each
// exits 2, as for a refused login (release --force exited 1), and prints
// no count of what it did (trigger printed "0 of 1 item triggered").
func TestAdminACLRefusal(t *testing.T) {
	srv := redistest.Start(t, nil)
	rdb := srv.Client(t)
	for user, rules := range map[string][]any{
		"nozscore":  {"-zscore"},
		"noevalsha": {"-evalsha"},
		"noscripts": {"-hset"}, // trigger's and release's scripts write hashes
	} {
		args := append([]any{"ACL", "SETUSER", user, "on", ">pw-" + user, "~*", "&*", "+@all"}, rules...)
		if err := rdb.Do(t.Context(), args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	admin := testutil.WriteFile(t, "admin.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: acl\n", srv.Addr()))
	if code, _, errb := syncd("items", "add", "a", "-c", admin); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	for _, tt := range []struct {
		user string
		args []string
	}{
		{"nozscore", []string{"requeue", "a"}},
		{"nozscore", []string{"items", "remove", "a"}},
		{"noevalsha", []string{"requeue", "a"}},
		{"noevalsha", []string{"status"}},
		{"noscripts", []string{"trigger", "a"}},
		{"noscripts", []string{"release", "--force", "a"}},
		{"nozscore", []string{"trigger", "a"}},
		{"nozscore", []string{"release", "--force", "a"}},
	} {
		pw := testutil.WriteFile(t, tt.user+".pw", "pw-"+tt.user+"\n")
		cfg := testutil.WriteFile(t, tt.user+".yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: acl\n  username: %s\n  password_file: %s\n", srv.Addr(), tt.user, pw))
		code, out, errb := syncd(append(tt.args, "-c", cfg)...)
		want := fmt.Sprintf("%s:4: redis.username: ", cfg)
		if code != exitUsage || !strings.Contains(errb, want) || !strings.Contains(errb, fmt.Sprintf("(Redis user %q lacks a permission this command needs", tt.user)) {
			t.Errorf("syncd %q as %s: exit %d, stderr %q; want exit %d, %q and the user lacking a permission", tt.args, tt.user, code, errb, exitUsage, want)
		}
		if out != "" {
			t.Errorf("syncd %q as %s: refused, but printed %q", tt.args, tt.user, out)
		}
	}
}

// A batch run whose claims Redis's ACL refuses (a user without zscore,
// which the batch claim script calls; the daemon's does not) ends at
// once, exit 2, naming redis.username as the admin commands do, where it
// logged "claim round failed" every 250ms and never ended.
func TestBatchACLRefusal(t *testing.T) {
	srv := redistest.Start(t, nil)
	rdb := srv.Client(t)
	if err := rdb.Do(t.Context(), "ACL", "SETUSER", "u", "on", ">pw12345", "~*", "&*", "+@all", "-zscore").Err(); err != nil {
		t.Fatal(err)
	}
	pw := testutil.WriteFile(t, "u.pw", "pw12345\n")
	cfg := testutil.WriteFile(t, "u.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: aclb\n  username: u\n  password_file: %s\n"+
		"ownership:\n  ttl: 1s\nitems:\n  ids: [x1]\n", srv.Addr(), pw))
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errb := syncd("batch", "-c", cfg)
		done <- result{code, out, errb}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("syncd batch did not end on the ACL refusal within 30s")
	}
	refusal := `ERR The user executing the script can't run this command or subcommand (a command its script calls: Redis's ACL LOG names it)`
	if srv.NamesScriptCommand(t) {
		refusal = `ERR ACL failure in script: User u has no permissions to run the 'zscore' command`
	}
	want := regexp.MustCompile(regexp.QuoteMeta(cfg+":4: redis.username: claim shard ") + `\d+` +
		regexp.QuoteMeta(": "+refusal+` (Redis user "u" lacks a permission this command needs: `+
			"grant it the commands the README's least-privilege ACL lists, on the keys under redis.key_prefix)\n"))
	if r.code != exitUsage || !want.MatchString(r.stderr) || strings.Contains(r.stderr, "user_script") {
		t.Errorf("syncd batch as u: exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, exitUsage, want)
	}
}
