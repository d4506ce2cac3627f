package testutil

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// RunTimeout bounds how long Run lets a command run before it kills it.
const RunTimeout = time.Minute

// Result is one finished run of a command.
type Result struct {
	Code           int // exit code; -1 if a signal ended it
	Stdout, Stderr string
}

// String returns the exit code and both outputs, for failure messages.
func (r Result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.Code, r.Stdout, r.Stderr)
}

// Run runs bin with args and the test binary's environment plus env,
// waits for it for at most RunTimeout, and returns its exit code and
// output. It fails t only if the command cannot run at all; a non-zero
// exit is the test's to judge.
func Run(t testing.TB, env []string, bin string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return Result{code, out.String(), errb.String()}
}
