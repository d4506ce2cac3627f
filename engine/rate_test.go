package engine

import (
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{
		"20/s": {20, time.Second}, "100/m": {100, time.Minute}, " 5000 / h ": {5000, time.Hour}, "": {},
		"1000000/s": {1000000, time.Second},
	} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, _ := ParseRate(got.String()); back != got {
			t.Errorf("ParseRate(%q.String()) = %v", got, back)
		}
	}
	for _, in := range []string{"20", "20/d", "0/s", "-1/s", "x/s", "1000001/s", "20/s/s", "1e3/s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) succeeded", in)
		}
	}
	// A count past an int is too large, as one past RateMax is; it said
	// "must be a whole number of at least 1" (an outside trial).
	for in, want := range map[string]string{
		"99999999999999999999/s":  `"99999999999999999999/s" is too large (at most 1000000/s)`,
		"+99999999999999999999/h": `"+99999999999999999999/h" is too large (at most 1000000/s)`,
		"-99999999999999999999/s": `"-99999999999999999999/s": the count must be a whole number of at least 1`,
	} {
		if _, err := ParseRate(in); err == nil || err.Error() != want {
			t.Errorf("ParseRate(%q) = %v, want %s", in, err, want)
		}
	}
	if e := (Rate{20, time.Second}).every(); e != 50*time.Millisecond {
		t.Errorf("every = %v", e)
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"20/s", "100/m", "5000/h", "", "x", "9999999999999999999/s", "1/ s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if r.validate() != nil {
			t.Fatalf("ParseRate(%q) = %v, which does not validate", s, r)
		}
		if r.N > 0 && (r.every() <= 0 || r.PerSecond() > RateMax) {
			t.Fatalf("ParseRate(%q) = %v: every %v", s, r, r.every())
		}
	})
}

// The retry delay stays within the bounds Config promises: from
// BackoffMin, doubling per attempt, never past BackoffMax (the jitter was
// [d/2, d], which retried after 158 ms with BackoffMin 300 ms).
func TestBackoffBounds(t *testing.T) {
	e := &Engine{cfg: Config{BackoffMin: 300 * time.Millisecond, BackoffMax: 2 * time.Second}}
	for attempt := 1; attempt <= 8; attempt++ {
		lo := min(300*time.Millisecond<<(attempt-1), 2*time.Second)
		hi := min(2*lo, 2*time.Second)
		seen := map[bool]bool{}
		for range 500 {
			d := e.backoff(attempt)
			if d < lo || d > hi {
				t.Fatalf("attempt %d: backoff %v, want within [%v, %v]", attempt, d, lo, hi)
			}
			seen[d == lo] = true
		}
		if lo < hi && !seen[false] {
			t.Errorf("attempt %d: no jitter in 500 delays", attempt)
		}
	}
}
