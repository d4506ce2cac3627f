package topology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// aclCommands is every command syncd sends, found by reading store (and
// the scripts in store/scripts, whose commands Redis checks against the
// caller's ACL too) and confirmed with INFO commandstats after exercise.
// TestACLMinimalUser checks that each one is needed: without it, some
// operation fails with NOPERM naming it.
var aclCommands = []string{
	// Connecting and the start-up checks (HELLO and AUTH need no grant).
	"ping", "info",
	// Scripts: EVALSHA, EVAL after NOSCRIPT and for claims that WAIT,
	// SCRIPT LOAD at start and after NOSCRIPT inside a pipeline.
	"evalsha", "eval", "script|load",
	// Claims counted after replicas acknowledged them (min_replicas).
	"wait",
	// Redis's clock: status, the engine's clock offset; and inside every
	// script.
	"time",
	// Strings: records, locks, the shard count, epoch and batch markers;
	// unlocks read a lock's record and released tokens in one MGET.
	"get", "mget", "set", "del", "pexpire", "pttl",
	// Records and registry entries read no further than syncd writes
	// them (a planted 100 MB one is named by its length).
	"strlen", "getrange",
	// The due index; the daemon registry.
	"zadd", "zscore", "zrange", "zrangebyscore", "zcount", "zcard", "zrem",
	// Per-item state and last errors; the target's breaker; the record
	// of the last data loss; the counts of the API and status (hlen).
	"hget", "hset", "hdel", "hmget", "hincrby", "hgetall", "hlen",
	// The same bound for a last error's text.
	"hstrlen",
	// Each item's error log: written by releases of failures, read by
	// the API's item view.
	"lpush", "ltrim", "lrange",
	// The target's permits: expired ones dropped.
	"zremrangebyscore",
	// Items added by hand (a set per shard); the breaker's suspects.
	"sadd", "srem", "sismember", "smembers", "scard",
	// The target's keys are started afresh when made by hand as another
	// type.
	"type",
}

// aclClusterCommands are needed on a Cluster as well: go-redis reads the
// slot map (CLUSTER SLOTS) and the command table (COMMAND).
var aclClusterCommands = []string{"cluster|slots", "command"}

// aclSetUser returns the ACL SETUSER arguments for a user restricted to
// prefix and commands.
func aclSetUser(user, password, prefix string, commands []string) []any {
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password, "~" + prefix + ":*", "resetchannels", "-@all"}
	for _, c := range commands {
		args = append(args, "+"+c)
	}
	return args
}

// aclLine renders the documented ACL SETUSER line.
func aclLine(commands []string) string {
	var b strings.Builder
	b.WriteString("ACL SETUSER syncd reset on >PASSWORD ~syncd:* resetchannels -@all")
	for _, c := range commands {
		b.WriteString(" +" + c)
	}
	return b.String()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

func setUser(t *testing.T, admin *redis.Client, args []any) {
	t.Helper()
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// aclDenials returns the ACL LOG entries of user as "context:object"
// ("lua:zadd" for a command a script called, "toplevel:ping" otherwise,
// "key:..." for a key outside the user's patterns).
func aclDenials(ctx context.Context, admin *redis.Client, user string) []string {
	entries, err := admin.ACLLog(ctx, 1000).Result()
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range entries {
		if e.Username == user {
			ctx := e.Context
			if e.Reason == "key" {
				ctx = "key"
			}
			out = append(out, ctx+":"+e.Object)
		}
	}
	return out
}

// An ACL user restricted to the key prefix and exactly aclCommands runs
// every operation of syncd, in process and through the binary; without
// any one of those commands some operation fails with NOPERM naming it.
func TestACLMinimalUser(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t, nil)
	redistest.Start(t, &redistest.Options{ReplicaOf: primary})
	admin := primary.Client(t)
	ctx := t.Context()
	t.Logf("documented line: %s", aclLine(aclCommands))

	t.Run("all needed commands", func(t *testing.T) {
		t.Parallel()
		setUser(t, admin, aclSetUser("full", "pw-full", "full", aclCommands))
		cfg := store.Config{Addrs: []string{primary.Addr()}, Username: "full", Password: "pw-full", KeyPrefix: "full", Shards: 4}
		if err := exercise(ctx, cfg, exerciseOpts{Replicas: 1, Admin: admin}); err != nil {
			t.Fatalf("%v\nACL LOG: %v", err, aclDenials(ctx, admin, "full"))
		}
		// The binary: every command that talks to Redis.
		setUser(t, admin, aclSetUser("bin", "pw-bin", "bin", aclCommands))
		runCommandsAs(t, primary.Addr(), "bin", "pw-bin", "bin", "")
		for _, u := range []string{"full", "bin"} {
			if d := aclDenials(ctx, admin, u); len(d) > 0 {
				t.Errorf("ACL LOG has denials for %s: %v", u, d)
			}
		}
	})

	for _, cmd := range aclCommands {
		t.Run("without "+cmd, func(t *testing.T) {
			t.Parallel()
			user := "no-" + strings.ReplaceAll(cmd, "|", "-")
			setUser(t, admin, aclSetUser(user, "pw", user, slices.DeleteFunc(slices.Clone(aclCommands), func(c string) bool { return c == cmd })))
			cfg := store.Config{Addrs: []string{primary.Addr()}, Username: user, Password: "pw", KeyPrefix: user, Shards: 4}
			err := exercise(ctx, cfg, exerciseOpts{Replicas: 1, Admin: admin})
			if err == nil {
				t.Fatalf("every operation worked without %s: it is not needed", cmd)
			}
			// Redis 7.0 names the command when a client sends it, but only
			// the script line when a script calls it; 7.2 names both, and
			// ACL LOG does.
			if msg := err.Error(); !strings.Contains(msg, "NOPERM") && !strings.Contains(msg, "can't run this command") && !strings.Contains(msg, "ACL failure in script") {
				t.Errorf("without %s: the error does not say it was an ACL denial:\n%v", cmd, err)
			}
			denials := aclDenials(ctx, admin, user)
			if !slices.Contains(denials, "toplevel:"+cmd) && !slices.Contains(denials, "lua:"+cmd) {
				t.Errorf("without %s: ACL LOG %v does not name it", cmd, denials)
			}
			t.Logf("without %s: %v; ACL LOG %v", cmd, firstLine(err.Error()), denials)
		})
	}

	// A database other than 0 needs SELECT, which go-redis sends on
	// every new connection.
	t.Run("db 1 needs select", func(t *testing.T) {
		t.Parallel()
		setUser(t, admin, aclSetUser("db1", "pw", "db1", aclCommands))
		cfg := store.Config{Addrs: []string{primary.Addr()}, Username: "db1", Password: "pw", KeyPrefix: "db1", DB: 1, Shards: 2}
		if _, err := store.Open(ctx, cfg); err == nil || !strings.Contains(err.Error(), "'select' command") {
			t.Errorf("db 1 without select: %v", err)
		}
		setUser(t, admin, aclSetUser("db1", "pw", "db1", append(slices.Clone(aclCommands), "select")))
		if err := exercise(ctx, cfg, exerciseOpts{}); err != nil {
			t.Errorf("db 1 with select: %v", err)
		}
	})

	t.Run("keys outside the prefix", func(t *testing.T) {
		t.Parallel()
		setUser(t, admin, aclSetUser("other", "pw", "other", aclCommands))
		cfg := store.Config{Addrs: []string{primary.Addr()}, Username: "other", Password: "pw", KeyPrefix: "syncd"}
		_, err := store.Open(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("open with keys outside the user's pattern: %v", err)
		}
		t.Logf("open with keys outside the pattern: %v", err)
	})

	t.Run("binary without zadd", func(t *testing.T) {
		t.Parallel()
		setUser(t, admin, aclSetUser("nozadd", "pw-nozadd", "nozadd", slices.DeleteFunc(slices.Clone(aclCommands), func(c string) bool { return c == "zadd" })))
		cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  username: nozadd\n  password_env: TOPO_PW\n  key_prefix: nozadd\n  shards: 4\n", primary.Addr()))
		r := runSyncd(t, []string{"TOPO_PW=pw-nozadd"}, "items", "add", "-c", cfg, "x")
		// Named at redis.username, without the script's sha and line.
		denial := `:3: redis.username: add: ERR The user executing the script can't run this command or subcommand (a command its script calls: Redis's ACL LOG names it) (Redis user "nozadd" lacks a permission this command needs: `
		if primary.NamesScriptCommand(t) {
			denial = `:3: redis.username: add: ERR ACL failure in script: User nozadd has no permissions to run the 'zadd' command (Redis user "nozadd" lacks a permission this command needs: `
		}
		if r.Code != 2 || !strings.Contains(r.Stderr, denial) || strings.Contains(r.Stderr, "user_script") {
			t.Errorf("items add without zadd: want exit 2 and the ACL denial %q\n%s", denial, r)
		}
		if d := aclDenials(ctx, admin, "nozadd"); !slices.Contains(d, "lua:zadd") {
			t.Errorf("ACL LOG %v does not name zadd", d)
		}
		t.Logf("syncd items add without zadd: %s", strings.TrimSpace(r.Stderr))
		// The daemon seeds its configured items at start and stops there.
		cfg = testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  username: nozadd\n  password_env: TOPO_PW\n  key_prefix: nozadd\n  shards: 4\nitems:\n  ids: [x]\n", primary.Addr()))
		r = runSyncd(t, []string{"TOPO_PW=pw-nozadd"}, "run", "-c", cfg)
		if r.Code == 0 || !strings.Contains(r.Stderr, denial) {
			t.Errorf("run without zadd: want a failure with the ACL denial %q\n%s", denial, r)
		}
		t.Logf("syncd run without zadd: exit %d: %s", r.Code, lastLine(r.Stderr))
	})
}

// The same on a Cluster, which needs aclClusterCommands as well.
func TestACLCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	ctx := t.Context()
	all := append(slices.Clone(aclCommands), aclClusterCommands...)
	users := map[string][]string{"full": all}
	for _, cmd := range aclClusterCommands {
		users["no-"+strings.ReplaceAll(cmd, "|", "-")] = slices.DeleteFunc(slices.Clone(all), func(c string) bool { return c == cmd })
	}
	for _, n := range c.Nodes() {
		admin := n.Client(t)
		for u, cmds := range users {
			setUser(t, admin, aclSetUser(u, "pw", u, cmds))
		}
	}
	cfg := store.Config{Addrs: c.Addrs(), Cluster: true, Username: "full", Password: "pw", KeyPrefix: "full", Shards: 6}
	if err := exercise(ctx, cfg, exerciseOpts{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if log := aclDenials(ctx, n.Client(t), "full"); len(log) > 0 {
			t.Errorf("node %s: ACL LOG %v", n.Addr(), log)
		}
	}
	for _, cmd := range aclClusterCommands {
		u := "no-" + strings.ReplaceAll(cmd, "|", "-")
		cfg := store.Config{Addrs: c.Addrs(), Cluster: true, Username: u, Password: "pw", KeyPrefix: u, Shards: 6}
		ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := exercise(ectx, cfg, exerciseOpts{})
		cancel()
		switch {
		case err != nil:
			t.Logf("without %s: %v", cmd, firstLine(err.Error()))
		case cmd == "command":
			// go-redis reads the command table to find keys; without it
			// it falls back to the first argument (EVALSHA has its own
			// rule) and logs the NOPERM on every new connection.
			noise := goRedisLog.lines("'command' command")
			if len(noise) == 0 {
				t.Errorf("every operation worked on the Cluster without %s, and go-redis logged nothing", cmd)
			}
			t.Logf("without command: syncd works, go-redis logged %d lines like %q", len(noise), noise[0])
		default:
			t.Errorf("every operation worked on the Cluster without %s: it is not needed", cmd)
		}
	}
}

// runCommandsAs runs every syncd command that talks to Redis, as user,
// against a single server: items add, list and remove, run (until every
// item synced), status, requeue, release --force and batch. extra is
// appended to the redis section of the config.
func runCommandsAs(t *testing.T, addr, user, password, prefix, extra string) {
	t.Helper()
	dir := t.TempDir()
	syncs := filepath.Join(dir, "syncs.jsonl")
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf(`redis:
  addrs: [%q]
  username: %s
  password_env: TOPO_PW
  key_prefix: %s
  shards: 4
%sownership:
  ttl: 1s
engine:
  interval: 1h
  poll: 20ms
items:
  ids: [a, b, c]
sink:
  type: file
  file:
    path: %s
log:
  format: json
`, addr, user, prefix, extra, syncs))
	env := []string{"TOPO_PW=" + password}
	must := func(r testutil.Result, what string) testutil.Result {
		t.Helper()
		if r.Code != 0 {
			t.Fatalf("%s as an ACL user:\n%s", what, r)
		}
		return r
	}
	must(runSyncd(t, env, "items", "add", "-c", cfg, "d", "e"), "items add")
	if r := must(runSyncd(t, env, "items", "remove", "-c", cfg, "e"), "items remove"); !strings.Contains(r.Stdout, "1 of 1") {
		t.Errorf("items remove: %s", r)
	}

	proc, daemon := startDaemon(t, env, cfg)
	waitFor(t, 20*time.Second, "the daemon to sync a, b, c and d", func() bool {
		b, _ := os.ReadFile(syncs)
		return strings.Count(string(b), "\n") >= 4
	})
	proc.Signal(os.Interrupt)
	switch err := proc.Wait(10 * time.Second); {
	case errors.Is(err, testutil.ErrRunning):
		t.Fatalf("daemon did not stop\n%s", daemon.String())
	case err != nil:
		t.Errorf("daemon: %v\n%s", err, daemon.String())
	}
	if l := daemon.lines(`"level":"error"`); len(l) > 0 {
		t.Errorf("daemon logged errors:\n%s", strings.Join(l, "\n"))
	}

	if r := must(runSyncd(t, env, "items", "list", "-c", cfg), "items list"); len(strings.Fields(r.Stdout)) != 4 {
		t.Errorf("items list: %s", r)
	}
	if r := must(runSyncd(t, env, "status", "-c", cfg, "--json"), "status"); !strings.Contains(r.Stdout, `"items": 4`) {
		t.Errorf("status: %s", r)
	}
	must(runSyncd(t, env, "requeue", "-c", cfg, "a"), "requeue")
	must(runSyncd(t, env, "release", "-c", cfg, "--force", "b"), "release --force")
	must(runSyncd(t, env, "batch", "-c", cfg), "batch")
}

// Through Sentinel the data nodes need nothing more: the Sentinels are
// asked for the master with their own credentials.
func TestACLSentinel(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t, nil)
	replica := redistest.Start(t, &redistest.Options{ReplicaOf: primary})
	sentinels := redistest.StartSentinels(t, primary, 1, "acl")
	ctx := t.Context()
	for _, n := range []*redistest.Server{primary, replica} {
		setUser(t, n.Client(t), aclSetUser("syncd", "pw", "syncd", aclCommands))
	}
	cfg := store.Config{Addrs: sentinels.Addrs(), MasterName: "acl", Username: "syncd", Password: "pw", Shards: 4}
	if err := exercise(ctx, cfg, exerciseOpts{Replicas: 1, Admin: primary.Client(t)}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*redistest.Server{primary, replica} {
		if d := aclDenials(ctx, n.Client(t), "syncd"); len(d) > 0 {
			t.Errorf("%s: ACL LOG %v", n.Addr(), d)
		}
	}
}

// A grant revoked from syncd run's user while it runs, restored and
// revoked again (an outside trial): the daemon logs the refused claims
// once per revocation at error, naming the command and pointing at ACL
// LOG (the trial saw 5 lines in 1.8 s, one per shard and backoff step),
// once more when it is granted, and /readyz says the claims are refused
// (it said "not claiming yet" while syncd_redis_up said 1).
func TestACLRevokedWhileRunning(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t, nil)
	admin := primary.Client(t)
	setUser(t, admin, aclSetUser("live", "pw-live", "live", aclCommands))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	syncs := filepath.Join(t.TempDir(), "syncs.jsonl")
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf(`redis:
  addrs: [%q]
  username: live
  password_env: TOPO_PW
  key_prefix: live
ownership:
  ttl: 1s
engine:
  interval: 500ms
items:
  ids: [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p]
sink:
  type: file
  file:
    path: %s
http:
  listen: %s
log:
  format: json
`, primary.Addr(), syncs, addr))
	proc, daemon := startDaemon(t, []string{"TOPO_PW=pw-live"}, cfg)
	defer func() {
		proc.Signal(os.Interrupt)
		if err := proc.Wait(10 * time.Second); err != nil {
			t.Errorf("daemon: %v\n%s", err, daemon.String())
		}
	}()
	waitFor(t, 20*time.Second, "the daemon to sync every item", func() bool {
		b, _ := os.ReadFile(syncs)
		return strings.Count(string(b), "\n") >= 16
	})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	// The lines at error about the claims (a release refused is logged
	// apart).
	refusals := func() []string {
		return slices.DeleteFunc(daemon.lines("store: claim shard"), func(l string) bool { return !strings.Contains(l, `"level":"error"`) })
	}
	for round := 1; round <= 2; round++ {
		setUser(t, admin, []any{"ACL", "SETUSER", "live", "-evalsha"})
		waitFor(t, 10*time.Second, "the refusal logged", func() bool { return len(refusals()) >= round })
		time.Sleep(2 * time.Second) // the poll, 250ms, doubling: 3 rounds of each claim loop
		l := refusals()
		if len(l) != round || !strings.Contains(l[round-1], `"refused":"command evalsha"`) || !strings.Contains(l[round-1], "ACL LOG") {
			t.Fatalf("revoked %d times: %d lines at error for the claims, want %d naming command evalsha and ACL LOG:\n%s",
				round, len(l), round, strings.Join(l, "\n"))
		}
		const want = "not ready: claims refused by Redis ACL: command evalsha; see ACL LOG"
		if code, body := readyz(); code != http.StatusServiceUnavailable || body != want {
			t.Errorf("/readyz while refused = %d %q, want 503 %q", code, body, want)
		}
		setUser(t, admin, []any{"ACL", "SETUSER", "live", "+evalsha"})
		waitFor(t, 10*time.Second, "the grant logged", func() bool {
			return len(daemon.lines("redis accepts the claims again")) == round
		})
		waitFor(t, 10*time.Second, "/readyz ready", func() bool { code, _ := readyz(); return code == http.StatusOK })
	}
	if d := aclDenials(t.Context(), admin, "live"); !slices.Contains(d, "toplevel:evalsha") {
		t.Errorf("ACL LOG %v does not name evalsha", d)
	}
	if l := daemon.lines("release failed"); len(l) > 0 {
		t.Errorf("releases refused logged per item:\n%s", strings.Join(l, "\n"))
	}
}
