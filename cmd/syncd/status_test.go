package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// status --watch on a Redis that holds no deployment yet waits for one,
// saying so, and shows it once it is there, where it ended at once with
// "no deployment" (exit 1), as status without --watch still does.
func TestStatusWatchWaitsForDeployment(t *testing.T) {
	srv := redistest.Start(t, nil)
	cfg := testutil.WriteFile(t, "config.yaml", fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: w\n  shards: 4\nlog:\n  format: json\n", srv.Addr()))
	if code, _, errb := syncd("status", "-c", cfg); code != exitFailed || !strings.Contains(errb, "no deployment") {
		t.Errorf("status on an empty redis: exit %d, stderr %q; want exit 1, no deployment", code, errb)
	}
	f := newFlags("status", io.Discard)
	if _, err := f.parse([]string{"-c", cfg}); err != nil {
		t.Fatal(err)
	}
	st, err := adminOpenRead(t.Context(), f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var out testutil.Buffer
	done := make(chan error, 1)
	go func() { done <- watchStatus(ctx, st, statusOpts{limit: 100}, 100*time.Millisecond, &out) }()
	waiting := fmt.Sprintf("waiting for a deployment in redis (%s) under key prefix \"w\"", srv.Addr())
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the waiting line", func() bool { return strings.Contains(out.String(), waiting) })
	if code, _, errb := syncd("items", "add", "watched-item", "-c", cfg); code != exitOK {
		t.Fatalf("items add: exit %d, %s", code, errb)
	}
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the item", func() bool { return strings.Contains(out.String(), "watched-item") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("watchStatus after Ctrl-C = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watchStatus did not end with its ctx")
	}
	screens := strings.Split(out.String(), "\x1b[H\x1b[2J")
	if last := screens[len(screens)-1]; strings.Contains(last, "waiting") || !strings.Contains(last, "1 item") {
		t.Errorf("the last screen:\n%s\nwant the deployment's status", last)
	}
}
