package exec

import (
	"bufio"
	"os"
	osexec "os/exec"
	"syscall"
	"testing"
	"time"
)

// TestCommandDiesWithItsSupervisor: a supervisor killed with SIGKILL
// takes its command with it, even where the sink cannot help (it learns
// the command's group from the supervisor's first line, written after the
// command started: killed in between, the supervisor left the command
// running). Here the supervisor runs alone, its hello read by the test,
// and nothing but the kernel kills the command.
func TestCommandDiesWithItsSupervisor(t *testing.T) {
	self, err := selfExe()
	if err != nil {
		t.Fatal(err)
	}
	sleep, err := osexec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep:", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer ctlW.Close() // held open: the supervisor never sees end-of-file
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	sup := &osexec.Cmd{Path: self, Args: supervisorArgs(time.Second, sleep, []string{"sleep", "30"}),
		Env: append(os.Environ(), supervisorEnv+"=1"), Stdin: ctlR, Stdout: outW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	ctlR.Close()
	outW.Close()
	h := readHello(bufio.NewReader(outR))
	if !h.ok || h.err != nil {
		sup.Process.Kill()
		sup.Wait()
		t.Fatalf("hello = %+v", h)
	}
	if err := syscall.Kill(sup.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sup.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for Alive(h.pid) {
		if time.Now().After(deadline) {
			syscall.Kill(-h.pid, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) still runs 5s after its supervisor was killed", h.pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
