// Package testutil holds the helpers that syncd's test packages share:
//
//   - Syncd builds the syncd binary once per test binary; Run runs a
//     command to completion and returns its exit code and output.
//   - Process is a child process that dies with the test binary, is
//     killed in the test's cleanup, and can be paused and resumed;
//     ProcState and Alive read a process's state.
//   - Buffer collects output that several goroutines (or a child
//     process) write while the test reads it; WaitFor waits, bounded, for
//     a condition; WriteFile and Tail handle config files and log tails.
//   - IgnoreRedial is the goleak option for go-redis's redial goroutine.
//
// It needs Linux: processes die with the test binary through Pdeathsig,
// and their state comes from /proc.
package testutil

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// IgnoreRedial is the goleak option for go-redis's dial-retry goroutine.
// go-redis keeps redialling a server that died for up to about a second
// after the last use of the client; that goroutine ends by itself. Test
// binaries that kill servers on purpose pass it to their leak check.
var IgnoreRedial = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// Buffer is a bytes.Buffer safe for concurrent writers and readers:
// zerolog loggers, a child process's stdout or stderr.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes returns a copy of everything written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// WaitFor checks cond every poll until it holds, and fails the test if it
// does not within the given time.
func WaitFor(t testing.TB, within, poll time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(poll)
	}
}

// PrivateDir returns a new directory from t.TempDir that only its owner
// may write. t.TempDir's are 0777 less the umask: 0775 under umask 002,
// where syncd refuses a secret file (its group could replace it).
func PrivateDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteFile writes body to a new file called name in a directory from
// PrivateDir, readable by the owner only, and returns its path. It fails
// the test if it cannot.
func WriteFile(t testing.TB, name, body string) string {
	t.Helper()
	p := filepath.Join(PrivateDir(t), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Tail returns the last n lines of s, without its final newline: the
// end of a log for a failure message.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
