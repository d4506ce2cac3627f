package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/tests/redistest"
)

// A daemon on 0.0.0.0 with http.allowed_hosts answers the API only for
// the hosts listed: a page on another name rebound to its address (DNS
// rebinding) gets 421. /healthz and /readyz answer a probe that names
// the daemon by the address it dialled, and nothing warns at start.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	cfg := writeConfig(t, redisConfig(srv, "hosts", `items:
  ids: [a]
http:
  listen: 0.0.0.0:0
  allowed_hosts: [syncd.example.com, "*.syncd.example.com"]
`))
	_, stderr := startDaemon(t, cfg)
	_, port, err := net.SplitHostPort(daemonAddr(t, stderr))
	if err != nil {
		t.Fatal(err)
	}
	local := net.JoinHostPort("127.0.0.1", port)
	waitFor(t, 15*time.Second, "the API, once Redis is reached", func() bool {
		code, _ := getHost(t, local, "/api/v1/summary", "syncd.example.com")
		return code == http.StatusOK
	})
	for host, want := range map[string]int{
		"syncd.example.com:" + port:   http.StatusOK,
		"ui.syncd.example.com":        http.StatusOK,
		"attacker.example:" + port:    http.StatusMisdirectedRequest,
		"syncd.example.com.attacker.": http.StatusMisdirectedRequest,
	} {
		if code, body := getHost(t, local, "/api/v1/summary", host); code != want {
			t.Errorf("/api/v1/summary, Host %q: %d %s, want %d", host, code, body, want)
		}
	}
	if code, body := getHost(t, local, "/api/v1/summary", "attacker.example"); !strings.Contains(body, "http.allowed_hosts") {
		t.Errorf("421 body %d %q does not name http.allowed_hosts", code, body)
	}
	// Probes naming the address they dialled, as a kubelet names a
	// pod's IP. /readyz may still say 503 (claims wait out a new
	// deployment's hold-off): what matters is that it is not 421.
	if code, body := getHost(t, local, "/healthz", local); code != http.StatusOK {
		t.Errorf("/healthz, Host %s: %d %s, want 200", local, code, body)
	}
	if code, body := getHost(t, local, "/readyz", local); code != http.StatusOK && code != http.StatusServiceUnavailable {
		t.Errorf("/readyz, Host %s: %d %s, want 200 or 503", local, code, body)
	}
	if ip := hostIPv4(); ip != "" {
		addr := net.JoinHostPort(ip, port)
		if code, body := getHost(t, addr, "/healthz", addr); code != http.StatusOK {
			t.Errorf("/healthz dialled at %s, Host %s: %d %s, want 200", addr, addr, code, body)
		}
		if code, body := getHost(t, addr, "/healthz", "localhost"); code != http.StatusMisdirectedRequest {
			t.Errorf("/healthz dialled at %s, Host localhost: %d %s, want 421 (localhost only over loopback)", addr, code, body)
		}
	}
	if strings.Contains(stderr.String(), "http.allowed_hosts empty") {
		t.Errorf("warned of an empty http.allowed_hosts:\n%s", stderr.String())
	}
}

// getHost GETs path from addr with the Host header host.
func getHost(t *testing.T, addr, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// hostIPv4 is an IPv4 address of this host's other than loopback; ""
// when there is none.
func hostIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}
