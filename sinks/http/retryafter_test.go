package http

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"10", 10 * time.Second},
		{" 10 ", 10 * time.Second},
		{"007", 7 * time.Second},
		{"3600", time.Hour},
		{"3601", RetryAfterMax},
		{"86400", RetryAfterMax},
		{"99999999999999999999999", RetryAfterMax},
		{"00000000000000000000000000012", 12 * time.Second},
		// Only 1*DIGIT is delay-seconds.
		{"-5", 0}, {"+5", 0}, {"1.5", 0}, {"1e3", 0}, {"10s", 0}, {"1 0", 0}, {"0x10", 0},
		// The three HTTP-date forms.
		{"Wed, 01 May 2024 10:00:20 GMT", 20 * time.Second},
		{"Wednesday, 01-May-24 10:00:20 GMT", 20 * time.Second},
		{"Wed May  1 10:00:20 2024", 20 * time.Second},
		{"Wed, 01 May 2024 10:00:00 GMT", 0},
		{"Wed, 01 May 2024 10:00:21 GMT", 21 * time.Second},
		{"Wed, 01 May 2024 09:59:00 GMT", 0},
		{"Mon, 01 Jan 0001 00:00:00 GMT", 0},
		{"Wed, 01 May 2024 12:00:00 GMT", RetryAfterMax},
		{"Fri, 31 Dec 9999 23:59:59 GMT", RetryAfterMax},
		// Not HTTP-dates.
		{"2024-05-01T10:00:20Z", 0},
		{"Wed, 01 May 2024 10:00:20 CEST", 0},
		{"tomorrow", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.value, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// TestRetryAfterDate: an HTTP-date is measured from the response's Date,
// the target's clock, when it has a valid one.
func TestRetryAfterDate(t *testing.T) {
	local := now.Add(time.Minute) // our clock is a minute ahead
	tests := []struct {
		date string
		want time.Duration
	}{
		{"Wed, 01 May 2024 10:00:00 GMT", 20 * time.Second},
		{"", 0},        // measured from local: 40 s in the past
		{"garbage", 0}, // the same
	}
	for _, tt := range tests {
		h := http.Header{"Retry-After": {"Wed, 01 May 2024 10:00:20 GMT"}}
		if tt.date != "" {
			h.Set("Date", tt.date)
		}
		if got := retryAfter(h, local); got != tt.want {
			t.Errorf("retryAfter with Date %q = %v, want %v", tt.date, got, tt.want)
		}
	}
	h := http.Header{"Retry-After": {"Wed, 01 May 2024 10:00:20 GMT"}}
	if got := retryAfter(h, now.Add(-1500*time.Millisecond)); got != 22*time.Second {
		t.Errorf("retryAfter 21.5 s ahead = %v, want 22s: whole seconds, rounded up", got)
	}
	h = http.Header{"Retry-After": {"30"}, "Date": {"Wed, 01 May 2024 10:00:00 GMT"}}
	if got := retryAfter(h, local); got != 30*time.Second {
		t.Errorf("retryAfter(delay-seconds) = %v, want 30s whatever the Date", got)
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, v := range []string{
		"", "0", "10", "3601", "99999999999999999999", "-1", "1.5",
		"Wed, 01 May 2024 10:00:20 GMT", "Wednesday, 01-May-24 10:00:20 GMT",
		"Wed May  1 10:00:20 2024", "Fri, 31 Dec 9999 23:59:59 GMT",
	} {
		f.Add(v, uint32(0))
	}
	f.Add("Wed, 01 May 2024 10:00:20 GMT", uint32(500_000_000))
	f.Fuzz(func(t *testing.T, value string, nanos uint32) {
		now := now.Add(time.Duration(nanos % uint32(time.Second))) // HTTP-dates have whole seconds; now need not
		got := parseRetryAfter(value, now)
		if got < 0 || got > RetryAfterMax {
			t.Fatalf("parseRetryAfter(%q) = %v, out of [0, %v]", value, got, RetryAfterMax)
		}
		if got%time.Second != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, not whole seconds", value, got)
		}
		v := strings.TrimSpace(value)
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && v[0] != '+' && n <= 3600 {
			if want := time.Duration(n) * time.Second; got != want {
				t.Fatalf("parseRetryAfter(%q) = %v, want %v", value, got, want)
			}
		}
		if date, err := http.ParseTime(v); err == nil && !date.After(now) && got != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, want 0 for a date not after now", value, got)
		}
	})
}
