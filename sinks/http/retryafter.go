package http

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryAfterMax caps the Retry-After the sink passes on, so that a target
// that asks for days, by mistake or malice, does not park every item for
// that long. The engine's breaker has the same cap.
const RetryAfterMax = time.Hour

// retryAfter returns how long a response with header h asks to be left
// alone: its Retry-After (RFC 9110 §10.2.3), capped at RetryAfterMax, or
// 0 when it has none. now is the local time; an HTTP-date is measured from
// the response's Date when it has one, so that the target's clock is not
// compared with ours.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	return parseRetryAfter(h.Get("Retry-After"), now)
}

// parseRetryAfter parses the value of a Retry-After header, delay-seconds
// or an HTTP-date, the latter as seen at now. It returns 0 for a value
// that is malformed or a date not after now, rounds up to whole seconds
// and caps the delay at RetryAfterMax.
func parseRetryAfter(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	if isDigits(value) {
		// delay-seconds = 1*DIGIT, as many as the target likes.
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n > int64(RetryAfterMax/time.Second) {
			return RetryAfterMax // out of range: digits only, so too many
		}
		return time.Duration(n) * time.Second
	}
	// http.ParseTime takes the three forms of HTTP-date RFC 9110 allows.
	date, err := http.ParseTime(value)
	if err != nil {
		return 0
	}
	switch d := date.Sub(now); {
	case d <= 0:
		return 0
	case d >= RetryAfterMax: // before rounding: Sub saturates
		return RetryAfterMax
	default:
		// Whole seconds, as the date has, rounded up: not before it.
		return (d + time.Second - 1).Truncate(time.Second)
	}
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
