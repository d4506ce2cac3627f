//go:build unix

package exec

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzTailBuffer checks that TailBuffer keeps exactly the last n bytes of
// what was written, however the writes are split.
func FuzzTailBuffer(f *testing.F) {
	f.Add([]byte("hello, world"), uint8(5), uint8(3))
	f.Add([]byte("ééééé"), uint8(3), uint8(1))
	f.Add([]byte(""), uint8(1), uint8(1))
	f.Add(bytes.Repeat([]byte("x"), 300), uint8(16), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, n, chunk uint8) {
		size := int(n%64) + 1
		step := int(chunk%32) + 1
		tb := NewTailBuffer(size)
		for p := data; len(p) > 0; {
			k := min(step, len(p))
			if w, err := tb.Write(p[:k]); w != k || err != nil {
				t.Fatalf("Write = %d, %v, want %d, nil", w, err, k)
			}
			p = p[k:]
		}
		want := data[max(0, len(data)-size):]
		if !bytes.Equal(tb.buf, want) {
			t.Fatalf("kept %q, want %q", tb.buf, want)
		}
		if tb.lost != (len(data) > size) {
			t.Fatalf("lost = %v with %d bytes into %d", tb.lost, len(data), size)
		}
		if s := tb.String(); len(data) > size && s != "" && !strings.HasPrefix(s, "…") {
			t.Fatalf("String() = %q, want a leading … after a cut", s)
		}
	})
}
