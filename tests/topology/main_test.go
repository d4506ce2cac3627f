package topology

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/testutil"
)

func TestMain(m *testing.M) {
	redis.SetLogger(goRedisLog)
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		// go-redis keeps redialling a server that died for up to about a
		// second after the last client use; that goroutine ends by itself.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// goRedisLog collects go-redis's own log lines (reconnects, command
// info it could not read) from every test of the package.
var goRedisLog = &redisLogger{}

type redisLogger struct{ logBuffer }

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(&l.Buffer, format+"\n", v...)
}

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// syncdBinary builds cmd/syncd once per test binary and returns its path.
func syncdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "syncd-topology")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "syncd")
		out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/syncd").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build syncd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// result is one run of the syncd binary.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// runSyncd runs the syncd binary with extra environment variables and
// waits for it, for at most a minute.
func runSyncd(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, syncdBinary(t), args...)
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

// writeFile writes body to a new file in a temporary directory.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// logBuffer collects log output; safe for concurrent writers.
type logBuffer struct{ testutil.Buffer }

// lines returns the lines that contain s.
func (b *logBuffer) lines(s string) []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// logger logs JSON into b at level and up.
func (b *logBuffer) logger(level zerolog.Level) zerolog.Logger {
	return zerolog.New(b).Level(level).With().Timestamp().Logger()
}

// waitFor polls cond every 20ms until it holds, failing the test after
// within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, within, 20*time.Millisecond, what, cond)
}
