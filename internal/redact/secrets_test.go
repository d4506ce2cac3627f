package redact

import (
	"strings"
	"testing"
)

func TestSecrets(t *testing.T) {
	s := NewSecrets("s3cret-value", "ab", " spaced-out ")
	if got := s.Clean("a s3cret-value b s3cret%2Dvalue ab spaced-out"); got != "a [redacted] b s3cret%2Dvalue ab [redacted]" {
		t.Errorf("Clean = %q", got)
	}
	for tail, want := range map[string]string{
		"…et-value end":  "… end",         // the end of a secret at the start goes
		"…e end":         "… end",         // even one byte of it
		"…plain end":     "…plain end",    // nothing of a secret
		"no cut, value":  "no cut, value", // not a tail: nothing dropped
		"…-out":          "…",             // all of it a piece
		"…\x80\x80x end": "…x end",        // no half UTF-8 sequence first
	} {
		if got := s.CleanTail(tail); got != want {
			t.Errorf("CleanTail(%q) = %q, want %q", tail, got, want)
		}
	}
	if !SecretName("API_TOKEN") || !SecretName("db_password") || SecretName("MODE") {
		t.Error("SecretName")
	}
	if got := Pairs("token=abc password=x1 Bearer zz key=[redacted]"); got != "token=xxxxx password=xxxxx Bearer xxxxx key=[redacted]" {
		t.Errorf("Pairs = %q", got)
	}
}

// FuzzCleanTail: no piece of a secret of four bytes or more is left at
// the start of a cleaned tail, and no whole secret anywhere.
func FuzzCleanTail(f *testing.F) {
	f.Add("token-1234", "…en-1234 and token-1234 again")
	f.Add("abcd", "…cdabcd")
	f.Fuzz(func(t *testing.T, secret, tail string) {
		s := NewSecrets(secret)
		out := s.CleanTail(tail)
		sec := strings.TrimSpace(secret)
		if len(sec) < MinSecret || strings.Contains(sec, Redacted) || strings.ContainsAny(sec, "…[]") {
			return
		}
		if strings.Contains(out, sec) && !strings.Contains(tail, Redacted) {
			// Clean replaced every occurrence; one can only reappear when
			// the replacement itself builds it, which a secret without
			// brackets cannot.
			t.Fatalf("CleanTail(%q) with %q = %q: the secret shows", tail, secret, out)
		}
		rest, cut := strings.CutPrefix(out, "…")
		if !cut {
			return
		}
		for k := MinSecret; k < len(sec); k++ {
			if strings.HasPrefix(rest, sec[len(sec)-k:]) && strings.HasPrefix(tail, "…"+sec[len(sec)-k:]) {
				t.Fatalf("CleanTail(%q) with %q = %q: a piece of the secret starts it", tail, secret, out)
			}
		}
	})
}
