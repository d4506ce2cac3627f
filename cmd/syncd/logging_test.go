package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/cmd/syncd/internal/config"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// TestRateLogger: one line per message per interval, the next one
// saying how many were left out; another message has its own budget.
func TestRateLogger(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	r := newRateLogger(zerolog.New(&buf), 10*time.Second)
	r.now = func() time.Time { return now }
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	for i := range 50 {
		r.Printf(t.Context(), dial, 5, fmt.Errorf("connection refused %d", i))
		now = now.Add(100 * time.Millisecond) // 5 s in all
	}
	r.Printf(t.Context(), "sentinel: new master=%q addr=%q", "m", "a")
	now = now.Add(5 * time.Second)
	r.Printf(t.Context(), dial, 5, "connection refused again")
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		got = append(got, m)
	}
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(got), buf.String())
	}
	if got[0]["suppressed"] != nil || !strings.Contains(got[0]["message"].(string), "connection refused 0") {
		t.Errorf("first line = %v", got[0])
	}
	if got[2]["suppressed"] != float64(49) || !strings.Contains(got[2]["message"].(string), "again") {
		t.Errorf("line after the interval = %v, want suppressed 49", got[2])
	}
}

// A secret file any user can read is logged as a warning, its key, line,
// path, mode and fix as fields; a private one is not. One owned by
// another user is a warning with their uid.
func TestLogConfigWarnings(t *testing.T) {
	dir := testutil.PrivateDir(t)
	tok := filepath.Join(dir, "tok")
	if err := os.WriteFile(tok, []byte("s3cret-API-token-never-shown\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(testutil.WriteFile(t, "config.yaml", "log:\n  format: json\nhttp:\n  api_token_file: "+tok+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logConfigWarnings(cfg, zerolog.New(&buf))
	if buf.Len() > 0 {
		t.Errorf("a 0600 token file: logged %s", buf.String())
	}
	if err := os.Chmod(tok, 0o644); err != nil {
		t.Fatal(err)
	}
	logConfigWarnings(cfg, zerolog.New(&buf))
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	delete(got, "config") // the file's temporary path
	want := map[string]any{"level": "warn", "message": "secret file readable by any user on the host", "line": float64(4),
		"key": "http.api_token_file", "path": tok, "mode": "0644", "secret": "API token", "fix": "chmod 600 " + tok}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("log line (-got +want):\n%s", diff)
	}

	// Owned by another user: only root can give it one.
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chmod(tok, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tok, 4242, -1); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	logConfigWarnings(cfg, zerolog.New(&buf))
	got = nil
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	delete(got, "config")
	want = map[string]any{"level": "warn", "message": "file owned by another user, who could replace it", "line": float64(4),
		"key": "http.api_token_file", "path": tok, "owner_uid": float64(4242), "uid": float64(0), "secret": "API token", "fix": "chown root " + tok}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("log line (-got +want):\n%s", diff)
	}
}

// loggerTo returns a logger newLogger made for format, writing to a file
// (not a terminal), and a function that returns what it wrote.
func loggerTo(t *testing.T, format string) (zerolog.Logger, func() string) {
	t.Helper()
	cfg, err := config.Load(testutil.WriteFile(t, "config.yaml", "log:\n  format: "+format+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return newLogger(cfg, f), func() string { b, _ := os.ReadFile(path); return string(b) }
}

// TestLogTimestamps: JSON has RFC 3339 times to the millisecond; the
// console shows the time of day to the millisecond, real milliseconds
// (not .000), and no colours when it is not a terminal.
func TestLogTimestamps(t *testing.T) {
	l, read := loggerTo(t, "json")
	var stamps []string
	for range 20 {
		l.Info().Msg("tick")
		time.Sleep(3 * time.Millisecond)
	}
	for _, line := range strings.Split(strings.TrimSpace(read()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		ts, _ := m["time"].(string)
		if _, err := time.Parse(jsonTimeFormat, ts); err != nil || !regexp.MustCompile(`T\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(ts) {
			t.Fatalf("time %q is not RFC 3339 UTC with milliseconds (%v)", ts, err)
		}
		stamps = append(stamps, ts[len(ts)-4:])
	}
	if distinct(stamps) < 2 {
		t.Errorf("JSON milliseconds never change: %v", stamps)
	}

	c, readc := loggerTo(t, "console")
	for range 20 {
		c.Info().Msg("tick")
		time.Sleep(3 * time.Millisecond)
	}
	out := readc()
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colours on a file:\n%q", out)
	}
	var ms []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := regexp.MustCompile(`^\d\d:\d\d:\d\d\.(\d{3}) INF tick`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("console line %q does not start with HH:MM:SS.mmm", line)
		}
		ms = append(ms, m[1])
	}
	if distinct(ms) < 2 {
		t.Errorf("console milliseconds never change: %v", ms)
	}
}

func distinct(s []string) int {
	seen := map[string]bool{}
	for _, x := range s {
		seen[x] = true
	}
	return len(seen)
}

// The batch progress line, off a terminal, gives the rate to 0.1 items/s
// as the summary does (an operator's trial saw 2.3333333333333335).
func TestBatchProgressLine(t *testing.T) {
	var buf bytes.Buffer
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr")) // not a terminal
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := newProgress(f, zerolog.New(&buf))
	p.update(engine.Progress{Total: 10, Done: 7, Pending: 3, Elapsed: 3 * time.Second})
	var ev struct {
		Done, Total, Pending int
		Rate                 json.Number
		ETA                  string
	}
	d := json.NewDecoder(&buf)
	d.UseNumber()
	if err := d.Decode(&ev); err != nil {
		t.Fatal(err)
	}
	if ev.Rate != "2.3" || ev.Done != 7 || ev.Total != 10 || ev.Pending != 3 || ev.ETA != "1s" {
		t.Errorf("progress line %+v; want rate 2.3, 7 of 10 done, 3 pending, eta 1s", ev)
	}
}

// captureStderr runs f with os.Stderr, where commands log, going to a
// file, and returns what was written there.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	fh, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	saved := os.Stderr
	os.Stderr = fh
	defer func() { os.Stderr = saved }()
	f()
	b, err := os.ReadFile(fh.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A command a person runs prints its own error, one line, and nothing
// of go-redis's: against a stopped Redis, status printed go-redis's
// "failed to dial after 5 attempts" as a JSON line first (an outside
// trial). A Redis that wants a password is refused the same way.
func TestAdminCommandsPrintOnlyTheirError(t *testing.T) {
	stopped := redistest.Start(t, nil)
	stopped.Kill(t)
	locked := redistest.Start(t, &redistest.Options{Password: "s3cret-password"})
	cfgFor := func(name, addr string) string {
		return testutil.WriteFile(t, name, fmt.Sprintf("redis:\n  addrs: [%q]\n  dial_timeout: 1s\nlog:\n  format: json\n  level: debug\n", addr))
	}
	down, auth := cfgFor("down.yaml", stopped.Addr()), cfgFor("auth.yaml", locked.Addr())
	wrong := testutil.WriteFile(t, "wrong.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  password_env: SYNCD_TEST_WRONG_PW\n", locked.Addr()))
	t.Setenv("SYNCD_TEST_WRONG_PW", "not-the-password")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-c", down}, "syncd status: " + down + ":2: redis.addrs: connect to " + stopped.Addr() + ": dial tcp: connect: connection refused"},
		{[]string{"items", "list", "-c", down}, "syncd items: " + down + ":2: redis.addrs: connect to "},
		{[]string{"requeue", "-c", down, "a"}, "syncd requeue: " + down + ":2: redis.addrs: connect to "},
		// A refused password names the key to fix (before, only Redis's
		// words: an outside trial).
		{[]string{"status", "-c", auth}, "syncd status: " + auth + ":2: redis.addrs: connect to " + locked.Addr() + ": NOAUTH "},
		{[]string{"trigger", "-c", auth, "a"}, "syncd trigger: " + auth + ":2: redis.addrs: connect to " + locked.Addr() + ": NOAUTH "},
		{[]string{"status", "-c", wrong}, "syncd status: " + wrong + ":3: redis.password_env: connect to " + locked.Addr() + ": WRONGPASS "},
	} {
		var code int
		var out, errb string
		logged := captureStderr(t, func() { code, out, errb = syncd(tt.args...) })
		hint := !strings.Contains(tt.want, "NOAUTH") || strings.Contains(errb, "set redis.password_file or redis.password_env")
		if code != exitUsage || out != "" || !strings.HasPrefix(errb, tt.want) || strings.Count(errb, "\n") != 1 || logged != "" || !hint {
			t.Errorf("syncd %q: exit %d, stdout %q, stderr %q, logged %q; want exit %d, stderr %q... on one line, nothing logged",
				tt.args, code, out, errb, logged, exitUsage, tt.want)
		}
	}
}
