package redistest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
)

// tb is the part of testing.TB that starting servers needs. testing.TB
// satisfies it; detached is the same for a program that is not a test.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Error(args ...any)
	Cleanup(f func())
	TempDir() string
}

// LaunchCluster starts a cluster as StartCluster does, for a program that
// is not a test (the benchmark in bench/): it returns an error where
// StartCluster fails the test, and the nodes' data directories live under
// one temporary directory. stop kills every node, waits until each is
// reaped and removes the directories; call it once the cluster is no
// longer needed, also after a failed Kill. The nodes die with the program
// if stop never runs (Pdeathsig).
func LaunchCluster(masters, replicasPerMaster int) (c *Cluster, stop func() error, err error) {
	d, err := newDetached()
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(detachedFatal)
			if !ok {
				panic(r)
			}
			c, stop, err = nil, nil, errors.Join(f.err, d.close())
		}
	}()
	c = startCluster(d, masters, replicasPerMaster)
	return c, d.close, nil
}

// detached runs the starting code outside a test: Fatal unwinds to
// LaunchCluster with a panic of detachedFatal, Cleanup collects what
// close runs, and TempDir makes directories under one root.
type detached struct {
	root string

	mu       sync.Mutex
	cleanups []func()
	errs     []error
	closed   bool
}

// detachedFatal carries a Fatal's message up to LaunchCluster.
type detachedFatal struct{ err error }

func newDetached() (*detached, error) {
	root, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return &detached{root: root}, nil
}

func (d *detached) Helper() {}

func (d *detached) Fatal(args ...any) { panic(detachedFatal{errors.New(fmt.Sprint(args...))}) }

func (d *detached) Fatalf(format string, args ...any) {
	panic(detachedFatal{fmt.Errorf(format, args...)})
}

func (d *detached) Error(args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, errors.New(fmt.Sprint(args...)))
}

func (d *detached) Cleanup(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cleanups = append(d.cleanups, f)
}

func (d *detached) TempDir() string {
	dir, err := os.MkdirTemp(d.root, "node-")
	if err != nil {
		d.Fatalf("redistest: %v", err)
	}
	return dir
}

// close runs the cleanups, last registered first, as testing does, then
// removes the root. It returns what they reported through Error; a
// second call does nothing.
func (d *detached) close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	fs := slices.Clone(d.cleanups)
	d.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(append(d.errs, os.RemoveAll(d.root))...)
}
