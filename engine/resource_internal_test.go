package engine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestIsResourceErr(t *testing.T) {
	forkExec := func(errno syscall.Errno) error {
		return fmt.Errorf("exec: item %q: start: %w", "a", &os.PathError{Op: "fork/exec", Path: "/proc/self/exe", Err: errno})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"EMFILE", &os.PathError{Op: "open", Path: "/tmp/x", Err: syscall.EMFILE}, true},
		{"ENFILE", &os.PathError{Op: "open", Path: "/tmp/x", Err: syscall.ENFILE}, true},
		{"ENOMEM", forkExec(syscall.ENOMEM), true},
		{"fork/exec EBADF", forkExec(syscall.EBADF), true},
		{"fork/exec ENOENT", forkExec(syscall.ENOENT), false},
		{"fork/exec E2BIG", forkExec(syscall.E2BIG), false},
		{"EBADF elsewhere", &os.PathError{Op: "read", Path: "/tmp/x", Err: syscall.EBADF}, false},
		{"plain", errors.New("exit status 1"), false},
	} {
		if got := isResourceErr(tc.err); got != tc.want {
			t.Errorf("%s: isResourceErr(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// With the descriptor limit reached, starting a process whose stdio sits
// on the highest descriptor allowed fails with EBADF, not EMFILE: the
// child must move a descriptor above the highest it is given, and that
// slot is past RLIMIT_NOFILE (an outside trial: 16 exec workers under
// ulimit -n 40; one start in ~600 failed this way and was counted
// against its item). The limit is set in a child test process, so as not
// to starve the other tests.
func TestForkExecOutOfDescriptorsIsResource(t *testing.T) {
	if os.Getenv("SYNCD_TEST_FD_HELPER") == "1" {
		forkExecAtLimit()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestForkExecOutOfDescriptorsIsResource$")
	cmd.Env = append(os.Environ(), "SYNCD_TEST_FD_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

func forkExecAtLimit() {
	const limit = 64
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		fmt.Println("setrlimit:", err)
		os.Exit(2)
	}
	var files []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		files = append(files, f)
	}
	top := files[len(files)-1]
	// Room for the fork's own pipe and pidfd, none above top.
	for _, f := range files[:3] {
		f.Close()
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = top, top, top
	err := cmd.Run()
	if !isResourceErr(err) {
		fmt.Printf("start with stdio on fd %d of %d: %v: not a resource error\n", top.Fd(), limit, err)
		os.Exit(1)
	}
}
