package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// post sends what the http sink sends and returns the status.
func post(ctx context.Context, url, id string, fence uint64, header string) (int, error) {
	body := fmt.Sprintf(`{"id":%q,"fence":%d,"owner":"h/1/r/w0","attempt":1,"last_sync":null}`, id, fence)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Syncd-Fence", header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// The checker itself: accepts rising fences, refuses lower ones at once
// or at the end of the hold, records cancellations, and its analysis
// finds overlaps and stale acceptances that a fence check at commit
// alone lets through.
func TestChecker(t *testing.T) {
	t.Parallel()
	hold := 150 * time.Millisecond
	c := newChecker(t, func(string) time.Duration { return hold }, "bad")
	defer http.DefaultClient.CloseIdleConnections()
	ctx := context.Background()
	status := func(id string, fence uint64) int {
		t.Helper()
		code, err := post(ctx, c.URL(), id, fence, fmt.Sprint(fence))
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if got := status("a", 10); got != 200 {
		t.Errorf("first write: %d", got)
	}
	if got := status("a", 10); got != 200 {
		t.Errorf("same fence again: %d", got)
	}
	if got := status("a", 9); got != 409 {
		t.Errorf("lower fence: %d", got)
	}
	if got := status("bad", 1); got != 422 {
		t.Errorf("poison: %d", got)
	}
	if code, _ := post(ctx, c.URL(), "a", 11, "12"); code != 400 {
		t.Errorf("header and body differ: %d", code)
	}

	// Two writers of b at once: 20 arrives first, 21 while 20 is held.
	// A fence check at commit accepts both; the analysis flags the overlap.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, fence := range []uint64{20, 21} {
		wg.Go(func() { codes[i] = status("b", fence) })
		time.Sleep(hold / 3)
	}
	wg.Wait()
	if diff := cmp.Diff(codes, []int{200, 200}); diff != "" {
		t.Errorf("overlapping writers (-got +want):\n%s", diff)
	}

	// c: 31 arrives, its client goes away; 30 arrives later and, with no
	// higher fence accepted, is accepted: a stale write.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := post(cctx, c.URL(), "c", 31, "31")
		done <- err
	}()
	for len(c.inFlightBy("h")) == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled request: %v", err)
	}
	for {
		ws, _ := c.snapshot()
		if ws[len(ws)-1].Outcome == cancelled {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if got := status("c", 30); got != 200 {
		t.Errorf("stale write after a cancelled higher one: %d", got)
	}

	ws, bad := c.snapshot()
	var outcomes []string
	for _, w := range ws {
		outcomes = append(outcomes, fmt.Sprintf("%s/%d/%s/%v", w.ID, w.Fence, w.Outcome, w.Early))
	}
	want := []string{"a/10/accepted/false", "a/10/accepted/false", "a/9/rejected/true", "bad/1/poison/false",
		"b/20/accepted/false", "b/21/accepted/false", "c/31/cancelled/false", "c/30/accepted/false"}
	if diff := cmp.Diff(outcomes, want); diff != "" {
		t.Errorf("log (-got +want):\n%s", diff)
	}
	v := analyze(ws, bad, false)
	if len(v.Overlaps) != 1 || !strings.Contains(v.Overlaps[0], "b fence=20") {
		t.Errorf("overlaps: %q", v.Overlaps)
	}
	if len(v.Stale) != 1 || !strings.Contains(v.Stale[0], "c fence=30") {
		t.Errorf("stale: %q", v.Stale)
	}
	if len(v.Protocol) != 1 || len(v.Regressed) != 0 || len(v.SharedFence) != 0 {
		t.Errorf("violations: %+v", v)
	}
	if got := c.firstAccepted([]string{"a", "b", "z"}, time.Time{}); len(got) != 2 || got["b"].Fence != 20 {
		t.Errorf("firstAccepted: %v", got)
	}
}

// The analysis on its own: regressions and one fence from two owners.
func TestAnalyze(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	ws := []write{
		{ID: "x", Owner: "a", Fence: 5, Begin: at(0), End: at(10), Outcome: accepted},
		{ID: "x", Owner: "b", Fence: 4, Begin: at(20), End: at(30), Outcome: accepted},
		{ID: "x", Owner: "c", Fence: 4, Begin: at(40), End: at(50), Outcome: accepted},
		{ID: "y", Owner: "a", Fence: 1, Begin: at(0), End: at(10), Outcome: accepted},
		{ID: "y", Owner: "a", Fence: 2, Begin: at(10), End: at(20), Outcome: accepted},
	}
	v := analyze(ws, nil, false)
	if len(v.Overlaps) != 0 || len(v.Regressed) != 1 || len(v.SharedFence) != 1 || len(v.Stale) != 2 || len(v.LastSync) != 0 {
		t.Errorf("%+v", v)
	}
	// What the sink is told of the last sync must not go back from one
	// fence to the next, nor to null, unless Redis was wiped.
	ws = []write{
		{ID: "z", Owner: "a", Fence: 1, Begin: at(0), End: at(10), Outcome: accepted},
		{ID: "z", Owner: "a", Fence: 2, Last: at(10), Begin: at(20), End: at(30), Outcome: accepted},
		{ID: "z", Owner: "b", Fence: 3, Last: at(30), Begin: at(40), End: at(50), Outcome: cancelled},
		{ID: "z", Owner: "c", Fence: 4, Begin: at(60), End: at(70), Outcome: accepted},
		{ID: "z", Owner: "c", Fence: 5, Last: at(10), Begin: at(80), End: at(90), Outcome: accepted},
	}
	if v := analyze(ws, nil, false); len(v.LastSync) != 2 || v.count() != 2 {
		t.Errorf("last_sync: %+v", v)
	}
	if v := analyze(ws, nil, true); v.count() != 0 {
		t.Errorf("last_sync after a wipe: %+v", v)
	}
}

// The proxy forwards both ways, delays replies and cuts connections.
func TestProxy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				io.Copy(c, c) // echo
				c.Close()
			})
		}
	})
	p := newProxy(t, ln.Addr().String())
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	roundTrip := func(c net.Conn, msg string, within time.Duration) (time.Duration, error) {
		start := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			return 0, err
		}
		buf := make([]byte, len(msg))
		c.SetReadDeadline(time.Now().Add(within))
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, err
		}
		if !bytes.Equal(buf, []byte(msg)) {
			return 0, fmt.Errorf("echo %q, want %q", buf, msg)
		}
		return time.Since(start), nil
	}
	c := dial()
	if _, err := roundTrip(c, "ping", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.setDelay(200*time.Millisecond, 1)
	if d, err := roundTrip(c, "slow", 5*time.Second); err != nil || d < 200*time.Millisecond {
		t.Errorf("delayed round trip: %v, %v", d, err)
	}
	p.setDelay(0, 0)
	p.delayRepliesTo([]byte("mark"), 200*time.Millisecond)
	if d, err := roundTrip(c, "plain", 5*time.Second); err != nil || d >= 200*time.Millisecond {
		t.Errorf("unmarked round trip: %v, %v", d, err)
	}
	if d, err := roundTrip(c, "marked", 5*time.Second); err != nil || d < 200*time.Millisecond {
		t.Errorf("marked round trip: %v, %v", d, err)
	}
	p.delayRepliesTo(nil, 0)
	if n := p.cutAll(); n != 1 {
		t.Errorf("cut %d connections, want 1", n)
	}
	if _, err := roundTrip(c, "after cut", 5*time.Second); err == nil {
		t.Error("a cut connection still works")
	}
	p.partition()
	if _, err := roundTrip(dial(), "partitioned", 200*time.Millisecond); err == nil {
		t.Error("a round trip through a partition")
	}
	p.heal()
	if _, err := roundTrip(dial(), "healed", 5*time.Second); err != nil {
		t.Errorf("after heal: %v", err)
	}
}
