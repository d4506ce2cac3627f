package config

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one problem in a configuration file (or in a file the
// configuration names, such as items.file), at a line.
type FieldError struct {
	// File is the file's name as it was given to Load or Parse, or the
	// path of the named file.
	File string
	// Line is 1-based; 0 when the problem has no line (an unreadable
	// file).
	Line int
	// Field is the dotted YAML path, such as "redis.tls.ca_file" or
	// "items.ids[2]"; "" when the problem is the file as a whole or a line
	// of an items file.
	Field string
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, if any: a library *ConfigError, a
	// *store.IDError, a file system error.
	Err error
}

// Error formats e as "file:line: field: msg", leaving out a zero line and
// an empty field.
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *FieldError) Unwrap() error { return e.Err }

// Errors is every problem found, in line order. Every function of this
// package that fails returns an *Errors with at least one entry.
type Errors struct {
	List []*FieldError
}

// Error prints one problem per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i, fe := range e.List {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the entries, so that errors.Is and errors.As look at each.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i, fe := range e.List {
		errs[i] = fe
	}
	return errs
}

// errorList turns collected problems into the error to return: nil when
// there are none, else an *Errors sorted by line with exact repeats
// dropped. Files keep the order in which they first appear.
func errorList(list []*FieldError) error {
	if len(list) == 0 {
		return nil
	}
	rank := make(map[string]int)
	for _, fe := range list {
		if _, ok := rank[fe.File]; !ok {
			rank[fe.File] = len(rank)
		}
	}
	list = slices.Clone(list)
	slices.SortStableFunc(list, func(a, b *FieldError) int {
		return cmp.Or(cmp.Compare(rank[a.File], rank[b.File]), cmp.Compare(sortLine(a), sortLine(b)))
	})
	list = slices.CompactFunc(list, func(a, b *FieldError) bool { return a.Error() == b.Error() })
	return &Errors{List: list}
}

// sortLine puts the problems without a line after those with one, as a
// summary ("and 30 more invalid lines") reads best last.
func sortLine(e *FieldError) int {
	if e.Line <= 0 {
		return math.MaxInt
	}
	return e.Line
}
