package topology

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/testutil"
)

func TestMain(m *testing.M) {
	redis.SetLogger(goRedisLog)
	goleak.VerifyTestMain(m, testutil.IgnoreRedial, goleak.Cleanup(func(code int) {
		syncdBuild.Remove()
		os.Exit(code)
	}))
}

// goRedisLog collects go-redis's own log lines (reconnects, command
// info it could not read) from every test of the package.
var goRedisLog = &redisLogger{}

type redisLogger struct{ logBuffer }

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(&l.Buffer, format+"\n", v...)
}

// syncdBuild builds cmd/syncd for the tests that run it, once.
var syncdBuild testutil.Syncd

// runSyncd runs the syncd binary with extra environment variables and
// waits for it, for at most a minute.
func runSyncd(t *testing.T, env []string, args ...string) testutil.Result {
	t.Helper()
	return testutil.Run(t, env, syncdBuild.Path(t), args...)
}

// startDaemon starts `syncd run -c cfg` with extra environment variables
// and its output in the returned buffer; it is killed in t's cleanup.
func startDaemon(t *testing.T, env []string, cfg string) (*testutil.Process, *logBuffer) {
	t.Helper()
	cmd := exec.Command(syncdBuild.Path(t), "run", "-c", cfg)
	cmd.Env = append(os.Environ(), env...)
	var out logBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return testutil.Start(t, cmd), &out
}

// logBuffer collects log output; safe for concurrent writers.
type logBuffer struct{ testutil.Buffer }

// lines returns the lines that contain s.
func (b *logBuffer) lines(s string) []string { return grepLines(b.String(), s) }

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
