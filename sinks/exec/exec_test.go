//go:build unix

package exec_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
	"github.com/syncd/syncd/sinks/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newSink(t *testing.T, cfg execsink.Config) *execsink.Sink {
	t.Helper()
	s, err := execsink.New(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// recordScript writes the SYNCD_* variables, NUL-separated, to a new file
// in $OUT.
const recordScript = `f=$(mktemp "$OUT/item.XXXXXX") &&
printf '%s\0' "$SYNCD_ID" "$SYNCD_FENCE" "$SYNCD_OWNER" "$SYNCD_ATTEMPT" "$SYNCD_LAST_SYNC_MS" > "$f"`

// recorded reads the items recordScript wrote to dir.
func recorded(t *testing.T, dir string) []sinks.Item {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "item.*"))
	if err != nil {
		t.Fatal(err)
	}
	var items []sinks.Item
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v := strings.Split(string(data), "\x00")
		if len(v) != 6 || v[5] != "" {
			t.Fatalf("%s: got %q, want 5 NUL-terminated values", f, data)
		}
		fence, err1 := strconv.ParseUint(v[1], 10, 64)
		attempt, err2 := strconv.Atoi(v[3])
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		it := sinks.Item{ID: v[0], Fence: fence, Owner: v[2], Attempt: attempt}
		if v[4] != "" {
			ms, err := strconv.ParseInt(v[4], 10, 64)
			if err != nil {
				t.Fatalf("%s: SYNCD_LAST_SYNC_MS: %v", f, err)
			}
			it.LastSync = time.UnixMilli(ms)
		}
		items = append(items, it)
	}
	return items
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T, b sinktest.Behavior) sinktest.Instance {
			out := t.TempDir()
			cfg := execsink.Config{Env: []string{"OUT=" + out}}
			switch b {
			case sinktest.Succeed:
				cfg.Command = []string{"sh", "-c", recordScript}
			case sinktest.Fail:
				cfg.Command = []string{"sh", "-c", `echo "no such thing: $SYNCD_ID" >&2; exit 7`}
			case sinktest.Block:
				cfg.Command = []string{"sleep", "60"}
			}
			s, err := execsink.New(cfg, zerolog.New(zerolog.NewTestWriter(t)))
			if err != nil {
				t.Fatal(err)
			}
			return sinktest.Instance{Sink: s, Received: func() []sinks.Item { return recorded(t, out) }}
		},
		FailText: `exit status 7; stderr: "no such thing: item/ü`,
	})
}

// TestEnvironment: the command sees the allow-list of syncd's
// environment, Config.Env and the item, and nothing else: not the secrets
// in syncd's environment.
func TestEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TEST_SYNCD_INHERITED", "inherited")
	t.Setenv("TEST_SYNCD_OVERRIDDEN", "inherited")
	t.Setenv("NC_REDIS_PW", "hunter2") // a secret, as redis.password_env names one
	allowed := map[string]string{
		"HOME": "/home/syncd", "USER": "syncd", "LOGNAME": "syncd", "SHELL": "/bin/sh",
		"TMPDIR": dir, "TZ": "Europe/Zurich", "LANG": "C.UTF-8", "LANGUAGE": "de",
		"LC_ALL": "C.UTF-8", "LC_TIME": "C",
	}
	for k, v := range allowed {
		t.Setenv(k, v)
	}
	allowed["PATH"] = os.Getenv("PATH")
	out := filepath.Join(dir, "env")
	s := newSink(t, execsink.Config{
		Command: []string{"sh", "-c", `env > "$OUT"; pwd >> "$OUT"`},
		Env:     []string{"OUT=" + out, "TEST_SYNCD_OVERRIDDEN=config", "EXTRA=a=b", "TZ=UTC"},
		Dir:     dir,
	})
	env := func(it sinks.Item) map[string]string {
		t.Helper()
		if err := s.Sync(t.Context(), it); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		got := make(map[string]string)
		for line := range strings.Lines(string(data)) {
			line = strings.TrimSuffix(line, "\n")
			k, v, ok := strings.Cut(line, "=")
			switch {
			case !ok:
				got["PWD()"] = line
			case k == "PWD" || k == "OLDPWD" || k == "SHLVL" || k == "_":
				// set by sh itself
			default:
				got[k] = v
			}
		}
		return got
	}

	last := time.Date(2024, 5, 1, 12, 0, 0, 123_999_999, time.UTC)
	got := env(sinks.Item{ID: "a b/ü", Fence: 1<<63 + 5, Owner: "h/1/r/w3", Attempt: 2, LastSync: last})
	want := map[string]string{
		"SYNCD_ID": "a b/ü", "SYNCD_FENCE": "9223372036854775813", "SYNCD_OWNER": "h/1/r/w3",
		"SYNCD_ATTEMPT": "2", "SYNCD_LAST_SYNC_MS": strconv.FormatInt(last.UnixMilli(), 10),
		"TEST_SYNCD_OVERRIDDEN": "config", "EXTRA": "a=b", "OUT": out,
		"PWD()": dir,
	}
	for k, v := range allowed {
		want[k] = v
	}
	want["TZ"] = "UTC" // Config.Env overrides the allow-list
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("environment (-got +want):\n%s", diff)
	}

	got = env(sinks.Item{ID: "new", Fence: 1, Attempt: 1})
	if v, ok := got["SYNCD_LAST_SYNC_MS"]; !ok || v != "" {
		t.Errorf("SYNCD_LAST_SYNC_MS = %q (set %v), want set and empty for an item that never synced", v, ok)
	}
	if v, ok := got["NC_REDIS_PW"]; ok {
		t.Errorf("the command saw NC_REDIS_PW=%q from syncd's environment", v)
	}
}

func TestExitStatus(t *testing.T) {
	s := newSink(t, execsink.Config{Command: []string{"sh", "-c", `echo first >&2; echo "boom: $SYNCD_ID" >&2; exit 3`}})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	var ee *osexec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Sync = %v, want an ExitError with code 3", err)
	}
	want := `exec: item "a": exit status 3; stderr: "first\nboom: a"`
	if err.Error() != want {
		t.Errorf("Sync = %q, want %q", err, want)
	}
	if sinks.IsPermanent(err) {
		t.Errorf("a failed command must be retryable: %v", err)
	}
}

func TestStderrTail(t *testing.T) {
	s := newSink(t, execsink.Config{
		Command:    []string{"sh", "-c", `i=0; while [ $i -lt 200 ]; do printf 'éééé' >&2; i=$((i+1)); done; echo ' THE END' >&2; exit 1`},
		StderrTail: 16,
	})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if err == nil {
		t.Fatal("Sync = nil, want an error")
	}
	// A tail that is all one cut line shows what follows its first
	// clause (redact.Tail); this one has none, and all of it might be the
	// rest of a credential whose name was cut off (the words of a Redis
	// AUTH). TailBuffer's own test covers the UTF-8 sequence the cut
	// splits.
	want := `exec: item "a": exit status 1; stderr: "…"`
	if err.Error() != want {
		t.Errorf("Sync = %q, want %q", err, want)
	}
}

// A tail cut inside a Redis AUTH shows nothing of its password: an
// outside tester saw "… s3cretQ1" for redis-cli AUTH s3cretQ1 with the
// cut inside AUTH. The lines after the cut one show.
func TestStderrTailCutAuth(t *testing.T) {
	s := newSink(t, execsink.Config{
		Command:    []string{"sh", "-c", `echo 'redis-cli AUTH s3cretQ1' >&2; echo 'exit: 1' >&2; exit 1`},
		StderrTail: len("TH s3cretQ1\nexit: 1\n"),
	})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	want := `exec: item "a": exit status 1; stderr: "…\nexit: 1"`
	if err == nil || err.Error() != want {
		t.Errorf("Sync = %v, want %q", err, want)
	}
}

// A tail that is one long line cut inside a Redis AUTH shows the end of
// the line after the clause that holds the password, where it showed
// "…" alone and the error an operator needs with it.
func TestStderrTailOneLine(t *testing.T) {
	line := "redis-cli AUTH s3cretQ21: WRONGPASS invalid password; dial tcp: connection refused"
	s := newSink(t, execsink.Config{
		Command:    []string{"sh", "-c", `echo "$0" >&2; exit 1`, line},
		StderrTail: len(line) - strings.Index(line, "TH s3cret") + 1,
	})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	want := `exec: item "a": exit status 1; stderr: "… WRONGPASS invalid password; dial tcp: connection refused"`
	if err == nil || err.Error() != want {
		t.Errorf("Sync = %v, want %q", err, want)
	}
}

// fifo makes a named pipe in dir and returns its path and a channel that
// receives the first line written to it.
func fifo(t *testing.T, dir string) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(dir, "ready")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// O_RDWR does not block waiting for a writer, and the poller lets
	// Close unblock the read if the command never writes.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		line, _ := bufio.NewReader(f).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	t.Cleanup(func() {
		f.Close()
		<-done
	})
	return path, lines
}

func awaitLine(t *testing.T, lines <-chan string) []int {
	t.Helper()
	select {
	case line := <-lines:
		var pids []int
		for f := range strings.FieldsSeq(line) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			pids = append(pids, pid)
		}
		return pids
	case <-time.After(5 * time.Second):
		t.Fatal("the command did not report ready")
		return nil
	}
}

// procStat and alive read /proc (proc_test.go, shared with the package's
// own tests).
var procStat, alive = execsink.ProcStat, execsink.Alive

// groupAlive returns the live members of process group pgid.
func groupAlive(pgid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if state, pgrp, ok := procStat(pid); ok && pgrp == pgid && state != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// eventuallyGroupDead waits a short while for group pgid to have no live
// members.
func eventuallyGroupDead(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids := groupAlive(pgid)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process group %d still has live members %v", pgid, pids)
			syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exists reports whether pid exists at all, zombie or not.
func exists(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// eventuallyDead waits a short while for pids to die: SIGKILL is delivered
// asynchronously.
func eventuallyDead(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d still alive", pid)
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// cancelled is the outcome of syncAndCancel.
type cancelled struct {
	pids  []int         // what the command wrote to the fifo
	err   error         // what Sync returned
	took  time.Duration // from the cancellation to Sync returning
	cause error         // the cancellation cause
}

// syncAndCancel starts Sync, waits for the command's first line on the fifo
// (its pids), then cancels the context with a cause.
func syncAndCancel(t *testing.T, s *execsink.Sink, lines <-chan string) cancelled {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- s.Sync(ctx, sinks.Item{ID: "a"}) }()
	c := cancelled{pids: awaitLine(t, lines), cause: errors.New("lease lost")}
	start := time.Now()
	cancel(c.cause)
	select {
	case c.err = <-done:
		c.took = time.Since(start)
	case <-time.After(10 * time.Second):
		t.Fatal("Sync did not return after cancel")
	}
	if !errors.Is(c.err, c.cause) {
		t.Fatalf("Sync = %v, want it to wrap the cause", c.err)
	}
	return c
}

func TestIgnoresSIGTERM(t *testing.T) {
	dir := t.TempDir()
	ready, lines := fifo(t, dir)
	const grace = 300 * time.Millisecond
	s := newSink(t, execsink.Config{
		// The ignored disposition is inherited by sleep.
		Command: []string{"sh", "-c", `trap '' TERM; echo "$$" > "$READY"; sleep 30; echo survived`},
		Env:     []string{"READY=" + ready},
		Grace:   grace,
	})
	c := syncAndCancel(t, s, lines)
	pids, err, took := c.pids, c.err, c.took
	if !strings.Contains(err.Error(), "SIGKILL after 300ms") {
		t.Errorf("Sync = %q, want it to say SIGKILL was needed", err)
	}
	if took < grace || took > grace+2*time.Second {
		t.Errorf("Sync returned %v after cancel, want about the grace of %v", took, grace)
	}
	t.Logf("returned %v after cancel: %v", took, err)
	if exists(pids[0]) {
		t.Errorf("the command, pid %d, was not reaped", pids[0])
	}
	eventuallyGroupDead(t, pids[0]) // the sleep that ignored SIGTERM too
}

func TestChildKilledOnCancel(t *testing.T) {
	ready, lines := fifo(t, t.TempDir())
	s := newSink(t, execsink.Config{
		Command: []string{"sh", "-c", `sleep 30 & echo "$$ $!" > "$READY"; wait`},
		Env:     []string{"READY=" + ready},
	})
	c := syncAndCancel(t, s, lines)
	pids, took := c.pids, c.took
	if took > 2*time.Second {
		t.Errorf("Sync took %v after cancel; the command honours SIGTERM", took)
	}
	if exists(pids[0]) {
		t.Errorf("the command, pid %d, was not reaped", pids[0])
	}
	eventuallyDead(t, pids[1])
	eventuallyGroupDead(t, pids[0])
}

// TestChildKilledAfterExit: a background child the command leaves running
// is killed when the command exits, and its open stderr does not hold Sync.
func TestChildKilledAfterExit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pid")
	s := newSink(t, execsink.Config{
		Command: []string{"sh", "-c", `sleep 30 & echo "$!" > "$OUT"; exit 0`},
		Env:     []string{"OUT=" + out},
	})
	start := time.Now()
	if err := s.Sync(t.Context(), sinks.Item{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Sync took %v", took)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	eventuallyDead(t, pid)
}

// TestEscapedDescendant: a descendant that left the process group keeps
// stderr open; Sync stops reading it soon after the command exits.
func TestEscapedDescendant(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pid")
	s := newSink(t, execsink.Config{
		// The leader waits until the descendant has left its group.
		Command: []string{"sh", "-c", `setsid sh -c 'echo $$ > "$OUT"; exec sleep 30' &
while [ ! -s "$OUT" ]; do sleep 0.01; done; echo bye >&2; exit 4`},
		Env: []string{"OUT=" + out},
	})
	start := time.Now()
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	took := time.Since(start)
	if data, rerr := os.ReadFile(out); rerr == nil {
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); perr == nil {
			syscall.Kill(pid, syscall.SIGKILL) // it escaped the sink; clean up here
		}
	}
	if err == nil || !strings.Contains(err.Error(), `exit status 4; stderr: "bye"`) {
		t.Errorf("Sync = %v, want exit status 4 with stderr", err)
	}
	if took > 5*time.Second {
		t.Errorf("Sync took %v, want about a second", took)
	}
	t.Logf("Sync returned after %v: %v", took, err)
}

func TestTimeout(t *testing.T) {
	s := newSink(t, execsink.Config{Command: []string{"sleep", "30"}, Timeout: 100 * time.Millisecond})
	start := time.Now()
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sync = %v, want it to wrap context.DeadlineExceeded", err)
	}
	want := `exec: item "a": timeout after 100ms (context deadline exceeded): sent SIGTERM: signal: terminated`
	if err.Error() != want {
		t.Errorf("Sync = %q, want %q", err, want)
	}
	if took < 100*time.Millisecond || took > 3*time.Second {
		t.Errorf("Sync took %v", took)
	}
	// The timeout is per run: the next Sync gets its own. Three runs take
	// longer than one timeout; the timeout leaves room for starting the
	// supervisor on a busy machine.
	s2 := newSink(t, execsink.Config{Command: []string{"sleep", "0.7"}, Timeout: 2 * time.Second})
	for range 3 {
		if err := s2.Sync(t.Context(), sinks.Item{ID: "b"}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ran")
	s := newSink(t, execsink.Config{Command: []string{"touch", out}})
	ctx, cancel := context.WithCancelCause(t.Context())
	cause := errors.New("lease lost")
	cancel(cause)
	if err := s.Sync(ctx, sinks.Item{ID: "a"}); !errors.Is(err, cause) {
		t.Fatalf("Sync = %v, want it to wrap the cause", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the command ran with a cancelled context")
	}
}

func TestRelativeCommandInDir(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$SYNCD_ID\" > out\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, execsink.Config{Command: []string{"./hook.sh"}, Dir: dir})
	if err := s.Sync(t.Context(), sinks.Item{ID: "rel"}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "out")); string(data) != "rel\n" {
		t.Errorf("out = %q, want %q", data, "rel\n")
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cfg    execsink.Config
		want   string
		wantIs error
	}{
		{"not in PATH", execsink.Config{Command: []string{"syncd-no-such-command"}},
			`exec: command: "syncd-no-such-command": executable file not found in $PATH`, osexec.ErrNotFound},
		{"missing path", execsink.Config{Command: []string{filepath.Join(dir, "nope")}},
			`exec: command: "` + filepath.Join(dir, "nope") + `": `, os.ErrNotExist},
		{"not executable", execsink.Config{Command: []string{plain}},
			`exec: command: "` + plain + `": permission denied`, os.ErrPermission},
		{"relative missing in dir", execsink.Config{Command: []string{"./nope"}, Dir: dir},
			`exec: command: "./nope": `, os.ErrNotExist},
		{"missing dir", execsink.Config{Command: []string{"true"}, Dir: filepath.Join(dir, "nope")},
			"exec: dir: ", os.ErrNotExist},
		{"dir is a file", execsink.Config{Command: []string{"true"}, Dir: plain},
			"exec: dir: ", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := execsink.New(tt.cfg, zerolog.Nop())
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("New = %v, want prefix %q", err, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("New = %v, want it to wrap %v", err, tt.wantIs)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		cfg  execsink.Config
		want string
	}{
		{execsink.Config{Command: []string{"true"}}, ""},
		{execsink.Config{Command: []string{"sh", "-c", "x"}, Env: []string{"A=", "B=c=d"}, Timeout: 1, Grace: 1, StderrTail: 1}, ""},
		{execsink.Config{}, "exec: command: must not be empty"},
		{execsink.Config{Command: []string{""}}, "exec: command: must not be empty"},
		{execsink.Config{Command: []string{"echo", "a\x00b"}}, "exec: command: argument 1 contains NUL"},
		{execsink.Config{Command: []string{"true"}, Env: []string{"NOEQUALS"}}, `exec: env: "NOEQUALS" is not KEY=value`},
		{execsink.Config{Command: []string{"true"}, Env: []string{"=x"}}, `exec: env: "=x" is not KEY=value`},
		{execsink.Config{Command: []string{"true"}, Env: []string{"SYNCD_ID=x"}}, "exec: env: SYNCD_ID is set by the sink"},
		{execsink.Config{Command: []string{"true"}, Timeout: -1}, "exec: timeout: must not be negative"},
		{execsink.Config{Command: []string{"true"}, Grace: -1}, "exec: grace: must not be negative"},
		{execsink.Config{Command: []string{"true"}, StderrTail: -1}, "exec: stderr_tail: must not be negative"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v.Validate() = %v, want nil", tt.cfg, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v.Validate() = %v, want prefix %q", tt.cfg, err, tt.want)
		}
	}
}

func TestValidateEveryField(t *testing.T) {
	err := execsink.Config{
		Command:    []string{"", "a\x00"},
		Env:        []string{"NOEQUALS", "SYNCD_FENCE=1", "OK=1"},
		Timeout:    -1,
		Grace:      -2,
		StderrTail: -3,
	}.Validate()
	if err == nil {
		t.Fatal("Validate = nil")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		"exec: command: must not be empty",
		"exec: command: argument 1 contains NUL",
		`exec: env: "NOEQUALS" is not KEY=value`,
		"exec: env: SYNCD_FENCE is set by the sink",
		"exec: timeout: must not be negative, got -1ns",
		"exec: grace: must not be negative, got -2ns",
		"exec: stderr_tail: must not be negative, got -3",
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Validate (-got +want):\n%s", diff)
	}
}

func TestWithDefaults(t *testing.T) {
	got := execsink.Config{Command: []string{"true"}}.WithDefaults()
	if got.Grace != execsink.GraceDefault || got.StderrTail != execsink.StderrTailDefault || got.Timeout != 0 {
		t.Errorf("WithDefaults = %+v", got)
	}
	set := execsink.Config{Grace: time.Second, StderrTail: 10}
	if got := set.WithDefaults(); got.Grace != time.Second || got.StderrTail != 10 {
		t.Errorf("WithDefaults overrode set fields: %+v", got)
	}
}

// TestStartError: a command that New found but that is gone when a sync
// starts it is an ordinary error that says so.
func TestStartError(t *testing.T) {
	script := filepath.Join(t.TempDir(), "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, execsink.Config{Command: []string{script}})
	if err := os.Remove(script); err != nil {
		t.Fatal(err)
	}
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), `exec: item "a": start: `) {
		t.Fatalf("Sync = %v, want a start error wrapping os.ErrNotExist", err)
	}
	var se *execsink.StartError
	if !errors.As(err, &se) || !strings.Contains(se.Text, script) {
		t.Errorf("Sync = %v, want a StartError naming the program", err)
	}
	if sinks.IsPermanent(err) {
		t.Errorf("a start error must be retryable: %v", err)
	}
}

// TestKilledBySignal: the command's death by a signal reaches Sync as
// such, through the supervisor, for signals Go's runtime would handle
// otherwise.
func TestKilledBySignal(t *testing.T) {
	for _, tt := range []struct {
		sig  string
		want string
	}{
		{"TERM", "signal: terminated"},
		{"USR1", "signal: user defined signal 1"},
		{"SEGV", "signal: segmentation fault"},
		{"QUIT", "signal: quit"},
	} {
		t.Run(tt.sig, func(t *testing.T) {
			s := newSink(t, execsink.Config{Command: []string{"sh", "-c", "ulimit -c 0; kill -" + tt.sig + " $$"}})
			err := s.Sync(t.Context(), sinks.Item{ID: "a"})
			var ee *osexec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("Sync = %v, want an ExitError", err)
			}
			if want := `exec: item "a": ` + tt.want; err.Error() != want {
				t.Errorf("Sync = %q, want %q", err, want)
			}
		})
	}
}

// TestSupervisorTerminated: SIGTERM to the supervisor stops the command's
// group as the loss of syncd would: SIGTERM, the grace, SIGKILL.
func TestSupervisorTerminated(t *testing.T) {
	ready, lines := fifo(t, t.TempDir())
	const grace = 300 * time.Millisecond
	s := newSink(t, execsink.Config{
		Command: []string{"sh", "-c", `trap '' TERM; sleep 30 & echo "$PPID $$ $!" > "$READY"; wait`},
		Env:     []string{"READY=" + ready},
		Grace:   grace,
	})
	done := make(chan error, 1)
	go func() { done <- s.Sync(t.Context(), sinks.Item{ID: "a"}) }()
	pids := awaitLine(t, lines)
	start := time.Now()
	if err := syscall.Kill(pids[0], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		took := time.Since(start)
		if err == nil || !strings.HasSuffix(err.Error(), "signal: killed") {
			t.Errorf("Sync = %v, want the command killed", err)
		}
		if took < grace {
			t.Errorf("Sync returned %v after SIGTERM to the supervisor, before the grace of %v", took, grace)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sync did not return")
	}
	eventuallyDead(t, pids[2])
	eventuallyGroupDead(t, pids[1])
}

// TestSupervisorKilled: if the supervisor itself is killed, the sink kills
// the command's group, as it did before there was a supervisor.
func TestSupervisorKilled(t *testing.T) {
	ready, lines := fifo(t, t.TempDir())
	// The sink learns the command's group from the supervisor's first
	// line, which the supervisor writes once its command has started: the
	// test kills the supervisor after that, when the sink has logged it.
	// (Killed between the two, which the command's own output can show
	// first on a loaded machine, the supervisor takes the command itself
	// with it on Linux (TestCommandDiesWithItsSupervisor), but a child the
	// command started in those microseconds, like this one's sleep, runs
	// on: the sink has no group to kill.)
	started := make(chan struct{}, 1)
	s, err := execsink.New(execsink.Config{
		Command: []string{"sh", "-c", `trap '' TERM; sleep 30 & echo "$PPID $$ $!" > "$READY"; wait`},
		Env:     []string{"READY=" + ready},
	}, zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logHook(func(line string) {
		if strings.Contains(line, "command started") {
			select {
			case started <- struct{}{}:
			default:
			}
		}
	}))).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	done := make(chan error, 1)
	go func() { done <- s.Sync(t.Context(), sinks.Item{ID: "a"}) }()
	pids := awaitLine(t, lines)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the sink never logged the command's start")
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.HasSuffix(err.Error(), "signal: killed") {
			t.Errorf("Sync = %v, want the supervisor's death", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sync did not return")
	}
	eventuallyDead(t, pids[1], pids[2])
	eventuallyGroupDead(t, pids[1])
}

// logHook is a log writer that passes each line to f.
type logHook func(line string)

func (h logHook) Write(p []byte) (int, error) {
	h(string(p))
	return len(p), nil
}

// A syncd that runs no code (SIGSTOP, a stalled VM) neither cancels the
// sync nor closes the supervisor's pipe. The supervisor stops the command
// at the lease's end by itself, and keeps it running while heartbeats
// move that end on. Here the context is never cancelled, as in a paused
// syncd: only the supervisor can stop the command. An operator's trial
// saw the command of a paused syncd write for 4.2 s after the next owner
// started.
func TestSupervisorStopsCommandAtLeaseEnd(t *testing.T) {
	s := newSink(t, execsink.Config{Command: []string{"sleep", "30"}, Grace: time.Second})
	const left = 300 * time.Millisecond
	var end atomic.Int64 // the lease's end, unix ns
	end.Store(time.Now().Add(left).UnixNano())
	ctx := sinks.WithLeaseExpiry(t.Context(), func() time.Time { return time.Unix(0, end.Load()) })
	stop := make(chan struct{})
	beats := make(chan struct{})
	go func() { // heartbeats for a second, then none
		defer close(beats)
		for range 10 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			end.Store(time.Now().Add(left).UnixNano())
		}
	}()
	defer func() { close(stop); <-beats }()
	start := time.Now()
	err := s.Sync(ctx, sinks.Item{ID: "a"})
	took := time.Since(start)
	if want := `, and the supervisor stopped the command: signal: terminated`; !errors.Is(err, sinks.ErrLeaseEnded) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Sync = %v, want sinks.ErrLeaseEnded, ending %q", err, want)
	}
	// The last heartbeat at about 1 s moved the end to about 1.3 s.
	if took < time.Second+left-50*time.Millisecond || took > 3*time.Second {
		t.Errorf("Sync took %v, want about %v: stopped at the lease's end as the heartbeats left it", took, time.Second+left)
	}
	t.Logf("Sync returned after %v: %v", took, err)
}

// A heartbeat that moves the lease's end on after the supervisor has
// acted on the end it knew comes too late: the command is stopping. The
// error still says the lease ended, where it said only "signal:
// terminated" when it compared the time with the new end (the test
// above, under load). The command marks its SIGTERM in a file, which
// turns the heartbeat on, and dies of it 200 ms later, so the sink
// passes the new end on before it sees the exit.
func TestSupervisorStopsCommandHeartbeatTooLate(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "termed")
	script := `trap 'touch "$1"; sleep 0.2; trap - TERM; kill -TERM $$' TERM; sleep 30 & wait $!; sleep 30 & wait $!`
	s := newSink(t, execsink.Config{Command: []string{"sh", "-c", script, "sh", mark}, Grace: 5 * time.Second})
	first := time.Now().Add(300 * time.Millisecond)
	ctx := sinks.WithLeaseExpiry(t.Context(), func() time.Time {
		if _, err := os.Stat(mark); err == nil {
			return first.Add(10 * time.Second) // the heartbeat, late
		}
		return first
	})
	start := time.Now()
	err := s.Sync(ctx, sinks.Item{ID: "a"})
	if want := `, and the supervisor stopped the command: signal: terminated`; !errors.Is(err, sinks.ErrLeaseEnded) || !strings.Contains(err.Error(), want) { // the shell may add stderr
		t.Errorf("Sync = %v, want sinks.ErrLeaseEnded and %q", err, want)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Sync took %v: the supervisor did not stop the command at the first end", took)
	}
}

// A command the supervisor stopped at the lease's end is reported so
// (sinks.ErrLeaseEnded, which the engine hands back uncounted) whatever
// it exits with: one that traps SIGTERM and exits 143, or 0, by itself
// counted as the item's failure, or as a success (an outside trial, with
// a paused syncd whose heartbeat then won the race with the lease's
// timer).
func TestSupervisorStopReportedWhateverTheExit(t *testing.T) {
	for _, code := range []int{143, 0} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			script := fmt.Sprintf(`trap 'exit %d' TERM; sleep 30 & wait $!`, code)
			s := newSink(t, execsink.Config{Command: []string{"sh", "-c", script}, Grace: 5 * time.Second})
			end := time.Now().Add(300 * time.Millisecond)
			ctx := sinks.WithLeaseExpiry(t.Context(), func() time.Time { return end })
			err := s.Sync(ctx, sinks.Item{ID: "a"})
			if !errors.Is(err, sinks.ErrLeaseEnded) || !strings.Contains(err.Error(), "the supervisor stopped the command") {
				t.Errorf("Sync = %v, want sinks.ErrLeaseEnded", err)
			}
		})
	}
}

// The stderr an error quotes goes to logs, status, the API and the web
// page: the values of secret-named Config.Env variables, credentials
// named as such (token=..., Bearer ...) and a secret cut in two by the
// tail's start are hidden; the rest is kept. An operator's trial found
// "token=supersecret123" in the unauthenticated API's item view.
func TestStderrSecretsRedacted(t *testing.T) {
	s := newSink(t, execsink.Config{
		Command: []string{"sh", "-c", `echo "using $API_TOKEN at https://u:$API_TOKEN@h/x?sig=abc mode=$MODE password=hunter22 auth: Bearer abcdefgh" >&2; echo "{\"token\":\"jsonTOK1\"} secret='quot ed1' --password flagPW1" >&2; exit 3`},
		Env:     []string{"API_TOKEN=supersecret-123", "MODE=production"},
	})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if err == nil {
		t.Fatal("Sync succeeded")
	}
	msg := err.Error()
	for _, leak := range []string{"supersecret", "hunter22", "abcdefgh", "abc ", "jsonTOK1", "quot ed1", "flagPW1"} {
		if strings.Contains(msg, leak) {
			t.Errorf("error %q shows %q", msg, leak)
		}
	}
	for _, kept := range []string{"using [redacted] at https://h/x?sig=xxxxx", "mode=production", "Bearer xxxxx", "exit status 3"} {
		if !strings.Contains(msg, kept) {
			t.Errorf("error %q lacks %q", msg, kept)
		}
	}
	// A tail that starts inside the secret: no piece of it is left, and
	// the line after the cut one shows.
	cut := newSink(t, execsink.Config{
		Command:    []string{"sh", "-c", `printf 'xx %s\nthe end\n' "$API_TOKEN" >&2; exit 3`},
		Env:        []string{"API_TOKEN=supersecret-123"},
		StderrTail: 16,
	})
	err = cut.Sync(t.Context(), sinks.Item{ID: "a"})
	if err == nil || strings.Contains(err.Error(), "123") || strings.Contains(err.Error(), "ret-") || !strings.Contains(err.Error(), "the end") {
		t.Errorf("cut tail: %v", err)
	}
}
