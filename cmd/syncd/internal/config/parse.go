package config

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
	"github.com/syncd/syncd/store"
)

// FieldError is one problem in a configuration file, or in a file it
// names (items.file), at a line: "file:line: field: msg".
type FieldError = yamlstrict.FieldError

// Errors is every problem found, in line order, one per line of its
// text. Every function of this package that fails returns one, but
// Items for bad lines in items.file (an *idlines.Error).
type Errors = yamlstrict.Errors

// File is a loaded, valid configuration file. Its methods turn it into the
// configurations of the libraries.
//
// A File from LoadPartial or ParsePartial may instead hold fields with
// problems: it is only for finding more problems (see LoadPartial).
type File struct {
	name     string
	s        schema
	keys     yamlstrict.Keys   // dotted field -> where it is set, for fields set to a non-null value
	problems yamlstrict.Fields // fields with a load problem; empty for a valid file
}

// Load reads and parses the file at path, named as given in errors.
func Load(path string) (*File, error) {
	return valid(LoadPartial(path))
}

// LoadPartial is Load, but a file with problems also gives its File, as
// far as it loaded, beside the error; nil when nothing loaded (the file
// cannot be read, is not YAML, ...). Such a File is for finding the
// problems that Load's checks cannot see, as syncd validate does, in the
// same run: Store, APIToken, Items and CheckSink skip what reads a field
// with a problem (one left zero by a bad value, or one that broke a rule),
// and Failed says which fields have one. Nothing must run on it.
//
// A file that users other than its owner can write is refused, first of
// its problems, with a *ModeError (secretfile.go), as is one in a
// directory they can write (a *DirError); it is still parsed, so that
// LoadPartial reports the others too.
func LoadPartial(path string) (*File, error) {
	data, mode, err := readConfig(path)
	if err != nil {
		return nil, yamlstrict.One(&FieldError{File: path, Msg: fsReason(err), Err: err})
	}
	f, err := ParsePartial(path, data)
	var first *FieldError
	if me := configModeError(path, mode); me != nil {
		first = &FieldError{File: path, Msg: me.state(), Err: me}
	} else if de := openDir(path, configSecret); de != nil && mode.IsRegular() {
		// As for a secret file: whoever can write the directory can put
		// a file of their own in its place (a second outside trial).
		first = &FieldError{File: path, Msg: de.state(), Err: de}
	}
	if first == nil {
		return f, err
	}
	errs := []*FieldError{first}
	if pe := (*Errors)(nil); errors.As(err, &pe) {
		errs = append(errs, pe.List...)
	}
	return f, &Errors{List: errs}
}

// readConfig reads the file at path, at most one byte more than Parse
// takes, and gives its mode, looked at on the file opened: what is
// checked is what is read, through links.
func readConfig(path string) ([]byte, fs.FileMode, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, 0, err
	}
	data, err := io.ReadAll(io.LimitReader(fh, yamlstrict.MaxFileSize+1)) // Parse refuses more
	return data, fi.Mode(), err
}

// Parse parses and validates data, the contents of the file called name,
// reporting every problem. An empty file is valid: all defaults.
func Parse(name string, data []byte) (*File, error) {
	return valid(ParsePartial(name, data))
}

// ParsePartial is Parse, but a file with problems also gives its File, as
// LoadPartial does.
func ParsePartial(name string, data []byte) (*File, error) {
	f := &File{name: name}
	f.s.Redis.AutoPipeline = store.AutoPipelineDefault // the one default that is not a zero
	d, ok := yamlstrict.Decode(name, data, &f.s, decodeOptions)
	f.keys = d.Keys
	if !ok {
		return nil, d.Err()
	}
	(&parser{d, f}).validate()
	if err := d.Err(); err != nil {
		f.problems = d.Problems
		return f, err
	}
	return f, nil
}

// valid drops a File that has problems.
func valid(f *File, err error) (*File, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Failed reports whether any of fields, or a field inside one, has a
// problem: it did not load, or it broke a rule. Always false for a File
// from Load or Parse.
func (f *File) Failed(fields ...string) bool { return f.problems.Has(fields...) }

// parser validates a decoded file, adding its problems to the decoder's.
type parser struct {
	*yamlstrict.Decoder
	f *File
}

// decodeOptions are the decoder's messages for this schema.
var decodeOptions = yamlstrict.Options{Hints: hints, Show: show, Want: enumWants(),
	TopLevel: "the top level must be a mapping of sections (redis:, engine:, ...)"}

// hints replace "unknown key" for keys people write by mistake.
var hints = map[string]string{
	"redis.password":          "passwords are not written in the configuration file: name an environment variable with password_env or a file with password_file",
	"redis.sentinel_password": "passwords are not written in the configuration file: name an environment variable with sentinel_password_env",
}

// fsReason is a file system error without the operation and path.
func fsReason(err error) string {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
