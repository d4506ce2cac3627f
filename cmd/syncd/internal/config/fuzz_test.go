package config

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics, that every error is an *Errors
// of complete entries, and that every accepted file converts to library
// configurations that validate, gives http.allowed_hosts in the form it
// checks, and redacts to a file that parses back to the same. A refused
// file's partial File (ParsePartial) takes the checks that read files
// without a panic, and they report nothing about a field Parse reported.
func FuzzParse(f *testing.F) {
	f.Add([]byte(yamlText(fullConfig)))
	env := func(string) (string, bool) { return "pw", true }
	noFiles := func(name string) ([]byte, error) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			var errs *Errors
			if !errors.As(err, &errs) || len(errs.List) == 0 {
				t.Fatalf("error is not a non-empty *Errors: %#v", err)
			}
			for _, fe := range errs.List {
				if fe.File != "fuzz.yaml" || fe.Msg == "" || fe.Line < 0 {
					t.Fatalf("incomplete FieldError %#v", fe)
				}
			}
			partial, perr := ParsePartial("fuzz.yaml", data)
			if perr == nil || perr.Error() != err.Error() {
				t.Fatalf("ParsePartial error %v; want Parse's %v", perr, err)
			}
			if partial != nil {
				checkPartial(t, partial, env, noFiles)
			}
			return
		}

		if st, err := cfg.Store(env, noFiles); err == nil {
			if err := st.Validate(); err != nil {
				t.Fatalf("accepted, but Store() does not validate: %v", err)
			}
		}
		if err := cfg.Engine().Validate(); err != nil {
			t.Fatalf("accepted, but Engine() does not validate: %v", err)
		}
		sc := cfg.Sink()
		var serr error
		switch sc.Type {
		case SinkExec:
			serr = sc.Exec.Validate()
		case SinkHTTP:
			serr = sc.HTTP.Validate()
		case SinkFile:
			serr = sc.File.Validate()
		case SinkLog:
			serr = sc.Log.Validate()
		default:
			t.Fatalf("accepted sink type %q", sc.Type)
		}
		if serr != nil {
			t.Fatalf("accepted, but the %s sink does not validate: %v", sc.Type, serr)
		}
		_, _ = cfg.Items(func(string) ([]byte, error) { return []byte("a\n\x01\n#c\n"), nil })
		_, _, _ = cfg.Listen(), cfg.LogLevel(), cfg.LogFormat()
		for _, h := range cfg.AllowedHosts() { // as the guard matches them: already in their own form
			if n, err := allowedHost(h); n != h || err != nil {
				t.Fatalf("AllowedHosts entry %q checks as %q, %v", h, n, err)
			}
		}

		red, err := cfg.Redacted()
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse("fuzz.yaml", red)
		if err != nil {
			t.Fatalf("Redacted output does not parse:\n%v\n%s", err, red)
		}
		red2, err := again.Redacted()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(red2), string(red)); diff != "" {
			t.Fatalf("Redacted of Redacted (-got +want):\n%s", diff)
		}
	})
}

// checkPartial runs the checks that read files on f, a File with
// problems: none may report a field with one.
func checkPartial(t *testing.T, f *File, env func(string) (string, bool), readFile func(string) ([]byte, error)) {
	t.Helper()
	_, serr := f.Store(env, readFile)
	_, terr := f.APIToken(env, readFile)
	_, _ = f.Items(func(string) ([]byte, error) { return []byte("a\n\x01\n"), nil })
	for _, err := range []error{serr, terr, f.CheckSink()} {
		var errs *Errors
		if err == nil {
			continue
		} else if !errors.As(err, &errs) {
			t.Fatalf("error is not an *Errors: %#v", err)
		}
		for _, fe := range errs.List {
			if f.Failed(fe.Field) {
				t.Fatalf("%v: a field Parse reported already", fe)
			}
		}
	}
}
