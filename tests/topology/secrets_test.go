package topology

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// Secrets never show: not in syncd validate, not in any log line (at
// debug level, go-redis's own lines included), not in any error, whether
// the password is right or wrong, from an environment variable or a
// file, for Redis, for the Sentinels, in http sink headers and URLs and
// in exec sink environment variables.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	const (
		rightPW    = "right-Redis-pw-7Qz"
		wrongPW    = "wrong-Redis-pw-9Kx"
		filePW     = "file-Redis-pw-3Vb"
		sentinelPW = "sentinel-pw-5Hd"
		bearer     = "bearer-token-8Jm"
		urlPW      = "url-pw-2Fc"
		execSecret = "exec-secret-4Ln"
	)
	secrets := []string{rightPW, wrongPW, filePW, sentinelPW, bearer, urlPW, execSecret}
	srv := redistest.Start(t, &redistest.Options{Password: rightPW})
	pwFile := testutil.WriteFile(t, "pw", filePW+"\n")

	var seen []string // every output, for the final grep
	check := func(what string, r testutil.Result) {
		t.Helper()
		seen = append(seen, what+"\n"+r.Stdout+r.Stderr)
	}
	redisSection := func(pw string) string {
		return fmt.Sprintf("redis:\n  addrs: [%q]\n  %s\n  key_prefix: sec\n  shards: 2\n  dial_timeout: 500ms\n", srv.Addr(), pw)
	}
	logSection := "log:\n  level: debug\n  format: json\n"
	env := []string{"TOPO_PW=" + wrongPW, "TOPO_RIGHT=" + rightPW, "TOPO_SENTINEL=" + sentinelPW}

	// Wrong passwords, from the environment and from a file: every
	// command fails with a clear reason and no password.
	for _, pw := range []string{"password_env: TOPO_PW", "password_file: " + pwFile} {
		cfg := testutil.WriteFile(t, "config.yaml", redisSection(pw)+"items:\n  ids: [a]\n"+logSection)
		r := runSyncd(t, env, "validate", "-c", cfg)
		check("validate "+pw, r)
		if r.Code != 0 || !strings.Contains(r.Stdout, strings.SplitN(pw, ": ", 2)[1]) {
			t.Errorf("validate with %s:\n%s", pw, r)
		}
		for _, args := range [][]string{
			{"status"}, {"items", "list"}, {"items", "add", "b"}, {"items", "remove", "a"},
			{"requeue", "a"}, {"release", "--force", "a"}, {"batch"}, {"run"},
		} {
			r := runSyncd(t, env, append(args, "-c", cfg)...)
			check(strings.Join(args, " ")+" "+pw, r)
			if r.Code != 2 || !strings.Contains(r.Stderr, "WRONGPASS") {
				t.Errorf("syncd %s with a wrong password (%s): want exit 2 and WRONGPASS\n%s", strings.Join(args, " "), pw, r)
			}
		}
	}

	// The right password, a Sentinel password, and sink secrets: the
	// daemon syncs (at debug level) through an http sink whose URL and
	// headers carry secrets.
	var posts atomic.Int64
	var authOK atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Authorization") == "Bearer "+bearer {
			authOK.Store(true)
		}
		posts.Add(1)
	}))
	defer target.Close()
	u := strings.Replace(target.URL, "http://", "http://syncd:"+urlPW+"@", 1)
	sinkSection := fmt.Sprintf("sink:\n  type: http\n  http:\n    url: %s/sync\n    headers:\n      Authorization: Bearer %s\n", u, bearer)
	cfg := testutil.WriteFile(t, "config.yaml", redisSection("password_env: TOPO_RIGHT")+
		"ownership:\n  ttl: 1s\nengine:\n  interval: 1h\n  poll: 20ms\nitems:\n  ids: [a, b]\n"+sinkSection+logSection)
	r := runSyncd(t, env, "validate", "-c", cfg)
	check("validate http sink", r)
	if r.Code != 0 || !strings.Contains(r.Stdout, "[redacted]") {
		t.Errorf("validate with sink secrets:\n%s", r)
	}
	proc, daemon := startDaemon(t, env, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon:\n%s", daemon.String())
		}
	})
	waitFor(t, 20*time.Second, "two posts to the http sink", func() bool { return posts.Load() >= 2 })
	if !authOK.Load() {
		t.Error("the http sink did not send the Authorization header")
	}
	proc.Signal(os.Interrupt)
	<-proc.Done()
	seen = append(seen, "daemon with the right password\n"+daemon.String())
	if !strings.Contains(daemon.String(), `"level":"debug"`) {
		t.Errorf("the daemon logged nothing at debug level:\n%s", daemon.String())
	}

	// A failing http sink: the error names the URL, without its password.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://syncd:" + urlPW + "@" + closed.Addr().String() + "/sync"
	closed.Close()
	badSink := fmt.Sprintf("sink:\n  type: http\n  http:\n    url: %s\n", closedURL)
	cfg = testutil.WriteFile(t, "config.yaml", redisSection("password_env: TOPO_RIGHT")+
		"ownership:\n  ttl: 1s\nengine:\n  max_attempts: 1\nitems:\n  ids: [c]\n"+badSink+logSection)
	r = runSyncd(t, env, "batch", "-c", cfg, "--max-unavailable", "3s")
	check("batch with a failing http sink", r)
	if r.Code != 1 || !strings.Contains(r.Stdout+r.Stderr, "connection refused") {
		t.Errorf("batch with an unreachable http sink: want exit 1 and the failure\n%s", r)
	}

	// exec sink environment with a secret name.
	cfg = testutil.WriteFile(t, "config.yaml", redisSection("password_env: TOPO_RIGHT")+
		fmt.Sprintf("sink:\n  type: exec\n  exec:\n    command: [\"false\"]\n    env: [\"API_TOKEN=%s\"]\n", execSecret)+logSection)
	r = runSyncd(t, env, "validate", "-c", cfg)
	check("validate exec env", r)
	if r.Code != 0 {
		t.Errorf("validate exec sink:\n%s", r)
	}

	// Sentinel: the Sentinels' password, sent to something that is not a
	// Sentinel, and a wrong Redis password.
	cfg = testutil.WriteFile(t, "config.yaml", fmt.Sprintf(
		"redis:\n  addrs: [%q]\n  master_name: mymaster\n  password_env: TOPO_PW\n  sentinel_password_env: TOPO_SENTINEL\n  dial_timeout: 500ms\n%s",
		srv.Addr(), logSection))
	for _, args := range [][]string{{"validate"}, {"status"}, {"batch"}} {
		r := runSyncd(t, env, append(args, "-c", cfg)...)
		check(args[0]+" sentinel", r)
		if args[0] != "validate" && r.Code != 2 {
			t.Errorf("syncd %s against a fake Sentinel: want exit 2\n%s", args[0], r)
		}
	}

	for _, out := range seen {
		what, text, _ := strings.Cut(out, "\n")
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows the secret %q:\n%s", what, s, text)
			}
		}
	}
	// For the record, what a wrong password looks like.
	for _, out := range seen {
		if strings.HasPrefix(out, "status password_env") {
			t.Logf("%s", out)
		}
	}
}
