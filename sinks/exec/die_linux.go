package exec

import (
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// dieBySignal ends the process by sig, as the kernel would end a program
// that has no handler for it, so that its parent sees "signal: ...". Go's
// own handlers do not: for SIGQUIT, SIGSEGV, SIGABRT and others they print
// a stack dump and exit with status 2, and SIGUSR1 they ignore. It never
// returns.
func dieBySignal(sig syscall.Signal) {
	// The command dumped its own core, if it was allowed to; the
	// supervisor's is of no use.
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	runtime.LockOSThread()
	// An all-zero struct sigaction is SIG_DFL with no flags and an empty
	// mask, whatever the architecture's field order. 32 bytes cover the
	// largest of them; 8 is the size of the kernel's sigset_t.
	var act [4]uint64
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	if errno == 0 || sig == syscall.SIGKILL {
		_ = syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), sig)
		time.Sleep(100 * time.Millisecond) // a pending signal is delivered on the way out of a system call
	}
	exitNow(128 + int(sig))
}

// exitNow ends the process with code at once. The supervisor has nothing
// to flush, and os.Exit in a binary built with -race first sleeps for a
// second (GORACE atexit_sleep_ms), which every sync would wait for.
func exitNow(code int) {
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, uintptr(code), 0, 0)
	os.Exit(code) // not reached
}

// commandAttr is how the supervisor starts the command: in a process group
// of its own, and killed (SIGKILL) when the supervisor dies. That covers
// the command itself in the moment before the sink knows its group (see
// supervise); its group, once known, the sink kills. A command may clear
// the signal (prctl), and a set-user-ID one loses it.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
