package sinks_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/syncd/syncd/sinks"
)

func TestClassify(t *testing.T) {
	plain := errors.New("boom")
	for _, tc := range []struct {
		err   error
		class sinks.Class
		after time.Duration
	}{
		{nil, sinks.ClassNone, 0},
		{plain, sinks.ClassItem, 0},
		{sinks.Permanent(plain), sinks.ClassPermanent, 0},
		{sinks.Unavailable(plain), sinks.ClassTarget, 0},
		{fmt.Errorf("http: item %q: %w", "a", sinks.RetryAfter(plain, 10*time.Second)), sinks.ClassTarget, 10 * time.Second},
		{sinks.RetryAfter(plain, -time.Second), sinks.ClassTarget, 0},
		{fmt.Errorf("%w: %w", sinks.Unavailable(plain), sinks.ErrStaleFence), sinks.ClassStale, 0},
		{sinks.Unavailable(sinks.Permanent(plain)), sinks.ClassTarget, 0},
	} {
		c, d := sinks.Classify(tc.err)
		if c != tc.class || d != tc.after {
			t.Errorf("Classify(%v) = %v, %v; want %v, %v", tc.err, c, d, tc.class, tc.after)
		}
	}
	if sinks.Unavailable(nil) != nil || sinks.RetryAfter(nil, time.Second) != nil {
		t.Error("Unavailable(nil) or RetryAfter(nil, d) is not nil")
	}
	if got := sinks.RetryAfter(plain, 10*time.Second).Error(); got != "target unavailable (retry after 10s): boom" {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(sinks.Unavailable(plain), plain) {
		t.Error("Unavailable does not unwrap")
	}
}

func TestParseClass(t *testing.T) {
	for _, c := range []sinks.Class{sinks.ClassItem, sinks.ClassTarget, sinks.ClassPermanent, sinks.ClassStale} {
		if got, err := sinks.ParseClass(c.String()); got != c || err != nil {
			t.Errorf("ParseClass(%q) = %v, %v", c, got, err)
		}
	}
	if got, _ := sinks.ParseClass("unavailable"); got != sinks.ClassTarget {
		t.Errorf("ParseClass(unavailable) = %v", got)
	}
	for _, s := range []string{"", "none", "Item", "retry"} {
		if _, err := sinks.ParseClass(s); err == nil {
			t.Errorf("ParseClass(%q) succeeded", s)
		}
	}
}
