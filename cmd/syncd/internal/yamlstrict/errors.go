// Package yamlstrict decodes one YAML document into a Go struct, strictly,
// and reports every problem at once with its line and dotted field. It
// knows nothing of syncd's keys: package config gives it the schema (a
// struct with yaml tags), and checks the meaning.
//
// The decoder walks yaml.v3's node tree against the struct and decodes
// each scalar with yaml.v3 (durations included). yaml.v3's strict Decode
// gives a line but not the field, stops at the first problem in a section,
// truncates 1.5 into an int, takes an empty list element as "" and follows
// merge keys; the walk names the field and refuses those. Hostile input is
// bounded: the file's size, the nodes aliases add, the problems kept.
//
// Encode writes such a struct back as YAML (an effective configuration,
// defaults filled in), with a hook for each string, so that a caller can
// hide secrets, and line comments for zero values; Decode reads it back.
package yamlstrict

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// FieldError is one problem in a configuration file, or in a file it
// names (items.file), at a line.
type FieldError struct {
	File  string // as given to Decode, or the path of the named file
	Line  int    // 1-based; 0 when the problem has no line
	Field string // dotted YAML path ("redis.tls.ca_file", "items.ids[2]"); "" for the whole file or an items line
	Msg   string // what is wrong
	Err   error  // the underlying error, if any: a library *ConfigError, a file system error
}

// Error formats e as "file:line: field: msg", without a zero line or an
// empty field.
func (e *FieldError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + oneLine(e.Msg)
}

// oneLine is msg with its control characters escaped as Go escapes them
// in a string (\n, \x1b): an error is one problem a line, and a path or
// value that holds a newline (sink.exec.dir "/tmp/no\ndir" in a stat
// error: a second outside trial) must not break it, or forge a line of
// its own.
func oneLine(msg string) string {
	if !strings.ContainsFunc(msg, unicode.IsControl) {
		return msg
	}
	var b strings.Builder
	for _, r := range msg {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (e *FieldError) Unwrap() error { return e.Err }

// Errors is every problem found, in line order, one per line of its
// text. Decode and List return one.
type Errors struct{ List []*FieldError }

func (e *Errors) Error() string { return fmt.Sprint(errors.Join(e.Unwrap()...)) }

// Unwrap returns the entries, so that errors.Is and errors.As look at each.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i, fe := range e.List {
		errs[i] = fe
	}
	return errs
}

// Bounds on hostile input (a real configuration is a few kilobytes with
// an alias or two; yaml.v3's alias guard lets 1 MiB of aliases through).
const (
	MaxFileSize   = 1 << 20  // the file
	maxAliasNodes = 10000    // the nodes that aliases add once expanded
	MaxErrors     = 20       // the problems reported one by one, then a count
	maxKept       = 1000     // the problems kept; past MaxErrors, they are only counted
	maxBisectSize = 64 << 10 // the file whose syntax error errorLine looks for
)

// One returns the one problem fe as an *Errors.
func One(fe *FieldError) error { return &Errors{List: []*FieldError{fe}} }

// List returns nil or list, and a count of dropped problems, as an
// *Errors sorted by line (no line last), without repeats, past MaxErrors
// a count of the rest.
func List(list []*FieldError, dropped int) error {
	if len(list) == 0 {
		return nil
	}
	line := func(e *FieldError) int { return cmp.Or(max(e.Line, 0), math.MaxInt) }
	list = slices.Clone(list)
	slices.SortStableFunc(list, func(a, b *FieldError) int { return cmp.Compare(line(a), line(b)) })
	list = slices.CompactFunc(list, func(a, b *FieldError) bool { return a.Error() == b.Error() })
	if more := max(len(list)-MaxErrors, 0) + dropped; more > 0 {
		list = append(list[:min(len(list), MaxErrors)], &FieldError{File: list[0].File, Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return &Errors{List: list}
}
