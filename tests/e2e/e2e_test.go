// Package e2e runs the built syncd binary against real redis-server
// processes: the daemon with the exec and file sinks, batch exit codes and
// reports, status while a sync is in flight, validate on broken configs,
// admin commands, and signals.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// syncd builds the syncd binary, once, for the tests that run it.
var syncd testutil.Syncd

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		syncd.Remove()
		os.Exit(code)
	}))
}

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	return testutil.WriteFile(t, "config.yaml", body)
}

// run runs syncd with args and waits for it, for at most a minute.
func run(t *testing.T, args ...string) testutil.Result {
	t.Helper()
	return testutil.Run(t, nil, syncd.Path(t), args...)
}

// startDaemon starts `syncd run -c cfg`, with its stderr in the returned
// buffer; it is killed in t's cleanup.
func startDaemon(t *testing.T, cfg string) (*testutil.Process, *testutil.Buffer) {
	t.Helper()
	return syncd.Daemon(t, cfg)
}

func redisConfig(srv *redistest.Server, prefix, rest string) string {
	return fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: %s
  shards: 4
ownership:
  ttl: 3s
log:
  format: json
%s`, srv.Addr(), prefix, rest)
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, within, 50*time.Millisecond, what, cond)
}

func lines(path string) []string {
	b, _ := os.ReadFile(path)
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if sc.Text() != "" {
			out = append(out, sc.Text())
		}
	}
	return out
}

// The daemon against a real Redis with the exec sink: every item syncs,
// the command sees the SYNCD_* environment, metrics and health are
// served, and SIGTERM stops it cleanly.
func TestRunExecSink(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	out := filepath.Join(t.TempDir(), "out.txt")
	cfg := writeConfig(t, redisConfig(srv, "run", fmt.Sprintf(`engine:
  interval: 1h
  workers: 4
items:
  ids: [a, b, c, "d:{x}"]
sink:
  type: exec
  exec:
    command: ["sh", "-c", "echo \"$SYNCD_ID $SYNCD_FENCE $SYNCD_ATTEMPT $SYNCD_OWNER\" >> %s"]
http:
  listen: 127.0.0.1:0
`, out)))
	// http.listen :0 picks a port; find it in the log.
	daemon, stderr := startDaemon(t, cfg)
	waitFor(t, 15*time.Second, "4 syncs", func() bool { return len(lines(out)) >= 4 })
	seen := map[string]bool{}
	for _, l := range lines(out) {
		f := strings.Fields(l)
		if len(f) != 4 || f[2] != "1" || !strings.Contains(f[3], "/") || len(f[1]) < 10 {
			t.Errorf("exec sink saw %q", l)
		}
		seen[f[0]] = true
	}
	if len(seen) != 4 || !seen["d:{x}"] {
		t.Errorf("synced %v", seen)
	}
	addr := logField(t, stderr.String(), "serving /metrics", "addr")
	// The child writes its line before the engine records the sync: poll.
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": `syncd_syncs_total{outcome="ok"} 4`} {
		waitFor(t, 5*time.Second, "GET "+path+" to contain "+want, func() bool {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				return false
			}
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			resp.Body.Close()
			return strings.Contains(b.String(), want)
		})
	}
	waitFor(t, 5*time.Second, "/readyz", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	daemon.Signal(syscall.SIGTERM)
	switch err := daemon.Wait(10 * time.Second); {
	case errors.Is(err, testutil.ErrRunning):
		t.Fatal("no exit after SIGTERM")
	case err != nil:
		t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// logField finds the first JSON log line whose message contains msg and
// returns its field.
func logField(t *testing.T, logs, msg, field string) string {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && strings.Contains(fmt.Sprint(m["message"]), msg) {
			return fmt.Sprint(m[field])
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, logs)
	return ""
}

// Batch: exit 0 with a correct report when all items sync, the file sink
// writes one line per sync; exit 1 when an item is quarantined; exit 2 on
// bad config or an unreachable Redis.
func TestBatchExitCodesAndReport(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	dir := t.TempDir()
	items := filepath.Join(dir, "items.txt")
	var ids strings.Builder
	for i := range 50 {
		fmt.Fprintf(&ids, "item-%d\n", i)
	}
	os.WriteFile(items, []byte("# fifty items\n"+ids.String()), 0o644)
	syncs := filepath.Join(dir, "syncs.jsonl")
	ok := writeConfig(t, redisConfig(srv, "batchok", fmt.Sprintf(`items:
  file: %s
sink:
  type: file
  file:
    path: %s
`, items, syncs)))
	report := filepath.Join(dir, "report.json")
	r := run(t, "batch", "-c", ok, "--report", report)
	if r.Code != 0 {
		t.Fatalf("batch exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	var rep struct {
		Items, Synced, Quarantined int
	}
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil || rep.Items != 50 || rep.Synced != 50 || rep.Quarantined != 0 {
		t.Errorf("report %s (%v)", b, err)
	}
	if n := len(lines(syncs)); n != 50 {
		t.Errorf("file sink wrote %d lines, want 50", n)
	}
	if !strings.Contains(r.Stdout, "synced here") {
		t.Errorf("no summary table:\n%s", r.Stdout)
	}

	bad := writeConfig(t, redisConfig(srv, "batchbad", `engine:
  max_attempts: 2
  backoff_min: 10ms
  backoff_max: 20ms
items:
  ids: [good, poison]
sink:
  type: exec
  exec:
    command: ["sh", "-c", "test \"$SYNCD_ID\" != poison || { echo 'cannot sync poison' >&2; exit 3; }"]
`))
	r = run(t, "batch", "-c", bad)
	if r.Code != 1 || !strings.Contains(r.Stdout, "poison") {
		t.Errorf("batch with a poison item: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}

	if r := run(t, "batch", "-c", writeConfig(t, "engine:\n  workers: -3\n")); r.Code != 2 || !strings.Contains(r.Stderr, ":2: engine.workers") {
		t.Errorf("bad config: exit %d, stderr %q", r.Code, r.Stderr)
	}
	unreach := writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\n  dial_timeout: 200ms\n")
	if r := run(t, "batch", "-c", unreach); r.Code != 2 || !strings.Contains(r.Stderr, "127.0.0.1:1") {
		t.Errorf("unreachable redis: exit %d, stderr %q", r.Code, r.Stderr)
	}

	// SIGINT stops a run with a line saying so (it logged nothing), the
	// syncs in flight finish, and the report counts what is left: exit 1.
	slow := writeConfig(t, redisConfig(srv, "batchsig", `engine:
  workers: 2
items:
  ids: [a, b, c, d, e, f]
sink:
  type: exec
  exec:
    command: ["sleep", "1"]
`))
	cmd := exec.Command(syncd.Path(t), "batch", "-c", slow)
	var out testutil.Buffer
	cmd.Stdout = &out
	errb := &testutil.Buffer{}
	cmd.Stderr = errb
	p := testutil.Start(t, cmd)
	waitFor(t, 20*time.Second, "the first syncs", func() bool { return strings.Contains(errb.String(), "batch progress") })
	p.Signal(syscall.SIGINT)
	<-p.Done()
	if ee, ok := p.Err().(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "stopping the batch run") ||
		!strings.Contains(out.String(), "not synced") {
		t.Errorf("batch after SIGINT: %v, stdout:\n%s\nstderr:\n%s", p.Err(), out.String(), errb.String())
	}
}

// status --json shows an item in flight with its owner and fence while a
// daemon syncs it.
func TestStatusWhileSyncing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	cfg := writeConfig(t, redisConfig(srv, "status", `items:
  ids: [slow, other]
engine:
  workers: 1
sink:
  type: exec
  exec:
    command: ["sh", "-c", "sleep 30"]
`))
	_, daemonLog := startDaemon(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", daemonLog.String())
		}
	})
	type row struct {
		ID, State, Owner string
		Fence            uint64
	}
	var st struct {
		Summary struct {
			Items    int `json:"items"`
			InFlight int `json:"in_flight"`
			Due      int `json:"due"`
		} `json:"summary"`
		Items []row `json:"items"`
	}
	waitFor(t, 15*time.Second, "an item in flight in status", func() bool {
		r := run(t, "status", "-c", cfg, "--json")
		if r.Code == 1 && strings.Contains(r.Stderr, "no deployment in redis") {
			return false // the daemon has not opened its store yet; status creates nothing
		}
		if r.Code != 0 {
			t.Fatalf("status exit %d: %s", r.Code, r.Stderr)
		}
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.Stdout)
		}
		return st.Summary.InFlight == 1
	})
	if st.Summary.Items != 2 || st.Summary.Due != 1 {
		t.Errorf("summary %+v", st.Summary)
	}
	for _, it := range st.Items {
		if it.State == "in_flight" && (it.Owner == "" || it.Fence == 0) {
			t.Errorf("in-flight item without owner or fence: %+v", it)
		}
	}
	if r := run(t, "status", "-c", cfg); r.Code != 0 || !strings.Contains(r.Stdout, "1 in flight") {
		t.Errorf("status table:\n%s", r.Stdout)
	}
	// An admin release takes the claim away and raises the fence.
	var fence uint64
	for _, it := range st.Items {
		if it.State == "in_flight" {
			fence = it.Fence
			r := run(t, "release", "-c", cfg, "--force", it.ID)
			if r.Code != 0 || !strings.Contains(r.Stdout, "fence raised") {
				t.Errorf("release --force: %d %s %s", r.Code, r.Stdout, r.Stderr)
			}
		}
	}
	if fence == 0 {
		t.Fatal("no syncing item")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	// A copy: under umask 002 git checks the file out 0664, which syncd
	// refuses (others could write it).
	checkedIn, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, "validate", "-c", writeConfig(t, string(checkedIn))); r.Code != 0 || !strings.Contains(r.Stdout, "key_prefix") {
		t.Errorf("validate of the checked-in config: %d\n%s", r.Code, r.Stderr)
	}
	broken := writeConfig(t, "redis:\n  shardz: 4\nownership:\n  ttl: 3x\n  heartbeat: 1m\n")
	r := run(t, "validate", "-c", broken)
	if r.Code != 2 {
		t.Errorf("exit %d", r.Code)
	}
	for _, want := range []string{":2: redis.shardz: unknown key", ":4: ownership.ttl"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	if r := run(t, "validate", "-c", "/nonexistent.yaml"); r.Code != 2 || r.Stderr == "" {
		t.Errorf("missing file: %d %q", r.Code, r.Stderr)
	}
	pw := writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\n  password_env: E2E_PW\n")
	if r := testutil.Run(t, []string{"E2E_PW=hunter2-secret"}, syncd.Path(t), "validate", "-c", pw); r.Code != 0 || strings.Contains(r.Stdout+r.Stderr, "hunter2") {
		t.Errorf("validate printed the password:\n%s%s", r.Stdout, r.Stderr)
	}
	// Issue #15: credentials inside values, and custom headers, are not
	// printed.
	leaky := writeConfig(t, `sink:
  type: exec
  exec:
    command: [sync, "https://u:hunter3@h/x?sig=hunter4"]
    env: ["DATABASE_URL=postgres://u:hunter5@h/db"]
`)
	if r := run(t, "validate", "-c", leaky); r.Code != 0 || strings.Contains(r.Stdout+r.Stderr, "hunter") ||
		!strings.Contains(r.Stdout, "DATABASE_URL=postgres://xxxxx@h/db") {
		t.Errorf("validate printed a credential, or not the rest:\n%s%s", r.Stdout, r.Stderr)
	}
	hook := writeConfig(t, "sink:\n  type: http\n  http:\n    url: http://h/x\n    headers:\n      X-Hub: sha1=hunter6\n")
	if r := run(t, "validate", "-c", hook); r.Code != 0 || strings.Contains(r.Stdout+r.Stderr, "hunter") {
		t.Errorf("validate printed a header value:\n%s%s", r.Stdout, r.Stderr)
	}
	if r := run(t, "frobnicate"); r.Code != 2 {
		t.Errorf("unknown command: exit %d", r.Code)
	}
	if r := run(t, "version"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "syncd ") {
		t.Errorf("version: %q", r.Stdout)
	}
}

// A secret file any user can read: the daemon runs and logs a warning
// that names the key, its line, the file, its mode and the fix. One that
// others can write: the daemon refuses to start (an outside trial found
// a 0666 token file taken silently).
func TestRunSecretFileModes(t *testing.T) {
	t.Parallel()
	tok := filepath.Join(testutil.PrivateDir(t), "tok")
	if err := os.WriteFile(tok, []byte("s3cret-API-token-never-shown\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tok, 0o644); err != nil { // a Kubernetes secret volume's default
		t.Fatal(err)
	}
	cfg := writeConfig(t, "http:\n  listen: 127.0.0.1:0\n  api_token_file: "+tok+"\nlog:\n  format: json\n")
	daemon, stderr := startDaemon(t, cfg)
	const msg = "secret file readable by any user on the host"
	waitFor(t, 15*time.Second, "the warning", func() bool { return strings.Contains(stderr.String(), msg) })
	for field, want := range map[string]string{"level": "warn", "key": "http.api_token_file", "line": "3", "path": tok,
		"mode": "0644", "fix": "chmod 600 " + tok} {
		if got := logField(t, stderr.String(), msg, field); got != want {
			t.Errorf("warning's %s = %q; want %q", field, got, want)
		}
	}
	waitFor(t, 15*time.Second, "the API served", func() bool { return strings.Contains(stderr.String(), "serving the API") })
	daemon.Signal(syscall.SIGTERM)
	if err := daemon.Wait(10 * time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}

	if err := os.Chmod(tok, 0o666); err != nil {
		t.Fatal(err)
	}
	r := run(t, "run", "-c", cfg)
	if want := ":3: http.api_token_file: " + tok + " is writable by group and others (mode 0666): they could replace the API token; chmod 600 " + tok; r.Code != 2 || !strings.Contains(r.Stderr, want) {
		t.Errorf("run with a 0666 token file: %v\nwant exit 2 and %q", r, want)
	}
	// The same for the Redis password, which only the store reads: it is
	// refused before anything is served.
	cfg = writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\n  password_file: "+tok+"\nhttp:\n  listen: 127.0.0.1:0\nlog:\n  format: json\n")
	r = run(t, "run", "-c", cfg)
	if r.Code != 2 || !strings.Contains(r.Stderr, ":3: redis.password_file: ") || strings.Contains(r.Stderr, "serving") {
		t.Errorf("run with a 0666 password file: %v\nwant exit 2, the refusal, and nothing served", r)
	}
}

func TestItemsAdmin(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	cfg := writeConfig(t, redisConfig(srv, "admin", ""))
	f := filepath.Join(t.TempDir(), "ids")
	os.WriteFile(f, []byte("x1\n\n# comment\nx2\n"), 0o644)
	if r := run(t, "items", "add", "-c", cfg, "a", "b", "--file", f); r.Code != 0 || !strings.Contains(r.Stdout, "4 of 4") {
		t.Errorf("items add: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := run(t, "items", "list", "-c", cfg); len(strings.Fields(r.Stdout)) != 4 {
		t.Errorf("items list: %q", r.Stdout)
	}
	if r := run(t, "items", "remove", "-c", cfg, "a"); r.Code != 0 || !strings.Contains(r.Stdout, "1 of 1") {
		t.Errorf("items remove: %s", r.Stdout)
	}
	if r := run(t, "items", "add", "-c", cfg, "bad\x01id"); r.Code != 2 || !strings.Contains(r.Stderr, "control character") {
		t.Errorf("bad id: %d %q", r.Code, r.Stderr)
	}
	if r := run(t, "requeue", "-c", cfg, "b", "ghost"); r.Code != 1 || !strings.Contains(r.Stdout, "1 of 2") {
		t.Errorf("requeue: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := run(t, "release", "-c", cfg, "b"); r.Code != 2 || !strings.Contains(r.Stderr, "--force") {
		t.Errorf("release without --force: %d %q", r.Code, r.Stderr)
	}
	if r := run(t, "release", "-c", cfg, "--force", "ghost"); r.Code != 1 || !strings.Contains(r.Stderr, "unknown item") {
		t.Errorf("release of an unknown item: %d %q", r.Code, r.Stderr)
	}
}

// A daemon that cannot reach Redis retries with the address in its log
// and still stops on SIGTERM; a second signal stops it at once.
func TestRunRetriesAndSignals(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\n  dial_timeout: 100ms\nlog:\n  format: json\n")
	daemon, stderr := startDaemon(t, cfg)
	waitFor(t, 10*time.Second, "a retry log line", func() bool { return strings.Contains(stderr.String(), "retrying") })
	if !strings.Contains(stderr.String(), "127.0.0.1:1") {
		t.Errorf("retry line without the address:\n%s", stderr.String())
	}
	daemon.Signal(syscall.SIGTERM)
	err := daemon.Wait(5 * time.Second)
	if errors.Is(err, testutil.ErrRunning) {
		t.Fatal("no exit after SIGTERM")
	}
	// A stop, not a failure (it exited 2, which a supervisor reads as a
	// crash): nothing was claimed.
	if err != nil || !strings.Contains(stderr.String(), "stopped before redis was reached") {
		t.Errorf("exit after SIGTERM while unreachable: %v, want 0 and a line saying so:\n%s", err, stderr.String())
	}
	// The same when the signal comes in the middle of an attempt: a
	// server that accepts and never answers (as a paused Redis does).
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	hung := writeConfig(t, fmt.Sprintf("redis:\n  addrs: [%q]\n  read_timeout: 20s\nlog:\n  format: json\n", mute.Addr()))
	daemon, stderr = startDaemon(t, hung)
	time.Sleep(time.Second)
	daemon.Signal(syscall.SIGTERM)
	if err := daemon.Wait(5 * time.Second); err != nil || !strings.Contains(stderr.String(), "stopped before redis was reached") {
		t.Errorf("exit after SIGTERM during a connect attempt: %v, want 0 and a line saying so:\n%s", err, stderr.String())
	}

	// A second signal while draining exits at once.
	srv := redistest.Start(t, nil)
	// A grace longer than the 3s the second signal may take needs a
	// margin above it (sink.exec.grace must be below ownership.margin),
	// and a ttl above twice that; a fresh Redis holds new shards off
	// for one ttl, so keep it short enough to sync within the wait.
	slow := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: sig
  shards: 4
ownership:
  ttl: 8s
  margin: 3900ms
log:
  format: json
items:
  ids: [s]
engine:
  drain_timeout: 1m
sink:
  type: exec
  exec:
    command: ["sh", "-c", "trap '' TERM; sleep 60"]
    grace: 3500ms
`, srv.Addr()))
	daemon2, _ := startDaemon(t, slow)
	waitFor(t, 15*time.Second, "the sync to start", func() bool {
		r := run(t, "status", "-c", slow, "--json")
		return strings.Contains(r.Stdout, `"syncing"`)
	})
	daemon2.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	daemon2.Signal(syscall.SIGINT)
	<-daemon2.Done()
	err = daemon2.Err()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || time.Since(start) > 3*time.Second {
		t.Errorf("second signal: %v after %v", err, time.Since(start))
	}
}

// A daemon paused by SIGSTOP (its own process group only, as a stalled
// host or a debugger would) runs no code: it cannot cancel its exec
// command. The command's supervisor stops it at the lease's end by
// itself, before the claim's record expires and another daemon could
// start the item. An operator's trial saw the command of a paused daemon
// write for 4.2 s after the next owner started.
func TestPausedDaemonsCommandStopsAtLeaseEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	out := filepath.Join(t.TempDir(), "out.txt")
	// drain_timeout: once resumed, the daemon may claim the item again
	// (its lease was lost) before SIGTERM comes, and this command runs
	// until cancelled.
	cfg := writeConfig(t, redisConfig(srv, "paused", fmt.Sprintf(`engine:
  interval: 1h
  workers: 1
  drain_timeout: 2s
items:
  ids: [solo]
sink:
  type: exec
  exec:
    command: ["sh", "-c", "while :; do date +%%s%%N >> %s; sleep 0.05; done"]
    grace: 200ms
`, out)))
	daemon, stderr := startDaemon(t, cfg)
	waitFor(t, 15*time.Second, "the command writing", func() bool { return len(lines(out)) >= 5 })
	if err := daemon.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	const ttl = 3 * time.Second // redisConfig's
	time.Sleep(ttl + 2*time.Second)
	ls := lines(out)
	last, err := strconv.ParseInt(ls[len(ls)-1], 10, 64)
	if err != nil {
		t.Fatalf("last line %q: %v", ls[len(ls)-1], err)
	}
	after := time.Unix(0, last).Sub(paused)
	t.Logf("the command's last write came %v after the pause (ttl %v)", after, ttl)
	if after > ttl {
		t.Errorf("the paused daemon's command wrote %v after the pause, past the claim's ttl (%v): another daemon could have started the item", after, ttl)
	}
	if err := daemon.Resume(); err != nil {
		t.Fatal(err)
	}
	daemon.Signal(syscall.SIGTERM)
	if err := daemon.Wait(10 * time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// A deployment created by a command (status, items add) starts its one
// ttl of waiting then: a daemon started more than a ttl later claims at
// once, without the data-loss warning an operator's trial saw (the
// daemon found no epoch marker, waited a ttl and warned).
func TestDeploymentMadeByACommandWaitsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	out := filepath.Join(t.TempDir(), "out.txt")
	cfg := writeConfig(t, redisConfig(srv, "bycmd", fmt.Sprintf(`engine:
  interval: 1h
sink:
  type: exec
  exec:
    command: ["sh", "-c", "echo $SYNCD_ID >> %s"]
`, out)))
	if r := run(t, "items", "add", "-c", cfg, "a"); r.Code != 0 {
		t.Fatalf("items add: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	time.Sleep(3*time.Second + 500*time.Millisecond) // redisConfig's ttl, and some
	start := time.Now()
	daemon, stderr := startDaemon(t, cfg)
	waitFor(t, 10*time.Second, "a synced", func() bool { return len(lines(out)) >= 1 })
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Errorf("a synced %v after the daemon started: it waited for the ttl", took)
	}
	if logs := stderr.String(); strings.Contains(logs, "epoch marker") || strings.Contains(logs, "held off") {
		t.Errorf("the daemon warned of a hold-off:\n%s", logs)
	}
	daemon.Signal(syscall.SIGTERM)
	daemon.Wait(10 * time.Second)
}
