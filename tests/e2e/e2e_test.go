// Package e2e runs the built syncd binary against real redis-server
// processes: the daemon with the exec and file sinks, batch exit codes and
// reports, status while a sync is in flight, validate on broken configs,
// admin commands, and signals.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

var syncd string // path of the built binary

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "syncd-e2e")
	if err != nil {
		panic(err)
	}
	syncd = filepath.Join(dir, "syncd")
	out, err := exec.Command("go", "build", "-o", syncd, "../../cmd/syncd").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build syncd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	return runEnv(t, nil, args...)
}

// runEnv runs syncd with extra environment variables.
func runEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, syncd, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
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
	cmd := exec.Command(syncd, "run", "-c", cfg)
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
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
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": `syncd_syncs_total{outcome="ok"} 4`} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if !strings.Contains(b.String(), want) {
			t.Errorf("GET %s: %q does not contain %q", path, b.String(), want)
		}
	}
	waitFor(t, 5*time.Second, "/readyz", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
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
	if r.code != 0 {
		t.Fatalf("batch exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
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
	if !strings.Contains(r.stdout, "synced here") {
		t.Errorf("no summary table:\n%s", r.stdout)
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
	if r.code != 1 || !strings.Contains(r.stdout, "poison") {
		t.Errorf("batch with a poison item: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	if r := run(t, "batch", "-c", writeConfig(t, "engine:\n  workers: -3\n")); r.code != 2 || !strings.Contains(r.stderr, ":2: engine.workers") {
		t.Errorf("bad config: exit %d, stderr %q", r.code, r.stderr)
	}
	unreach := writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\n  dial_timeout: 200ms\n")
	if r := run(t, "batch", "-c", unreach); r.code != 2 || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("unreachable redis: exit %d, stderr %q", r.code, r.stderr)
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
	cmd := exec.Command(syncd, "run", "-c", cfg)
	daemonLog := &testutil.Buffer{}
	cmd.Stderr = daemonLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
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
		if r.code != 0 {
			t.Fatalf("status exit %d: %s", r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		return st.Summary.InFlight == 1
	})
	if st.Summary.Items != 2 || st.Summary.Due != 1 {
		t.Errorf("summary %+v", st.Summary)
	}
	for _, it := range st.Items {
		if it.State == "syncing" && (it.Owner == "" || it.Fence == 0) {
			t.Errorf("in-flight item without owner or fence: %+v", it)
		}
	}
	if r := run(t, "status", "-c", cfg); r.code != 0 || !strings.Contains(r.stdout, "1 in flight") {
		t.Errorf("status table:\n%s", r.stdout)
	}
	// An admin release takes the claim away and raises the fence.
	var fence uint64
	for _, it := range st.Items {
		if it.State == "syncing" {
			fence = it.Fence
			r := run(t, "release", "-c", cfg, "--force", it.ID)
			if r.code != 0 || !strings.Contains(r.stdout, "fence raised") {
				t.Errorf("release --force: %d %s %s", r.code, r.stdout, r.stderr)
			}
		}
	}
	if fence == 0 {
		t.Fatal("no syncing item")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if r := run(t, "validate", "-c", "../../config.yaml"); r.code != 0 || !strings.Contains(r.stdout, "key_prefix") {
		t.Errorf("validate of the checked-in config: %d\n%s", r.code, r.stderr)
	}
	broken := writeConfig(t, "redis:\n  shardz: 4\nownership:\n  ttl: 3x\n  heartbeat: 1m\n")
	r := run(t, "validate", "-c", broken)
	if r.code != 2 {
		t.Errorf("exit %d", r.code)
	}
	for _, want := range []string{":2: redis.shardz: unknown key", ":4: ownership.ttl"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r := run(t, "validate", "-c", "/nonexistent.yaml"); r.code != 2 || r.stderr == "" {
		t.Errorf("missing file: %d %q", r.code, r.stderr)
	}
	pw := writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\n  password_env: E2E_PW\n")
	if r := runEnv(t, []string{"E2E_PW=hunter2-secret"}, "validate", "-c", pw); r.code != 0 || strings.Contains(r.stdout+r.stderr, "hunter2") {
		t.Errorf("validate printed the password:\n%s%s", r.stdout, r.stderr)
	}
	// Issue #15: credentials inside values, and custom headers, are not
	// printed.
	leaky := writeConfig(t, `sink:
  type: exec
  exec:
    command: [sync, "https://u:hunter3@h/x?sig=hunter4"]
    env: ["DATABASE_URL=postgres://u:hunter5@h/db"]
`)
	if r := run(t, "validate", "-c", leaky); r.code != 0 || strings.Contains(r.stdout+r.stderr, "hunter") ||
		!strings.Contains(r.stdout, "DATABASE_URL=postgres://xxxxx@h/db") {
		t.Errorf("validate printed a credential, or not the rest:\n%s%s", r.stdout, r.stderr)
	}
	hook := writeConfig(t, "sink:\n  type: http\n  http:\n    url: http://h/x\n    headers:\n      X-Hub: sha1=hunter6\n")
	if r := run(t, "validate", "-c", hook); r.code != 0 || strings.Contains(r.stdout+r.stderr, "hunter") {
		t.Errorf("validate printed a header value:\n%s%s", r.stdout, r.stderr)
	}
	if r := run(t, "frobnicate"); r.code != 2 {
		t.Errorf("unknown command: exit %d", r.code)
	}
	if r := run(t, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "syncd ") {
		t.Errorf("version: %q", r.stdout)
	}
}

func TestItemsAdmin(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	cfg := writeConfig(t, redisConfig(srv, "admin", ""))
	f := filepath.Join(t.TempDir(), "ids")
	os.WriteFile(f, []byte("x1\n\n# comment\nx2\n"), 0o644)
	if r := run(t, "items", "add", "-c", cfg, "a", "b", "--file", f); r.code != 0 || !strings.Contains(r.stdout, "4 of 4") {
		t.Errorf("items add: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := run(t, "items", "list", "-c", cfg); len(strings.Fields(r.stdout)) != 4 {
		t.Errorf("items list: %q", r.stdout)
	}
	if r := run(t, "items", "remove", "-c", cfg, "a"); r.code != 0 || !strings.Contains(r.stdout, "1 of 1") {
		t.Errorf("items remove: %s", r.stdout)
	}
	if r := run(t, "items", "add", "-c", cfg, "bad\x01id"); r.code != 2 || !strings.Contains(r.stderr, "control character") {
		t.Errorf("bad id: %d %q", r.code, r.stderr)
	}
	if r := run(t, "requeue", "-c", cfg, "b", "ghost"); r.code != 1 || !strings.Contains(r.stdout, "1 of 2") {
		t.Errorf("requeue: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := run(t, "release", "-c", cfg, "b"); r.code != 2 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("release without --force: %d %q", r.code, r.stderr)
	}
	if r := run(t, "release", "-c", cfg, "--force", "ghost"); r.code != 2 || !strings.Contains(r.stderr, "unknown item") {
		t.Errorf("release of an unknown item: %d %q", r.code, r.stderr)
	}
}

// A daemon that cannot reach Redis retries with the address in its log
// and still stops on SIGTERM; a second signal stops it at once.
func TestRunRetriesAndSignals(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "redis:\n  addrs: [\"127.0.0.1:1\"]\n  dial_timeout: 100ms\nlog:\n  format: json\n")
	cmd := exec.Command(syncd, "run", "-c", cfg)
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	cmd.Start()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, 10*time.Second, "a retry log line", func() bool { return strings.Contains(stderr.String(), "retrying") })
	if !strings.Contains(stderr.String(), "127.0.0.1:1") {
		t.Errorf("retry line without the address:\n%s", stderr.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("exit after SIGTERM while unreachable: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}

	// A second signal while draining exits at once.
	srv := redistest.Start(t, nil)
	// A grace longer than the 3s the second signal may take needs a
	// margin above it (sink.exec.grace must be below ownership.margin).
	slow := writeConfig(t, fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: sig
  shards: 4
ownership:
  ttl: 20s
  margin: 9s
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
    grace: 8s
`, srv.Addr()))
	cmd2 := exec.Command(syncd, "run", "-c", slow)
	cmd2.Start()
	t.Cleanup(func() { cmd2.Process.Kill(); cmd2.Wait() })
	waitFor(t, 15*time.Second, "the sync to start", func() bool {
		r := run(t, "status", "-c", slow, "--json")
		return strings.Contains(r.stdout, `"syncing"`)
	})
	cmd2.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	cmd2.Process.Signal(syscall.SIGINT)
	err := cmd2.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || time.Since(start) > 3*time.Second {
		t.Errorf("second signal: %v after %v", err, time.Since(start))
	}
}
