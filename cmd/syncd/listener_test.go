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
