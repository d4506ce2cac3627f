package testutil

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProcessPauseResumeKill(t *testing.T) {
	t.Parallel()
	p := Start(t, exec.Command("sleep", "60"))
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if st, err := ProcState(p.Pid()); err != nil || st != 'T' {
		t.Errorf("ProcState after Pause = %q, %v; want 'T'", st, err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if st, err := ProcState(p.Pid()); err != nil || st == 'T' {
		t.Errorf("ProcState after Resume = %q, %v; want not 'T'", st, err)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil { // of a stopped process
		t.Fatal(err)
	}
	if !p.Exited() || p.State() == nil {
		t.Fatalf("after Kill: Exited %v, State %v", p.Exited(), p.State())
	}
	if _, ok := p.Err().(*exec.ExitError); !ok {
		t.Errorf("Err after Kill = %v, want an *exec.ExitError", p.Err())
	}
	if err := p.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := p.Pause(); err == nil {
		t.Error("Pause of an exited process: no error")
	}
}

func TestProcessWait(t *testing.T) {
	t.Parallel()
	p := Start(t, exec.Command("sleep", "60"))
	if err := p.Wait(10 * time.Millisecond); !errors.Is(err, ErrRunning) {
		t.Errorf("Wait of a sleeping process = %v, want ErrRunning", err)
	}
	q := Start(t, exec.Command("sh", "-c", "exit 3"))
	if ee, ok := q.Wait(10 * time.Second).(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("Wait of exit 3 = %v", q.Err())
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	got := Run(t, []string{"TESTUTIL_X=1"}, "sh", "-c", `echo "$TESTUTIL_X"; echo e >&2; exit 4`)
	if diff := cmp.Diff(got, Result{Code: 4, Stdout: "1\n", Stderr: "e\n"}); diff != "" {
		t.Errorf("Run (-got +want):\n%s", diff)
	}
}

func TestAlive(t *testing.T) {
	t.Parallel()
	if !Alive(os.Getpid()) || !Alive(1) {
		t.Error("Alive = false for this process or init")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if Alive(cmd.Process.Pid) || Alive(0) || Alive(-1) {
		t.Error("Alive = true for a reaped process, 0 or -1")
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\n", 5, "a"},
		{"", 3, ""},
	} {
		if got := Tail(tc.in, tc.n); got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
