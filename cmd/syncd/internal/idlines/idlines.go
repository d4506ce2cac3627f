package idlines

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/syncd/syncd/store"
)

const (
	// MaxLineLen is the longest line Parse reads, in bytes without the
	// line end: the longest ID any command takes (store.MaxRemoveIDLen)
	// with room for white space around it.
	MaxLineLen = store.MaxRemoveIDLen + 4096

	// MaxListed is how many bad lines an *Error lists; it counts the rest.
	MaxListed = 20
)

// LineError is one bad line.
type LineError struct {
	Name   string // the input's name: a path, or "stdin"
	Line   int    // 1-based
	Reason string // what is wrong, such as `invalid item id "a\x01b": control character U+0001 at byte 1`
	Err    error  // the check's error; nil for a line too long or a UTF-16 input
}

// Error formats e as "name:line: reason".
func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Reason) }

func (e *LineError) Unwrap() error { return e.Err }

// Error is every bad line of one input.
type Error struct {
	Name  string
	Lines []*LineError // the first MaxListed bad lines, in line order
	More  int          // the bad lines after those, counted only
}

// Count is how many lines are bad.
func (e *Error) Count() int { return len(e.Lines) + e.More }

// Error prints one bad line per line, then "name: and N more invalid
// lines" when some were not listed.
func (e *Error) Error() string {
	var b strings.Builder
	for i, l := range e.Lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l.Error())
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n%s: and %d more invalid lines", e.Name, e.More)
	}
	return b.String()
}

// Unwrap returns the listed lines, so that errors.Is(err,
// store.ErrInvalidID) and errors.As look at each.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Lines))
	for i, l := range e.Lines {
		errs[i] = l
	}
	return errs
}

var (
	bomUTF8    = []byte("\ufeff")
	bomUTF16LE = []byte{0xff, 0xfe}
	bomUTF16BE = []byte{0xfe, 0xff}
)

// Parse reads the IDs of r, named name in errors, by the rules of the
// package doc. check judges each ID; nil accepts any. It returns an
// *Error for bad lines, and an error wrapping the reader's for a read
// that failed.
func Parse(name string, r io.Reader, check func(id string) error) ([]string, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	bad := &Error{Name: name}
	report := func(n int, err error, reason string) {
		if len(bad.Lines) < MaxListed {
			bad.Lines = append(bad.Lines, &LineError{Name: name, Line: n, Reason: reason, Err: err})
		} else {
			bad.More++ // not kept: the input may be anything at all
		}
	}
	var ids []string
	seen := map[string]bool{}
	var buf []byte
	for n := 1; ; n++ {
		line, size, end, err := readLine(br, buf[:0])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if end {
			break
		}
		buf = line
		if n == 1 {
			if bytes.HasPrefix(line, bomUTF16LE) || bytes.HasPrefix(line, bomUTF16BE) {
				report(1, nil, "UTF-16 text (it starts with a UTF-16 byte order mark): save the file as UTF-8")
				break
			}
			line = bytes.TrimPrefix(line, bomUTF8)
		}
		if size > MaxLineLen {
			report(n, nil, fmt.Sprintf("line of %d bytes, longer than any item id", size))
			continue
		}
		id := string(bytes.TrimSpace(line))
		if id == "" || strings.HasPrefix(id, "#") || seen[id] {
			continue
		}
		if check != nil {
			if err := check(id); err != nil {
				report(n, err, Reason(err))
				continue
			}
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if bad.Count() > 0 {
		return nil, bad
	}
	return ids, nil
}

// readLine reads the next line into buf, without its "\n", keeping at
// most MaxLineLen+1 bytes of it, and returns its full size. end is true
// when the input has ended before the line began.
func readLine(br *bufio.Reader, buf []byte) (line []byte, size int, end bool, err error) {
	read := 0
	for {
		frag, err := br.ReadSlice('\n')
		read += len(frag)
		frag = bytes.TrimSuffix(frag, []byte("\n"))
		size += len(frag)
		if room := MaxLineLen + 1 - len(buf); room > 0 {
			buf = append(buf, frag[:min(len(frag), room)]...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return buf, size, read == 0, nil
		}
		return buf, size, false, err
	}
}

// Reason says why a check refused an ID: the text of a store.ValidateID
// error without its "store: " prefix, such as
// `invalid item id "a\x01b": control character U+0001 at byte 1`.
func Reason(err error) string {
	var ie *store.IDError
	if errors.As(err, &ie) {
		return fmt.Sprintf("invalid item id %q: %s", ie.ID, ie.Reason)
	}
	return strings.TrimPrefix(err.Error(), "store: ")
}
