package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// The acceptance of triggers: through the API of a running daemon, an
// item due an hour later (interval 1h, already synced) syncs within one
// poll interval; a wrong or missing token gets 401 and nothing is logged
// about it, and the token never reaches the log.
func TestTriggerThroughAPI(t *testing.T) {
	t.Parallel()
	const (
		token = "e2e-trigger-t0ken-never-logged"
		wrong = "e2e-wrong-t0ken-never-logged"
		poll  = 250 * time.Millisecond
	)
	srv := redistest.Start(t, nil)
	syncs := filepath.Join(t.TempDir(), "syncs.jsonl")
	cfg := writeConfig(t, redisConfig(srv, "trig", fmt.Sprintf(`engine:
  interval: 1h
  poll: %s
items:
  ids: [a, b]
sink:
  type: file
  file:
    path: %s
http:
  listen: 127.0.0.1:0
  api_token_env: SYNCD_E2E_TOKEN
`, poll, syncs)))
	cmd := exec.Command(syncd.Path(t), "run", "-c", cfg)
	cmd.Env = append(os.Environ(), "SYNCD_E2E_TOKEN="+token)
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	daemon := testutil.Start(t, cmd)
	waitFor(t, 15*time.Second, "a and b synced once", func() bool { return len(lines(syncs)) >= 2 })
	addr := logField(t, stderr.String(), "serving /metrics", "addr")
	url := "http://" + addr + "/api/v1/items/a/sync"

	post := func(auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	before := stderr.String()
	for _, auth := range []string{"", "Bearer " + wrong, "Basic " + token} {
		if code, body := post(auth, `{"reason": "refused"}`); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d %s, want 401", auth, code, body)
		}
	}
	time.Sleep(100 * time.Millisecond) // time for a log line, were one written
	if after := stderr.String(); after != before {
		t.Errorf("refused requests were logged:\n%s", after[len(before):])
	}
	if n := len(lines(syncs)); n != 2 {
		t.Fatalf("%d syncs before the trigger, want 2", n)
	}

	start := time.Now()
	if code, body := post("Bearer "+token, `{"reason": "e2e acceptance"}`); code != http.StatusOK || !strings.Contains(body, `"triggered":1`) {
		t.Fatalf("trigger: %d %s", code, body)
	}
	testutil.WaitFor(t, 5*time.Second, 5*time.Millisecond, "the triggered sync", func() bool { return len(lines(syncs)) >= 3 })
	took := time.Since(start)
	var third struct{ ID string }
	json.Unmarshal([]byte(lines(syncs)[2]), &third)
	if third.ID != "a" {
		t.Errorf("third sync was of %q, want a", third.ID)
	}
	// One poll interval, plus slack for the claim, the sink's write and
	// a loaded 2-core machine.
	if limit := poll + 500*time.Millisecond; took > limit {
		t.Errorf("the triggered item synced %v after the trigger, want within %v", took, limit)
	}
	t.Logf("triggered item synced %v after the API call (poll %v)", took, poll)

	// The daemon logs the trigger before it answers, but its stderr
	// reaches this buffer through a pipe and a copying goroutine, which
	// can lag the sink's file on a loaded machine (seen once in a full
	// run).
	testutil.WaitFor(t, 2*time.Second, 10*time.Millisecond, "the trigger's log line with its reason", func() bool {
		return strings.Contains(stderr.String(), `"reason":"e2e acceptance"`)
	})
	if logs := stderr.String(); strings.Contains(logs, token) || strings.Contains(logs, wrong) {
		t.Errorf("a token reached the log:\n%s", logs)
	}
	daemon.Signal(syscall.SIGTERM)
	if err := daemon.Wait(10 * time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
