package idlines

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/store"
)

// parseReference is Parse for inputs without a line over MaxLineLen,
// written the obvious way over the whole input.
func parseReference(in string) (ids []string, bad []int, utf16 bool) {
	if strings.HasPrefix(in, "\xff\xfe") || strings.HasPrefix(in, "\xfe\xff") {
		return nil, nil, true
	}
	in = strings.TrimPrefix(in, "\ufeff")
	in = strings.TrimSuffix(in, "\n")
	if in == "" {
		return nil, nil, false
	}
	for i, line := range strings.Split(in, "\n") {
		id := strings.TrimSpace(line)
		if id == "" || strings.HasPrefix(id, "#") || slices.Contains(ids, id) {
			continue
		}
		if store.ValidateID(id) != nil {
			bad = append(bad, i+1)
			continue
		}
		ids = append(ids, id)
	}
	return ids, bad, false
}

// FuzzParse: any input (an items file is outside input: a wrong file, a
// binary, UTF-16, a file an editor mangled) parses without panicking and
// exactly as the obvious reading over the whole input does: the same IDs
// in the same order, or the same bad lines.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"a\nb\n", "\ufeffa\r\nb\r\n", "# c\n\n  d  \n", "a\n\x01\nb\n", "a\na\n",
		"\xff\xfea\x00", "k\xf6rv\n", strings.Repeat("x", 600) + "\n", "a\rb\n", "\ufeff\ufeffa",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ids, err := Parse("f", strings.NewReader(in), store.ValidateID)
		wantIDs, wantBad, utf16 := parseReference(in)
		var e *Error
		switch {
		case err != nil && !errors.As(err, &e):
			t.Fatalf("Parse(%q): %v, not an *Error", in, err)
		case ids != nil && err != nil:
			t.Fatalf("Parse(%q) = %q and %v: IDs with an error", in, ids, err)
		case utf16:
			if e == nil || e.Count() != 1 || e.Lines[0].Line != 1 {
				t.Fatalf("Parse(%q) = %q, %v; want the UTF-16 error", in, ids, err)
			}
		case len(wantBad) > 0:
			var got []int
			if e != nil {
				for _, l := range e.Lines {
					got = append(got, l.Line)
				}
			}
			if e == nil || e.Count() != len(wantBad) || !slices.Equal(got, wantBad[:min(len(wantBad), MaxListed)]) {
				t.Fatalf("Parse(%q): bad lines %v, %v; want %v", in, got, err, wantBad)
			}
		default:
			if err != nil || !slices.Equal(ids, wantIDs) {
				t.Fatalf("Parse(%q) = %q, %v; want %q", in, ids, err, wantIDs)
			}
		}
	})
}
