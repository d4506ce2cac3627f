//go:build unix

package exec

// The supervisor: why each command runs under a process of its own, and
// how the sink talks to it.
//
// When syncd is killed with SIGKILL it runs no code, so it cannot stop the
// commands it started, and they go on writing after the next owner of
// their item started. The kernel offers nothing that covers a process
// group: Pdeathsig signals only the direct child, and fires when the
// thread that forked it exits rather than the process (golang/go#27505).
// What survives syncd and notices its death is a pipe: the kernel closes
// every descriptor of a dead process, so a reader sees end-of-file when
// the last writer is gone, however it died.
//
// So the sink starts the command through a supervisor: syncd's own binary
// (/proc/self/exe), started again with argv[0] supervisorArg0 and the
// marker variable supervisorEnv, which the init function below recognises
// before main runs, in the spirit of moby's pkg/reexec. The supervisor is
// in a process group of its own, so that signals for syncd's group do not
// reach it; it starts the command in another group, and obeys its stdin:
//
//	syncd (Sink.Sync)             supervisor                 command's group
//	ctl, write end ──pipe──────►  stdin   'T': SIGTERM ─────► the group
//	                                      'K': SIGKILL ─────► the group
//	                                      'L' + deadline: the lease's end;
//	                                      when it passes: SIGTERM, the
//	                                      grace, SIGKILL
//	                                      EOF (syncd died, or closed it):
//	                                      SIGTERM, the grace, SIGKILL
//	hello, read end ◄──pipe─────  stdout  "pid N" or "error ERRNO TEXT";
//	                                      then "expired" when the lease's
//	                                      end passed and it stopped the
//	                                      command for that
//	stderr tail ◄──────pipe─────  stderr (shared with the command)
//	Wait ◄──────────────────────  exits as the command did, once the
//	                              command is reaped and what it left in
//	                              its group is killed
//
// The lease's end ('L', then the deadline as 8 big-endian bytes of
// CLOCK_MONOTONIC nanoseconds, which every process of the host reads
// alike) is sent when the command starts and again after each heartbeat
// moved it. It covers a syncd that lives but runs no code: paused by
// SIGSTOP, a stalled VM or swapping, it neither cancels the sync nor
// closes the pipe, and the command went on writing after the next owner
// started (an operator's trial: 4.2 s of overlap after a 12 s SIGSTOP).
// The supervisor stops the command at the lease's end by itself, as syncd
// would have.
//
// Only syncd holds the write end of ctl (os.Pipe makes it close-on-exec,
// so no other child keeps it), which is what makes its end-of-file mean
// "syncd is gone". A SIGTERM sent to the supervisor itself is taken the
// same way. The supervisor costs one more fork and exec of a Go program per
// sync (see BenchmarkSyncNoop) and a few MiB of memory while the command
// runs.
//
// The sink learns the command's group from the hello, which can only
// come after the command started. A supervisor killed in between (the
// OOM killer, say) would leave the command unknown to the sink and
// running; on Linux the command gets SIGKILL when the supervisor dies
// (Pdeathsig, set from the supervisor's main thread, which outlives the
// command), which leaves only what the command started in those
// microseconds.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// supervisorArg0 is the supervisor's argv[0], which ps shows:
	// "syncd-exec-supervisor GRACE PATH ARGV...".
	supervisorArg0 = "syncd-exec-supervisor"
	// supervisorEnv marks a supervisor's environment, with the value "1".
	// The supervisor removes it before it starts the command; a user
	// cannot set it, as Config.Env rejects SYNCD_* names.
	supervisorEnv = "SYNCD_EXEC_SUPERVISOR"
)

// Control bytes on the supervisor's stdin.
const (
	ctlTerm  = 'T' // send SIGTERM to the command's group
	ctlKill  = 'K' // send SIGKILL to the command's group
	ctlLease = 'L' // then 8 bytes: the lease's end (monoNow's clock)
)

// monoNow reads CLOCK_MONOTONIC, which syncd and its supervisors share
// (Go's own monotonic readings are private to each process), in ns.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // not on a unix that builds this
	}
	return ts.Nano()
}

// leaseMsg is the control message that says the lease ends at deadline
// (time.Time, with this process's monotonic reading) on monoNow's clock.
func leaseMsg(deadline time.Time) []byte {
	b := make([]byte, 9)
	b[0] = ctlLease
	binary.BigEndian.PutUint64(b[1:], uint64(monoNow()+int64(time.Until(deadline))))
	return b
}

// watchdog stops the command when the lease's end passes: it closes
// expired, once, unless a later deadline came first.
type watchdog struct {
	mu      sync.Mutex
	t       *time.Timer
	fired   bool
	expired chan struct{}
}

// set moves the deadline (monoNow's clock); after it fired, nothing can
// bring the lease back.
func (w *watchdog) set(deadline int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return
	}
	d := time.Duration(deadline - monoNow())
	if w.t == nil {
		w.t = time.AfterFunc(d, w.fire)
	} else {
		w.t.Reset(d)
	}
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.fired {
		w.fired = true
		close(w.expired)
	}
}

// When syncd's binary runs as a supervisor, it does nothing else: both
// argv[0] and the marker must match, so no ordinary start of a program
// that imports this package can be taken for one.
func init() {
	if len(os.Args) > 0 && os.Args[0] == supervisorArg0 && os.Getenv(supervisorEnv) == "1" {
		supervise(os.Args[1:])
	}
}

// supervisorArgs returns the supervisor's argv for a command.
func supervisorArgs(grace time.Duration, path string, argv []string) []string {
	return append([]string{supervisorArg0, grace.String(), path}, argv...)
}

// selfExe is the program that runs the supervisor: this one. On Linux
// /proc/self/exe names it even after its file was replaced or removed,
// as happens during an upgrade.
func selfExe() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// supervise runs as the supervisor, with args GRACE PATH ARGV..., and exits
// as the command did. It never returns.
func supervise(args []string) {
	if len(args) < 3 {
		fmt.Fprintf(os.Stderr, "%s: want GRACE PATH ARGV..., got %q\n", supervisorArg0, args)
		os.Exit(2)
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: grace: %v\n", supervisorArg0, err)
		os.Exit(2)
	}
	os.Unsetenv(supervisorEnv)
	// Catch SIGTERM, and SIGINT and SIGHUP unless syncd ignores them: an
	// ignored disposition is inherited through exec, and the command
	// should inherit syncd's as it always did.
	sigs := make(chan os.Signal, 1)
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
	// Without this, writing the hello to a syncd that just died would
	// kill the supervisor with SIGPIPE, leaving the command unwatched.
	if !signal.Ignored(syscall.SIGPIPE) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}

	// The command dies with the supervisor where the kernel can say so
	// (commandAttr): the sink learns the command's group only from the
	// hello below, written after the command started, so a supervisor
	// killed in between would otherwise leave it running with no one to
	// stop it. The signal comes when the thread that forked the command
	// exits (golang/go#27505): this one, locked for good, the process's
	// main thread (init runs on it).
	runtime.LockOSThread()
	cmd := &osexec.Cmd{
		Path:        args[1],
		Args:        args[2:],
		Stderr:      os.Stderr, // stdin and stdout are /dev/null
		SysProcAttr: commandAttr(),
	}
	if err := cmd.Start(); err != nil {
		var errno syscall.Errno
		errors.As(err, &errno)
		fmt.Printf("error %d %s\n", errno, strings.ReplaceAll(err.Error(), "\n", " "))
		exitNow(127)
	}
	g := &group{pgid: cmd.Process.Pid} // Setpgid with Pgid 0: the group is named after the leader
	fmt.Printf("pid %d\n", g.pgid)

	gone := make(chan struct{})
	w := &watchdog{expired: make(chan struct{})}
	go func() {
		obey(os.Stdin, g, w)
		close(gone)
	}()
	go func() {
		select {
		case <-gone:
		case <-sigs:
		case <-w.expired:
			// Said before the signal, so that the sink, reading to the
			// end of this pipe, knows the command was stopped for the
			// lease whatever it exits with (a command that traps
			// SIGTERM exits as it likes).
			fmt.Println(expiredLine)
		}
		g.signal(syscall.SIGTERM)
		time.Sleep(grace)
		g.signal(syscall.SIGKILL)
	}()

	cmd.Wait()
	g.reaped()
	exitLike(cmd.ProcessState.Sys().(syscall.WaitStatus))
}

// obey carries out the control messages read from ctl until it ends.
func obey(ctl io.Reader, g *group, w *watchdog) {
	r := bufio.NewReaderSize(ctl, 64)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return
		}
		switch b {
		case ctlTerm:
			g.signal(syscall.SIGTERM)
		case ctlKill:
			g.signal(syscall.SIGKILL)
		case ctlLease:
			var d [8]byte
			if _, err := io.ReadFull(r, d[:]); err != nil {
				return
			}
			w.set(int64(binary.BigEndian.Uint64(d[:])))
		}
	}
}

// group is the command's process group, seen from the supervisor.
type group struct {
	mu   sync.Mutex
	pgid int
	done bool // the leader was reaped and the group killed
}

// signal sends sig to the group unless the leader was reaped. Until then
// the group's ID cannot be reused, so the signal cannot hit a stranger.
func (g *group) signal(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		_ = syscall.Kill(-g.pgid, sig) // ESRCH: nothing left to signal
	}
}

// reaped kills what the leader left in its group, background children or
// those that ignored SIGTERM, and stops all further signals. The leader
// was just reaped: while any member lives the kernel does not reuse the
// group's ID, and when none does, the kill fails with ESRCH.
func (g *group) reaped() {
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
	g.done = true
}

// exitLike exits the way ws says the command did, so that syncd sees the
// command's exit status or signal as the supervisor's.
func exitLike(ws syscall.WaitStatus) {
	if ws.Signaled() {
		dieBySignal(ws.Signal())
	}
	exitNow(ws.ExitStatus())
}

// expiredLine is what the supervisor says, after its hello, when it
// stops the command because the lease's end passed.
const expiredLine = "expired"

// hello is what the supervisor said: first the command's pid, or why it
// could not start it; then, maybe, that it stopped the command at the
// lease's end.
type hello struct {
	ok      bool  // false when the supervisor ended without saying either
	pid     int   // the command's, which names its process group
	err     error // a *StartError
	expired bool  // it stopped the command because the lease's end passed
}

// readHello reads the supervisor's first line from r.
func readHello(r *bufio.Reader) hello {
	line, err := r.ReadString('\n')
	if err != nil {
		return hello{}
	}
	kind, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch kind {
	case "pid":
		pid, err := strconv.Atoi(rest)
		return hello{ok: err == nil && pid > 0, pid: pid}
	case "error":
		code, text, _ := strings.Cut(rest, " ")
		n, err := strconv.Atoi(code)
		return hello{ok: err == nil, err: &StartError{Text: text, Errno: syscall.Errno(n)}}
	}
	return hello{}
}

// saidExpired reads what the supervisor says after its hello, to the end
// (it exits once the command is reaped), and reports whether it said
// that it stopped the command at the lease's end.
func saidExpired(r *bufio.Reader) bool {
	expired := false
	for {
		line, err := r.ReadString('\n')
		expired = expired || strings.TrimSuffix(line, "\n") == expiredLine
		if err != nil {
			return expired
		}
	}
}

// StartError reports that the supervisor could not start the command, for
// instance because its file was removed after New found it.
type StartError struct {
	Text  string        // "fork/exec /usr/local/bin/hook: no such file or directory"
	Errno syscall.Errno // 0 when the error was not a system call's
}

func (e *StartError) Error() string { return e.Text }

// Unwrap returns the Errno, so that errors.Is(err, fs.ErrNotExist) and
// the like work, or nil.
func (e *StartError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}
