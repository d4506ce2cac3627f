//go:build unix

package exec_test

import (
	"bytes"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanScript forks a grandchild that ignores SIGTERM and appends to
// $TEST_OUT/ticks every 50 ms, then writes "SUPERVISOR LEADER GRANDCHILD"
// to $TEST_OUT/pids and waits. With TEST_IGNORE=1 the leader ignores
// SIGTERM too.
const orphanScript = `[ "$TEST_IGNORE" = 1 ] && trap '' TERM
sh -c 'trap "" TERM; while :; do echo x >> "$TEST_OUT/ticks"; sleep 0.05; done' &
echo "$PPID $$ $!" > "$TEST_OUT/pids.tmp" && mv "$TEST_OUT/pids.tmp" "$TEST_OUT/pids"
while :; do wait; done`

// TestSyncdKilled: when the process running the exec sink is killed with
// SIGKILL, the command's whole process group is gone within the grace, even
// a grandchild that ignores SIGTERM, and nothing writes any more.
func TestSyncdKilled(t *testing.T) {
	runner := buildRunner(t)
	const (
		grace = time.Second
		slack = 1500 * time.Millisecond // a busy machine
	)
	for _, tt := range []struct {
		name   string
		ignore bool // the leader ignores SIGTERM too
	}{
		{"leader honours SIGTERM", false},
		{"all ignore SIGTERM", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := t.TempDir()
			cmd := osexec.Command(runner, grace.String(), "sh", "-c", orphanScript)
			cmd.Env = append(os.Environ(), "TEST_OUT="+out, "TEST_IGNORE="+map[bool]string{true: "1"}[tt.ignore])
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pids := awaitPids(t, filepath.Join(out, "pids"))
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				syscall.Kill(-pids[1], syscall.SIGKILL)
			})
			ticks := filepath.Join(out, "ticks")
			waitUntil(t, 5*time.Second, "the grandchild to write", func() bool { return fileSize(ticks) > 0 })

			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			cmd.Wait()
			t.Logf("runner output:\n%s", stderr.String())

			if tt.ignore {
				// SIGKILL comes only after the grace.
				time.Sleep(grace / 2)
				if !alive(pids[1]) || !alive(pids[2]) {
					t.Errorf("the command did not get its grace: leader alive %v, grandchild alive %v",
						alive(pids[1]), alive(pids[2]))
				}
			}
			deadline := killed.Add(grace + slack)
			for {
				live := append(groupAlive(pids[1]), livePids(pids...)...)
				if len(live) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v after SIGKILL of the runner, still alive: %v (supervisor, leader, grandchild: %v)",
						time.Since(killed), live, pids)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("all gone %v after SIGKILL of the runner", time.Since(killed))
			size := fileSize(ticks)
			time.Sleep(300 * time.Millisecond)
			if after := fileSize(ticks); after != size {
				t.Errorf("ticks grew from %d to %d bytes after the group was gone", size, after)
			}
		})
	}
}

// buildRunner builds testdata/runner into a temporary directory.
func buildRunner(t *testing.T) string {
	t.Helper()
	// go test runs with the go tool on PATH (make test and .ci/run put
	// it there).
	goTool, err := osexec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool on PATH to build testdata/runner: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "runner")
	build := osexec.Command(goTool, "build", "-o", bin, "./testdata/runner")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/runner: %v\n%s", err, out)
	}
	return bin
}

// awaitPids waits for the script to write its pids to path.
func awaitPids(t *testing.T, path string) []int {
	t.Helper()
	var pids []int
	waitUntil(t, 10*time.Second, "the command to start", func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		for f := range strings.FieldsSeq(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s: %q: %v", path, data, err)
			}
			pids = append(pids, pid)
		}
		if len(pids) != 3 {
			t.Fatalf("%s: %q, want 3 pids", path, data)
		}
		return true
	})
	return pids
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func livePids(pids ...int) []int {
	var live []int
	for _, pid := range pids {
		if alive(pid) {
			live = append(live, pid)
		}
	}
	return live
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
