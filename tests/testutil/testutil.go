// Package testutil holds the small helpers that syncd's test packages
// share: a buffer that several goroutines (or a child process's output)
// write to while the test reads it, and a bounded wait for a condition.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

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
