//go:build unix

package exec_test

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
)

// BenchmarkSyncNoop measures what the sink adds to a command that does
// nothing: starting it, supervising it and waiting for it.
func BenchmarkSyncNoop(b *testing.B) {
	s, err := execsink.New(execsink.Config{Command: []string{"true"}}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	item := sinks.Item{ID: "a", Fence: 1, Owner: "w", Attempt: 1}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Sync(b.Context(), item); err != nil {
			b.Fatal(err)
		}
	}
}
