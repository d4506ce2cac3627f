package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/tests/testutil"
)

// An idle-connection flood must not cost the daemon more than maxConns
// descriptors: connections over the cap are closed at once, and the
// server answers again as soon as the flood goes away.
func TestStatusServerCapsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const max = 4
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })}
	go srv.Serve(capConns(ln, max, max, zerolog.Nop()))
	defer srv.Close()
	addr := ln.Addr().String()

	// max idle keep-alive connections, each after one request.
	var idle []net.Conn
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := get(t, c); got != "ok" {
			t.Fatalf("request on connection %d: %q", len(idle), got)
		}
		idle = append(idle, c)
	}
	// One more is closed without an answer.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	// Closed with data unread, the kernel may answer with a reset:
	// either way, no response and no wait for a timeout.
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection over the cap: read %q, %v; want closed at once", b, err)
	}
	// The flood goes away: the server answers again.
	for _, c := range idle {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not answer after the idle connections closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	http.DefaultClient.CloseIdleConnections()
}

// One source holding more than its share of connections, each with a
// request header begun and never finished (slowloris), must not shut
// out a health probe from another address: the source gets
// maxConnsPerSource connections, the rest are closed at once. Before,
// it took all maxConns and the probe was refused.
func TestStatusServerCapsConnectionsPerSource(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 as a second source address, which only Linux gives every loopback interface")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	ep := engine.NewEndpoints(version)
	srv := serveHTTP(ln, nil, ep, http.NotFoundHandler(), zerolog.New(&logs))
	defer srv.Close()
	addr := ln.Addr().String()

	// The connections are accepted in the order they were made, so
	// every one of these counts by the time the probe is accepted.
	var abusive []net.Conn
	for range maxConns + 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
			t.Fatal(err)
		}
		abusive = append(abusive, c)
	}

	// The probe, from another loopback address (Linux routes all of
	// 127.0.0.0/8 to lo).
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	probe, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	probe.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(probe, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(probe), nil)
	if err != nil {
		t.Fatalf("probe from 127.0.0.2 after 127.0.0.1 opened %d connections: %v; want 200", len(abusive), err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != "ok" {
		t.Fatalf("probe: %d %q; want 200 ok", resp.StatusCode, b)
	}

	// The source's connections over its share were closed at once; the
	// others wait for their header (until readHeaderTimeout, well after
	// the deadline here).
	var (
		wg   sync.WaitGroup
		held atomic.Int32
	)
	deadline := time.Now().Add(time.Second)
	for _, c := range abusive {
		wg.Go(func() {
			c.SetReadDeadline(deadline)
			_, err := c.Read(make([]byte, 1))
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				held.Add(1)
			}
		})
	}
	wg.Wait()
	if held := int(held.Load()); held != maxConnsPerSource {
		t.Errorf("127.0.0.1 holds %d connections; want %d", held, maxConnsPerSource)
	}

	// The refusals are counted, and logged once (one line a minute at
	// most). Before, nothing said they happened.
	refused := len(abusive) - maxConnsPerSource
	rec, mux := httptest.NewRecorder(), http.NewServeMux()
	ep.Register(mux)
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		fmt.Sprintf("syncd_http_connections_refused_total{cap=\"per_source\"} %d\n", refused),
		"syncd_http_connections_refused_total{cap=\"total\"} 0\n",
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var warns []string
	for _, l := range lines {
		if strings.Contains(l, "connections refused") {
			warns = append(warns, l)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], `"last_source":"127.0.0.1:`) || !strings.Contains(warns[0], `"refused":1,`) ||
		!strings.Contains(warns[0], `"cap":"per_source"`) || !strings.Contains(warns[0], "their source held its most connections (16)") {
		t.Errorf("refusal log lines = %q; want one naming 127.0.0.1, refused 1, the per-source cap", warns)
	}
}

// Each cap logs its own refusals, each line naming the last source: the
// first at once, those after it in the interval together when it ends,
// whether more come or not. Before, one line mixed both caps under the
// last refusal's text and source, and refusals held back stayed unlogged
// until another came (an outside trial).
func TestCapListenerLogsRefusalsPerCap(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 and 127.0.0.3 as source addresses, which only Linux gives every loopback interface")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	capped := capConns(ln, 2, 1, zerolog.New(&logs))
	capped.logEvery = 300 * time.Millisecond
	defer capped.Close()
	go func() {
		for {
			c, err := capped.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	// dial connects from 127.0.0.<from>; a refused connection is closed
	// at once, which the read sees.
	dial := func(from byte, keep bool) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, from)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if keep {
			t.Cleanup(func() { c.Close() })
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.Read(make([]byte, 1))
	}
	dial(1, true) // accepted: 127.0.0.1 holds its one
	for range 3 {
		dial(1, false) // refused by the per-source cap
	}
	dial(2, true) // accepted: the server holds its two
	for range 2 {
		dial(3, false) // refused by the total cap
	}
	time.Sleep(2 * capped.logEvery) // the held-back lines are written without another refusal
	got := logs.String()
	for _, want := range []string{
		`"cap":"per_source","refused":1,"last_source":"127.0.0.1:`,
		`"cap":"per_source","refused":2,"last_source":"127.0.0.1:`,
		`"cap":"total","refused":1,"last_source":"127.0.0.3:`,
		`"cap":"total","refused":1,"last_source":"127.0.0.3:`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("logs lack %s", want)
		}
	}
	if n := strings.Count(got, "connections refused"); n != 4 {
		t.Errorf("%d lines, want 4 (per cap: the first, then the rest):\n%s", n, got)
	}
	if capped.Refused(capSource) != 3 || capped.Refused(capTotal) != 2 {
		t.Errorf("Refused = %d per source, %d total; want 3, 2", capped.Refused(capSource), capped.Refused(capTotal))
	}
}

// Connections count against their IPv4 address, or their IPv6 /64.
func TestSourceOf(t *testing.T) {
	for addr, want := range map[net.Addr]string{
		&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}:             "192.0.2.7/32",
		&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}:      "192.0.2.7/32",
		&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 1}:  "2001:db8:1:2::/64",
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"}: "fe80::/64",
		&net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}:                   "::/64",
		&net.UnixAddr{Name: "/run/syncd.sock", Net: "unix"}:             "invalid Prefix",
	} {
		if got := sourceOf(addr).String(); got != want {
			t.Errorf("sourceOf(%v) = %s, want %s", addr, got, want)
		}
	}
	if sourceOf(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1")}) != sourceOf(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::9")}) ||
		sourceOf(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1")}) == sourceOf(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1")}) {
		t.Error("addresses in one /64 are not one source, or in two /64s not two")
	}
}

// A connection whose request header trickles in, a byte at a time, is
// closed readHeaderTimeout after it was accepted, not kept while bytes
// come.
func TestStatusServerDropsSlowHeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(ln, nil, engine.NewEndpoints(version), http.NotFoundHandler(), zerolog.New(zerolog.NewTestWriter(t)))
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	// The request line and Host at once, then a header value a byte at a
	// time: the server's partial line, when its deadline comes, is
	// always a well-formed header, so it closes without an answer
	// (a partial line without its colon would get a 400 first).
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	stop, wrote := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(wrote)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(start.Add(readHeaderTimeout + 5*time.Second))
	b, err := io.ReadAll(c)
	took := time.Since(start)
	close(stop)
	<-wrote
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a trickled header kept its connection open for %v (readHeaderTimeout %v)", took, readHeaderTimeout)
	}
	if took < readHeaderTimeout-time.Second || len(b) != 0 && !strings.HasPrefix(string(b), "HTTP/1.1 4") {
		t.Errorf("closed after %v with %q, %v; want closed after readHeaderTimeout (%v), with no answer or a 4xx", took, b, err, readHeaderTimeout)
	}
}

func get(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// hostStatus serves guard on ln and returns, per Host, the status of a
// request for /healthz naming it, made to dial (an address of ln).
func hostStatus(t *testing.T, ln net.Listener, guard http.Handler, dial string, hosts []string) map[string]int {
	t.Helper()
	srv := &http.Server{Handler: guard}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	got := make(map[string]int)
	for _, host := range hosts {
		req, _ := http.NewRequest("GET", "http://"+dial+"/healthz", nil)
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusMisdirectedRequest && (!strings.HasPrefix(string(b), "syncd ") ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain")) {
			t.Errorf("Host %q: 421 with %s %q; want a line of plain text", host, resp.Header.Get("Content-Type"), b)
		}
		got[host] = resp.StatusCode
	}
	return got
}

// checkHosts runs hostStatus over want's hosts and compares.
func checkHosts(t *testing.T, ln net.Listener, guard http.Handler, dial string, want map[string]int) {
	t.Helper()
	var hosts []string
	for h := range want {
		hosts = append(hosts, h)
	}
	if diff := cmp.Diff(hostStatus(t, ln, guard, dial, hosts), want); diff != "" {
		t.Errorf("statuses by Host, dialling %s (-got +want):\n%s", dial, diff)
	}
}

var ok200 = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

// With no http.allowed_hosts, a server on a loopback address answers
// requests for localhost and IP addresses only: a page whose name
// an attacker rebinds to 127.0.0.1 gets 421, not the API. One on
// another address is not guarded.
func TestHostGuardLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	checkHosts(t, ln, hostGuard(ln, nil, ok200), ln.Addr().String(), map[string]int{
		fmt.Sprintf("127.0.0.1:%d", port):        200,
		fmt.Sprintf("localhost:%d", port):        200,
		"LOCALHOST.":                             200,
		"app.localhost":                          200,
		fmt.Sprintf("[::1]:%d", port):            200,
		"127.0.0.2":                              200,
		"[::ffff:127.0.0.1]":                     200,
		fmt.Sprintf("attacker.example:%d", port): 421,
		"localhost.attacker.example":             421,
		// An IP address cannot be rebound: served (a NAT, a port-forward).
		"10.0.0.1": 200,
	})
	// A browser always sends a Host; HAProxy's health check sends none.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: hostGuard(ln, nil, ok200)}
	go srv.Serve(ln)
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /healthz HTTP/1.0\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.0 200") {
		t.Errorf("HTTP/1.0 without Host: %q, %v; want 200", line, err)
	}
	wide, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	if h := hostGuard(wide, nil, ok200); fmt.Sprintf("%p", h) != fmt.Sprintf("%p", ok200) {
		t.Error("a server on 0.0.0.0 with no allowed hosts is guarded")
	}
}

// allowed is http.allowed_hosts as config.File.AllowedHosts gives it.
var allowed = []string{"syncd.example.com", "*.syncd.example.com", "10.0.0.9", "2001:db8::9"}

// With http.allowed_hosts, a server on a loopback address also answers
// requests for the hosts listed; the rest still get 421.
func TestHostGuardAllowedOnLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	checkHosts(t, ln, hostGuard(ln, allowed, ok200), ln.Addr().String(), map[string]int{
		"syncd.example.com:9090":             200,
		"SYNCD.Example.com.":                 200,
		"a.syncd.example.com":                200,
		"a.b.syncd.example.com:1":            200,
		"10.0.0.9":                           200,
		"[2001:db8::9]:9090":                 200,
		"[2001:db8:0::9]":                    200,
		"localhost":                          200,
		"127.0.0.1":                          200,
		".syncd.example.com":                 421,
		"xsyncd.example.com":                 421,
		"syncd.example.com.attacker.example": 421,
		"example.com":                        421,
		"attacker.example":                   421,
		"10.0.0.10":                          200,
	})
}

// A server on 0.0.0.0 with http.allowed_hosts (the case an attacker's
// trial found open: any Host was served) answers requests for the
// hosts listed and for IP addresses, and for localhost only over
// loopback; a page on
// another name rebound to the server's address gets 421.
func TestHostGuardAllowedOnAnyAddress(t *testing.T) {
	ip := nonLoopbackIPv4(t)
	for _, dial := range []string{"127.0.0.1", ip} {
		t.Run(dial, func(t *testing.T) {
			ln, err := net.Listen("tcp", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			viaLoopback := map[bool]int{true: 200, false: 421}[dial == "127.0.0.1"]
			checkHosts(t, ln, hostGuard(ln, allowed, ok200), net.JoinHostPort(dial, fmt.Sprint(port)), map[string]int{
				net.JoinHostPort(dial, fmt.Sprint(port)): 200,
				"syncd.example.com":                      200,
				"a.syncd.example.com":                    200,
				"10.0.0.9":                               200,
				"127.0.0.1":                              200,
				"localhost":                              viaLoopback,
				"app.localhost":                          viaLoopback,
				"attacker.example":                       421,
				"10.9.9.9":                               200,
			})
		})
	}
}

// A server beyond loopback with no allowed hosts says at start that any
// Host is served; one on loopback, or with a list, says nothing.
func TestStatusServerWarnsUnguarded(t *testing.T) {
	for _, tt := range []struct {
		addr    string
		allowed []string
		warns   bool
	}{
		{"0.0.0.0:0", nil, true},
		{"0.0.0.0:0", allowed, false},
		{"127.0.0.1:0", nil, false},
	} {
		ln, err := net.Listen("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		statusServer(ln, tt.allowed, ok200, zerolog.New(&log))
		ln.Close()
		if got := strings.Contains(log.String(), `"level":"warn"`) && strings.Contains(log.String(), "http.allowed_hosts empty"); got != tt.warns {
			t.Errorf("%s with allowed hosts %q: warned %v, want %v: %s", tt.addr, tt.allowed, got, tt.warns, log.String())
		}
	}
}

// nonLoopbackIPv4 returns an IPv4 address of this host's other than
// loopback, or skips the test.
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no IPv4 address but loopback on this host")
	return ""
}
