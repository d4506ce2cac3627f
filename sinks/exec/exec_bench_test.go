//go:build unix

package exec_test

import (
	"syscall"
	"testing"
	"time"

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
	before := childCPU(b)
	for b.Loop() {
		if err := s.Sync(b.Context(), item); err != nil {
			b.Fatal(err)
		}
	}
	// The CPU time of the processes the syncs started, which on a busy
	// machine says more than the wall time.
	b.ReportMetric(float64((childCPU(b)-before).Microseconds())/float64(b.N), "child-cpu-µs/op")
}

// childCPU returns the user and system time of the reaped children of the
// test process and, through them, of their reaped descendants.
func childCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
