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
	for in, want := range map[string]string{
		"token=abc password=x1 Bearer zz key=[redacted]": "token=xxxxx password=xxxxx Bearer xxxxx key=[redacted]",
		// The forms an operator's trial found shown.
		`quoted token='quotTOK' password="quot PW"`:     `quoted token='xxxxx' password="xxxxx"`,
		`json {"token":"jsonTOK","password": "jsonPW"}`: `json {"token":"xxxxx","password": "xxxxx"}`,
		"yaml password: yamlPW\nnext":                   "yaml password: xxxxx\nnext",
		"flag --password flagPW --verbose":              "flag --password xxxxx --verbose",
		"Authorization: Basic dXNlcjpwdw==":             "Authorization: Basic xxxxx",
		// Not secrets: author, idempotency_key, a key in prose.
		"author=ann idempotency_key=k1 monkey=m":        "author=ann idempotency_key=k1 monkey=m",
		"api_key=k2 apikey=k3 AWS_SECRET_ACCESS_KEY=k4": "api_key=xxxxx apikey=xxxxx AWS_SECRET_ACCESS_KEY=xxxxx",
	} {
		got := Pairs(in)
		if got != want {
			t.Errorf("Pairs(%q) = %q, want %q", in, got, want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", in, got, again)
		}
	}
	// A cut tail loses its first word, which may be the rest of a
	// credential whose name was cut off.
	for in, want := range map[string]string{
		"…=CUTSECRETabc rest token=t1":          "… rest token=xxxxx",
		"…ce:URLCUTpass@h.example/x and more":   "… and more",
		"…BEARERCUT0987654321":                  "…",
		"whole text, not cut: password=pw here": "whole text, not cut: password=xxxxx here",
	} {
		if got := Tail(in, NewSecrets()); got != want {
			t.Errorf("Tail(%q) = %q, want %q", in, got, want)
		}
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

// FuzzPairs: Pairs and Tail never panic, and Pairs applied twice changes
// nothing more.
func FuzzPairs(f *testing.F) {
	for _, s := range []string{`token='a b' password="c" {"key":"d"}`, "--password x -v", "Bearer y", "…z token=1", "pwd: : ="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		out := Pairs(text)
		if again := Pairs(out); again != out {
			t.Fatalf("Pairs(%q) = %q, then %q", text, out, again)
		}
		Tail(text, NewSecrets("abcd"))
	})
}
