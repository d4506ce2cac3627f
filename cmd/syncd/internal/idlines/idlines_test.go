package idlines

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// errLines returns the lines of err's message, nil for no error.
func errLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func TestParse(t *testing.T) {
	long := strings.Repeat("x", 600)
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr []string
	}{
		{"rules", "# header\nc\n\n  d  \n#e\na\nc\nf # not a comment\n\t\n", []string{"c", "d", "a", "f # not a comment"}, nil},
		{"empty", "", nil, nil},
		{"no final line end", "a\nb", []string{"a", "b"}, nil},
		{"crlf", "a\r\nb\r\n\r\n# c\r\n", []string{"a", "b"}, nil},
		{"byte order mark", "\ufeffa\nb\n", []string{"a", "b"}, nil},
		{"byte order mark only at the start", "a\n\ufeffb\n", nil, []string{
			`ids:2: invalid item id "\ufeffb": invisible format character U+FEFF at byte 0`}},
		{"a bad line in the middle", "a\nb\n\x01bad\nc\n", nil, []string{
			`ids:3: invalid item id "\x01bad": control character U+0001 at byte 0`}},
		{"a 600-byte line", "a\n" + long + "\nb\n", nil, []string{
			`ids:2: invalid item id "` + long[:64] + `...": 600 bytes long, the limit is 512`}},
		{"not UTF-8", "a\nk\xf6rv\n", nil, []string{`ids:2: invalid item id "k\xf6rv": not valid UTF-8`}},
		{"UTF-16", "\xff\xfea\x00\n\x00", nil, []string{
			"ids:1: UTF-16 text (it starts with a UTF-16 byte order mark): save the file as UTF-8"}},
		{"every bad line", "\x01\na\n\x02\n", nil, []string{
			`ids:1: invalid item id "\x01": control character U+0001 at byte 0`,
			`ids:3: invalid item id "\x02": control character U+0002 at byte 0`}},
		{"many bad lines", strings.Repeat("\x01\n", 50), nil, manyBad(50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("ids", strings.NewReader(tt.in), store.ValidateID)
			if diff := cmp.Diff(errLines(err), tt.wantErr); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("ids (-got +want):\n%s", diff)
			}
		})
	}
}

// manyBad is the message for n lines of "\x01": MaxListed lines, then
// the count of the rest.
func manyBad(n int) []string {
	var out []string
	for i := 1; i <= MaxListed; i++ {
		out = append(out, fmt.Sprintf(`ids:%d: invalid item id "\x01": control character U+0001 at byte 0`, i))
	}
	return append(out, fmt.Sprintf("ids: and %d more invalid lines", n-MaxListed))
}

// A line longer than MaxLineLen is named by its number, not read whole
// and not reported as bufio.Scanner's "token too long"; the lines after
// it keep their numbers.
func TestParseLineTooLong(t *testing.T) {
	in := "a\n" + strings.Repeat("y", MaxLineLen+10) + "\nb\n\x01\n"
	want := []string{
		"stdin:2: line of 1052682 bytes, longer than any item id",
		`stdin:4: invalid item id "\x01": control character U+0001 at byte 0`,
	}
	check := func(id string) error {
		if id == "\x01" {
			return store.ValidateID(id)
		}
		return nil
	}
	_, err := Parse("stdin", strings.NewReader(in), check)
	if diff := cmp.Diff(errLines(err), want); diff != "" {
		t.Errorf("errors (-got +want):\n%s", diff)
	}
	var e *Error
	if !errors.As(err, &e) || e.Count() != 2 || !errors.Is(err, store.ErrInvalidID) {
		t.Errorf("Parse: %#v, want an *Error of 2 lines that wraps store.ErrInvalidID", err)
	}
	// Without a check, a line of MaxLineLen bytes is one ID.
	ids, err := Parse("stdin", strings.NewReader(" "+strings.Repeat("z", store.MaxRemoveIDLen)+" \n"), nil)
	if err != nil || len(ids) != 1 || len(ids[0]) != store.MaxRemoveIDLen {
		t.Errorf("Parse of a 1 MiB id: %d ids, %v", len(ids), err)
	}
}

func TestParseReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Parse("stdin", io.MultiReader(strings.NewReader("a\nb"), iotest.ErrReader(boom)), nil)
	if !errors.Is(err, boom) || err.Error() != "stdin: boom" {
		t.Errorf("Parse: %v, want stdin: boom", err)
	}
}
