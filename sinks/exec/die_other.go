//go:build unix && !linux

package exec

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// dieBySignal ends the process by sig where Go's runtime lets it, so that
// its parent sees "signal: ...", and otherwise exits with status 128+sig.
// It never returns.
func dieBySignal(sig syscall.Signal) {
	signal.Reset(sig)
	_ = syscall.Kill(os.Getpid(), sig)
	time.Sleep(100 * time.Millisecond)
	os.Exit(128 + int(sig))
}

// exitNow ends the process with code.
func exitNow(code int) { os.Exit(code) }

// commandAttr is how the supervisor starts the command: in a process group
// of its own. There is no parent-death signal here: a supervisor killed
// between starting the command and telling the sink its group leaves the
// command running (see supervise).
func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
