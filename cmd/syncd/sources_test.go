package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
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
