package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Msg
}

func (e *FieldError) Unwrap() error { return e.Err }

// Errors is every problem found, in line order. Every function of this
// package that fails returns an *Errors with at least one entry.
type Errors struct {
	List []*FieldError
}

// Error prints one problem per line.
func (e *Errors) Error() string { return fmt.Sprint(errors.Join(e.Unwrap()...)) }

// Unwrap returns the entries, so that errors.Is and errors.As look at each.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i, fe := range e.List {
		errs[i] = fe
	}
	return errs
}

// maxErrors bounds the problems reported one by one: a file that is not
// a configuration at all can have one on every line.
const maxErrors = 20

// fail returns the one problem fe as an *Errors.
func fail(fe *FieldError) error { return &Errors{List: []*FieldError{fe}} }

// errorList turns the problems found in one file, and a count of more
// that were not kept, into the error to return: nil when there are none,
// else an *Errors sorted by line with exact repeats dropped, and past
// maxErrors one entry that counts the rest ("and 30 more problems").
// Problems without a line come last.
func errorList(list []*FieldError, dropped int) error {
	if len(list) == 0 {
		return nil
	}
	line := func(e *FieldError) int { return cmp.Or(max(e.Line, 0), math.MaxInt) }
	list = slices.Clone(list)
	slices.SortStableFunc(list, func(a, b *FieldError) int { return cmp.Compare(line(a), line(b)) })
	list = slices.CompactFunc(list, func(a, b *FieldError) bool { return a.Error() == b.Error() })
	if more := max(len(list)-maxErrors, 0) + dropped; more > 0 {
		list = append(list[:min(len(list), maxErrors)], &FieldError{File: list[0].File, Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return &Errors{List: list}
}
