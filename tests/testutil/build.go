package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// syncdPackage is what Syncd builds. An import path rather than a
// relative directory, so that it builds from any package of the module.
const syncdPackage = "github.com/syncd/syncd/cmd/syncd"

// Syncd builds the syncd binary at most once per test binary, into a
// directory of its own, on the first call of Build or Path. Set Flags and
// Env before that; the zero value runs a plain go build. A package keeps
// one in a variable, builds from TestMain (Build) or lazily from the
// tests that need it (Path), and calls Remove after m.Run. Its methods
// are safe for concurrent use.
type Syncd struct {
	// Flags are extra go build flags, such as -race or -trimpath.
	Flags []string
	// Env holds extra environment variables for go build, such as
	// CGO_ENABLED=0, after the test binary's own.
	Env []string

	once sync.Once
	dir  string
	path string
	err  error
}

// Build builds the binary on its first call and returns its path, or
// the build error with go build's output; later calls return the same.
func (s *Syncd) Build() (string, error) {
	s.once.Do(func() {
		s.dir, s.err = os.MkdirTemp("", "syncd-test")
		if s.err != nil {
			return
		}
		s.path = filepath.Join(s.dir, "syncd")
		args := append([]string{"build", "-o", s.path}, s.Flags...)
		cmd := exec.Command("go", append(args, syncdPackage)...)
		cmd.Env = append(os.Environ(), s.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			s.err = fmt.Errorf("build syncd: %v\n%s", err, out)
		}
	})
	return s.path, s.err
}

// Path is Build for a test: it returns the binary's path, or fails t if
// the build failed.
func (s *Syncd) Path(t testing.TB) string {
	t.Helper()
	p, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Remove deletes the binary and its directory, if it was built. Call it
// from TestMain once m.Run has returned.
func (s *Syncd) Remove() {
	s.once.Do(func() {}) // nothing built so far: nothing may be built later
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// Daemon starts `syncd run -c cfg` with the binary s builds, killed in
// t's cleanup, with the test binary's environment plus env ("KEY=value").
// Its stderr (the log) is returned, and its tail is logged when t has
// failed.
func (s *Syncd) Daemon(t testing.TB, cfg string, env ...string) (*Process, *Buffer) {
	t.Helper()
	cmd := exec.Command(s.Path(t), "run", "-c", cfg)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	log := &Buffer{}
	cmd.Stderr = log
	p := Start(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s: log (tail):\n%s", p, Tail(log.String(), 4000))
		}
	})
	return p, log
}
