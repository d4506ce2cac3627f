package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
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
	go srv.Serve(&capListener{Listener: ln, max: max})
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

// A server on a loopback address answers requests for localhost and
// loopback addresses only: a page whose name an attacker rebinds to
// 127.0.0.1 gets 421, not the API. One on another address is not
// guarded.
func TestLoopbackOnly(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: loopbackOnly(ln, ok)}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	for host, want := range map[string]int{
		fmt.Sprintf("127.0.0.1:%d", port):        200,
		fmt.Sprintf("localhost:%d", port):        200,
		"LOCALHOST.":                             200,
		"app.localhost":                          200,
		fmt.Sprintf("[::1]:%d", port):            200,
		"127.0.0.2":                              200,
		fmt.Sprintf("attacker.example:%d", port): 421,
		"10.0.0.1":                               421,
		"localhost.attacker.example":             421,
	} {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/api/v1/items", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
	wide, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	if h := loopbackOnly(wide, ok); fmt.Sprintf("%p", h) != fmt.Sprintf("%p", ok) {
		t.Error("a server on 0.0.0.0 is guarded")
	}
}
