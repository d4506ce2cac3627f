package engine

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// A spell out of memory starts at the first refusal and holds, its since
// kept, until a write sent after the last refusal went through and none
// was refused for oomHold: just at maxmemory Redis takes some writes and
// refuses others, and without a hold /readyz went from out of memory
// back to ready up to 15 times in a 30 s spell, its since starting anew
// each time. The first write to go through after a refusal wakes the
// scheduler's backoff. With the monitor running, the hold is a tick
// longer.
func TestHealthOutOfMemoryHold(t *testing.T) {
	// Redis's own refusal, as go-redis returns it.
	srv := redistest.Start(t, nil)
	srv.FillMemory(t)
	oomErr := srv.Client(t).Set(t.Context(), "one-more", "x", 0).Err()
	if !store.IsOutOfMemory(oomErr) {
		t.Fatalf("SET on a full Redis: %v, want OOM", oomErr)
	}
	synctest.Test(t, func(t *testing.T) {
		var h health
		if !h.outOfMemory().IsZero() {
			t.Fatal("out of memory before any write")
		}
		h.wrote(errors.New("connection refused"), time.Now())
		if !h.outOfMemory().IsZero() {
			t.Fatal("out of memory after another error")
		}
		woken := h.writesResumed()
		start := time.Now()
		h.wrote(oomErr, start)
		time.Sleep(100 * time.Millisecond)
		h.wrote(nil, time.Now().Add(-time.Second)) // sent before the refusal
		select {
		case <-woken:
			t.Fatal("a write sent before the refusal woke the scheduler")
		default:
		}
		h.wrote(nil, time.Now())
		select {
		case <-woken:
		default:
			t.Fatal("the first write to go through after the refusal did not wake the scheduler")
		}
		if got := h.outOfMemory(); !got.Equal(start) {
			t.Fatalf("right after a write went through: out of memory since %v, want %v (held)", got, start)
		}
		time.Sleep(400 * time.Millisecond)
		h.wrote(oomErr, time.Now()) // refused again, at +0.5 s
		time.Sleep(100 * time.Millisecond)
		h.wrote(nil, time.Now())
		time.Sleep(oomHold - 200*time.Millisecond)
		if got := h.outOfMemory(); !got.Equal(start) {
			t.Fatalf("%v after the last refusal: out of memory since %v, want %v (held, since kept)", oomHold-100*time.Millisecond, got, start)
		}
		time.Sleep(200 * time.Millisecond)
		if got := h.outOfMemory(); !got.IsZero() {
			t.Fatalf("%v after the last refusal, a write through since: out of memory since %v, want none", oomHold+100*time.Millisecond, got)
		}

		// No write through since the refusal: held however long.
		again := time.Now()
		h.wrote(oomErr, again)
		time.Sleep(10 * oomHold)
		if got := h.outOfMemory(); !got.Equal(again) {
			t.Fatalf("no write through since a refusal %v ago: out of memory since %v, want %v", 10*oomHold, got, again)
		}
		// A spell whose end no one read: the next refusal starts anew.
		h.wrote(nil, time.Now())
		time.Sleep(time.Minute)
		later := time.Now()
		h.wrote(oomErr, later)
		if got := h.outOfMemory(); !got.Equal(later) {
			t.Fatalf("a refusal a minute after the last spell ended: since %v, want %v", got, later)
		}

		// The monitor writes the registry at its first tick past the
		// period: the hold waits that tick too.
		const tick = 250 * time.Millisecond
		h.start(time.Hour, tick)
		time.Sleep(time.Millisecond)
		h.wrote(nil, time.Now())
		time.Sleep(oomHold + tick - 2*time.Millisecond)
		if h.outOfMemory().IsZero() {
			t.Fatalf("%v after the last refusal, the monitor ticking every %v: the spell ended before the hold's tick", oomHold+tick-2*time.Millisecond, tick)
		}
		time.Sleep(time.Millisecond)
		if got := h.outOfMemory(); !got.IsZero() {
			t.Fatalf("%v after the last refusal: out of memory since %v, want none", oomHold+tick, got)
		}
	})
}
