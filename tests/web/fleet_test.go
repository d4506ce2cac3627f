package web

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// syncdBin builds the syncd binary, once, for the tests that run it.
var syncdBin testutil.Syncd

// TestMain checks for leaked goroutines with no goleak options for
// chromedp: none are needed. The browser's cleanup cancels the chromedp
// context and then the ExecAllocator's context, whose cancel func waits
// until chromium has exited and chromedp's goroutines (the DevTools pipe
// reader, the process waiter, the event queues) have ended; the
// dialog-accepting goroutine ends with the context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		syncdBin.Remove()
		os.Exit(code)
	}))
}

const (
	// nItems is the size of the item set the page shows.
	nItems = 1000
	// apiToken is the bearer token of the daemons' API (at least 16 bytes).
	apiToken = "web-test-token-0123456789"
)

// poisoned are the items whose sync fails while their file exists in the
// fleet's poison directory: they end up quarantined.
var poisoned = []string{"item-0007", "item-0123", "item-0456"}

// fleet is a real redis-server, three `syncd run` daemons syncing
// nItems items through the exec sink, each serving the page and the API
// on an http.listen of its own.
type fleet struct {
	cfgs   []string // each daemon's config file
	urls   []string // each daemon's http://host:port/
	poison string   // the directory of poison files
	redis  string   // the Redis address
	srv    *redistest.Server
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	srv := redistest.Start(t, nil)
	dir := testutil.PrivateDir(t) // holds the token file
	f := &fleet{poison: filepath.Join(dir, "poison"), redis: srv.Addr(), srv: srv}
	os.Mkdir(f.poison, 0o755)
	for _, id := range poisoned {
		os.WriteFile(filepath.Join(f.poison, id), nil, 0o644)
	}
	var ids strings.Builder
	for i := range nItems {
		fmt.Fprintf(&ids, "item-%04d\n", i)
	}
	items := filepath.Join(dir, "items.txt")
	token := filepath.Join(dir, "token")
	os.WriteFile(items, []byte(ids.String()), 0o644)
	os.WriteFile(token, []byte(apiToken+"\n"), 0o600)
	// A sync takes a few milliseconds; one of a poisoned item fails with
	// a line on stderr, which becomes its error.
	script := fmt.Sprintf(`sleep 0.01; if [ -e %q/"$SYNCD_ID" ]; then echo "upstream refused $SYNCD_ID: 422 invalid record" >&2; exit 1; fi`, f.poison)
	for i := range 3 {
		addr := freeAddr(t)
		f.urls = append(f.urls, "http://"+addr+"/")
		f.cfgs = append(f.cfgs, testutil.WriteFile(t, fmt.Sprintf("daemon-%d.yaml", i), fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: web
  shards: 4
ownership:
  ttl: 3s
engine:
  workers: 4
  interval: 1h
  max_attempts: 3
  backoff_min: 100ms
  backoff_max: 200ms
target:
  breaker:
    disabled: true
items:
  file: %s
sink:
  type: exec
  exec:
    command: ["sh", "-c", %q]
http:
  listen: %s
  api_token_file: %s
log:
  format: json
`, srv.Addr(), items, script, addr, token)))
	}
	for _, cfg := range f.cfgs {
		syncdBin.Daemon(t, cfg)
	}
	return f
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncd runs the syncd binary to completion.
func (f *fleet) syncd(t *testing.T, args ...string) testutil.Result {
	t.Helper()
	return testutil.Run(t, nil, syncdBin.Path(t), args...)
}

// settle waits until every item synced once and the poisoned ones are
// quarantined: nothing due, in flight or backing off.
func (f *fleet) settle(t *testing.T) statusSummary {
	t.Helper()
	var st statusSummary
	testutil.WaitFor(t, 60*time.Second, 200*time.Millisecond, "the fleet to sync every item and quarantine the poisoned", func() bool {
		st = f.status(t)
		return st.Items == nItems && st.Quarantined == len(poisoned) && st.Due == 0 && st.InFlight == 0 && st.BackingOff == 0
	})
	return st
}

// ui starts `syncd ui -c cfg --listen 127.0.0.1:0` and returns the URL it
// says to open.
func (f *fleet) ui(t *testing.T, cfg string) string {
	t.Helper()
	cmd := exec.Command(syncdBin.Path(t), "ui", "-c", cfg, "--listen", "127.0.0.1:0")
	out, log := &testutil.Buffer{}, &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = out, log
	p := testutil.Start(t, cmd)
	var url string
	testutil.WaitFor(t, 15*time.Second, 50*time.Millisecond, "syncd ui to say where it serves", func() bool {
		if p.Exited() {
			t.Fatalf("syncd ui exited: %v\n%s%s", p.Err(), out, log)
		}
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "open "); ok {
				url, _, _ = strings.Cut(u, " ")
				return true
			}
		}
		return false
	})
	return url
}
