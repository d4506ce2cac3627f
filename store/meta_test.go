package store

import (
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, c := range []struct {
		fence    uint64
		last     int64
		attempts int
		size     int
	}{
		{0, 0, 0, 14},
		{1795326333310972, 1795326333348, 0, 14},
		{1<<56 - 1, 1<<48 - 1, 255, 14},
		{1795326333310972, 1795326333348, 256, 17},
		{1, 2, 1<<31 - 1, 17},
	} {
		b := encodeMeta(c.fence, c.last, c.attempts)
		if len(b) != c.size {
			t.Errorf("encodeMeta(%d, %d, %d) is %d bytes, want %d", c.fence, c.last, c.attempts, len(b), c.size)
		}
		f, l, a := ParseMeta(string(b))
		if f != c.fence || l != c.last || a != c.attempts {
			t.Errorf("round trip of (%d, %d, %d) = (%d, %d, %d)", c.fence, c.last, c.attempts, f, l, a)
		}
	}
	for _, bad := range []string{"", "1795326333310972:1795326333348:0"[:13], "short"} {
		if f, l, a := ParseMeta(bad); f != 0 || l != 0 || a != 0 {
			t.Errorf("ParseMeta(%q) = (%d, %d, %d), want zeros", bad, f, l, a)
		}
	}
}

// FuzzParseMeta: any bytes in the meta hash (written by hand, truncated,
// an older format) decode without panicking, and a decoded value encodes
// back to what the scripts would read the same way.
func FuzzParseMeta(f *testing.F) {
	f.Add(string(encodeMeta(1795326333310972, 1795326333348, 3)))
	f.Add(string(encodeMeta(1, 2, 70000)))
	f.Add("1795326333310972:1795326333348:0")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		fence, last, attempts := ParseMeta(v)
		if fence >= 1<<56 || last < 0 || last >= 1<<48 || attempts < 0 {
			t.Fatalf("ParseMeta(%x) = (%d, %d, %d): out of range", v, fence, last, attempts)
		}
		f2, l2, a2 := ParseMeta(string(encodeMeta(fence, last, attempts)))
		if f2 != fence || l2 != last || a2 != attempts {
			t.Fatalf("re-encoding (%d, %d, %d) reads (%d, %d, %d)", fence, last, attempts, f2, l2, a2)
		}
	})
}
