package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// KillTimeout bounds how long Kill waits for a killed process to be
	// reaped.
	KillTimeout = 10 * time.Second
	// SignalTimeout bounds how long Pause and Resume wait for the kernel
	// to report the new process state.
	SignalTimeout = 5 * time.Second
)

// ErrRunning is Wait's error when the process has not exited in time.
var ErrRunning = errors.New("testutil: process still running")

// Process is a child process started by Start or Spawn. It runs in a
// process group of its own, which keeps terminal signals away and lets
// Kill, Pause and Resume reach its children too, and it dies with the
// test binary even if cleanup never runs (Pdeathsig). A goroutine reaps
// it, so Done, Exited and Kill never race an exec.Cmd.Wait. Its methods
// are safe for concurrent use.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result, set before done is closed
}

// Spawn starts cmd as a Process. The caller kills it when done; Start
// does that in a test's cleanup. cmd must not have been started, and the
// caller must not call its Wait.
func Spawn(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Pdeathsig follows the thread that forked the child; the Go runtime
	// keeps its threads, so that is the test binary.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Start starts cmd as a Process, fails t if it cannot, and kills it in
// t's cleanup (a failed Kill fails the test).
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p, err := Spawn(cmd)
	if err != nil {
		t.Fatalf("start %s: %v", cmd, err)
	}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// Pid returns the process id, which also names its process group.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited and been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns exec.Cmd.Wait's result once Done is closed: nil, or an
// *exec.ExitError for an exit code other than 0 or a death by signal.
// Before that it returns nil.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// State returns how the process ended, or nil while it runs.
func (p *Process) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Wait waits up to within for the process to exit and returns Err, or
// ErrRunning if it still runs.
func (p *Process) Wait(within time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		return ErrRunning
	}
}

// Signal sends sig to the process alone, not to its group.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGCONT, so that nothing stays stopped, and then SIGKILL to
// the process's group, and waits up to KillTimeout until the process has
// been reaped. Killing a process that has exited does nothing.
func (p *Process) Kill() error {
	if p.Exited() {
		return nil
	}
	pid := p.Pid()
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(KillTimeout):
		return fmt.Errorf("%s still running %v after SIGKILL", p, KillTimeout)
	}
}

// Pause stops the process's group with SIGSTOP and waits up to
// SignalTimeout until the kernel reports the process stopped.
func (p *Process) Pause() error { return p.signalGroup(syscall.SIGSTOP, "SIGSTOP", true) }

// Resume continues the process's group with SIGCONT and waits up to
// SignalTimeout until the kernel reports the process no longer stopped.
func (p *Process) Resume() error { return p.signalGroup(syscall.SIGCONT, "SIGCONT", false) }

// signalGroup sends sig, called name, to the group and waits until the
// process is stopped (or not).
func (p *Process) signalGroup(sig syscall.Signal, name string, stopped bool) error {
	if p.Exited() {
		return fmt.Errorf("%s to %s: exited", name, p)
	}
	pid := p.Pid()
	if err := syscall.Kill(-pid, sig); err != nil {
		return fmt.Errorf("%s to %s: %w", name, p, err)
	}
	// Signals are delivered asynchronously; wait for the state to show so
	// that the test's next step really sees a stopped (or running)
	// process.
	deadline := time.Now().Add(SignalTimeout)
	for {
		state, err := ProcState(pid)
		if err != nil {
			return fmt.Errorf("%s to %s: %w", name, p, err)
		}
		if (state == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s to %s: state %q after %v", name, p, state, SignalTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// String names the process for messages: "redis-server (pid 1234)".
func (p *Process) String() string {
	return fmt.Sprintf("%s (pid %d)", filepath.Base(p.cmd.Path), p.Pid())
}

// ProcState returns the state letter of /proc/<pid>/stat: 'R' running,
// 'S' sleeping, 'T' stopped by a signal, 'Z' a zombie, and so on.
func ProcState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name in parentheses may contain spaces; the state
	// follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return b[i+2], nil
}

// Alive reports whether a process with that id exists, whoever owns it.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
