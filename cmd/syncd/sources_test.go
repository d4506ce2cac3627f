package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// items.command gets the exec sink's environment allow-list, not syncd's
// secrets, and a failure quotes the end of its stderr.
func TestItemsCommand(t *testing.T) {
	t.Setenv("REDIS_PW", "hunter2-secret")
	ctx := context.Background()
	ids, err := runItemsCommand(ctx, []string{"sh", "-c", `echo "${REDIS_PW:-absent}"; echo "${PATH:+path}"`}, time.Minute)
	if err != nil || !slices.Equal(ids, []string{"absent", "path"}) {
		t.Errorf("ids = %q, %v; want the password absent and PATH kept", ids, err)
	}
	// Its stderr is logged and shown: credentials in it are not (an
	// operator's trial saw password=... and a URL's password quoted).
	_, err = runItemsCommand(ctx, []string{"sh", "-c", `echo "the customer API is down: password=pw123 https://u:pw456@api/x" >&2; exit 3`}, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "the customer API is down: password=xxxxx https://api/x") ||
		strings.Contains(err.Error(), "pw123") || strings.Contains(err.Error(), "pw456") {
		t.Errorf("a failing command: %v", err)
	}
	_, err = runItemsCommand(ctx, []string{"sleep", "5"}, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "timed out after 100ms") {
		t.Errorf("a command past its timeout: %v", err)
	}
}

// items reconcile with a failing source adds what the others gave,
// removes nothing, and says its count is of the sources that answered
// (an outside trial read "60 items in the sources" above the failure).
func TestReconcileSourceFailed(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: rsf\n  shards: 4\nownership:\n  ttl: 1s\n"+
		"items:\n  ids: [a, b]\n  command: [sh, -c, 'echo c; echo the inventory API is down >&2; exit 3']\nlog:\n  format: json\n", srv.Addr()))
	if code, _, errb := syncd("items", "add", "-c", cfg, "x"); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	var code int
	var out, errb string
	testutil.WaitFor(t, 10*time.Second, 200*time.Millisecond, "the reconcile lock", func() bool {
		code, out, errb = syncd("items", "reconcile", "-c", cfg)
		return !strings.Contains(errb, "try again")
	})
	if code != exitFailed || strings.Count(errb, "a source failed") != 1 || !strings.Contains(errb, "removed nothing: a source failed: items.command: exit status 3") ||
		!strings.HasPrefix(out, "2 items in the sources that answered, 1 were in the set: 2 added, 0 removed") {
		t.Errorf("items reconcile with a failing items.command: exit %d\nstdout %q\nstderr %q", code, out, errb)
	}
}
