package sinks

import (
	"errors"
	"fmt"
)

// ConfigError is a field of a sink's Config that its Validate finds
// invalid, or that its New cannot set the sink up with. Its text is
// "<sink>: <field>: <reason>", such as "exec: timeout: must not be
// negative, got -1s".
type ConfigError struct {
	Sink  string // the sink's type: "exec", "http", "file" or "log"
	Field string // the field's key in syncd's configuration file: "command", "fail_every"
	// Entry names the element of a list or map field that is wrong: the
	// index of an exec env entry, the name of an http header; "" when the
	// error is about the field as a whole.
	Entry  string
	Reason string
	Err    error // the underlying error, if any
}

func (e *ConfigError) Error() string { return e.Sink + ": " + e.Field + ": " + e.Reason }

func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigErrorf returns a *ConfigError whose reason is formatted as
// fmt.Errorf does, and whose Err is the error that a %w verb wraps.
func ConfigErrorf(sink, field, format string, args ...any) *ConfigError {
	err := fmt.Errorf(format, args...)
	return &ConfigError{Sink: sink, Field: field, Reason: err.Error(), Err: errors.Unwrap(err)}
}
