package sinks_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/syncd/syncd/sinks"
)

// A ConfigError prints as "<sink>: <field>: <reason>" and unwraps to the
// error its reason wraps.
func TestConfigErrorf(t *testing.T) {
	err := error(sinks.ConfigErrorf("file", "path", "parent directory of %q: %w", "/x/y", fs.ErrNotExist))
	if got, want := err.Error(), `file: path: parent directory of "/x/y": file does not exist`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	var ce *sinks.ConfigError
	if !errors.As(err, &ce) || ce.Sink != "file" || ce.Field != "path" || ce.Entry != "" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %#v; want a *ConfigError for file path wrapping fs.ErrNotExist", err)
	}
	if err := sinks.ConfigErrorf("log", "delay", "must not be negative"); err.Err != nil {
		t.Errorf("Err = %v; want nil without %%w", err.Err)
	}
}
