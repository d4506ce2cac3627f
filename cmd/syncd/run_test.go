package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// run and batch refuse a file sink they could not open before they
// write anything to Redis, as validate refuses it: a sink.file.path
// naming a directory was refused with "open ...: is a directory" only
// after the deployment was created and the items seeded (an outside
// trial).
func TestRunRefusesSinkBeforeRedis(t *testing.T) {
	srv := redistest.Start(t, nil)
	rdb := srv.Client(t)
	dir := t.TempDir()
	cfg := filepath.Join(testutil.PrivateDir(t), "dirsink.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "redis:\n  addrs: [%q]\nsink:\n  type: file\n  file:\n    path: %s\nitems:\n  ids: [a, b]\nlog:\n  format: json\n",
		srv.Addr(), dir), 0o600)
	want := cfg + ":6: sink.file.path: " + strconv.Quote(dir) + " is a directory: give the path of a file to append to\n"
	for _, cmd := range []string{"validate", "run", "batch"} {
		code, _, errb := syncd(cmd, "-c", cfg)
		if code != exitUsage || !strings.HasSuffix(errb, want) {
			t.Errorf("%s: exit %d, stderr %q; want %d, ending %q", cmd, code, errb, exitUsage, want)
		}
		if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) > 0 {
			t.Fatalf("%s wrote to redis before it refused the sink: %q", cmd, keys)
		}
	}
}

// A sink that passes the checks but cannot be built (a link to a
// directory that is not there: the file cannot be created) stops run
// before it seeds the items: it seeded them first.
func TestRunBuildsSinkBeforeSeeding(t *testing.T) {
	srv := redistest.Start(t, nil)
	rdb := srv.Client(t)
	link := filepath.Join(t.TempDir(), "sync.jsonl")
	if err := os.Symlink("/nonexistent/dir/sync.jsonl", link); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(testutil.PrivateDir(t), "linksink.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "redis:\n  addrs: [%q]\n  key_prefix: ls\nsink:\n  type: file\n  file:\n    path: %s\nitems:\n  ids: [a, b]\nlog:\n  format: json\n",
		srv.Addr(), link), 0o600)
	for _, cmd := range []string{"run", "batch"} {
		code, _, errb := syncd(cmd, "-c", cfg)
		if code != exitUsage || !strings.Contains(errb, "sink.file.path") {
			t.Errorf("%s: exit %d, stderr %q; want %d, naming sink.file.path", cmd, code, errb, exitUsage)
		}
		if keys := rdb.Keys(t.Context(), "ls:*due*").Val(); len(keys) > 0 {
			t.Errorf("%s seeded the items before it built the sink: %q", cmd, keys)
		}
	}
}
