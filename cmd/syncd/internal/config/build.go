package config

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/cmd/syncd/internal/idlines"
	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/internal/redact"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
	filesink "github.com/syncd/syncd/sinks/file"
	httpsink "github.com/syncd/syncd/sinks/http"
	logsink "github.com/syncd/syncd/sinks/log"
	"github.com/syncd/syncd/store"
)

// copyFields copies each field of src to the field of *dst of the same
// name and type, cloning lists and maps: schema sections name their fields
// as the library Configs do (TestSchemaNamesLibraryFields).
func copyFields(dst, src any) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src)
	for i := range d.NumField() {
		df := d.Type().Field(i)
		if sf, ok := s.Type().FieldByName(df.Name); ok && sf.Type == df.Type && df.IsExported() {
			v := s.FieldByIndex(sf.Index)
			switch x := v.Interface().(type) {
			case []string:
				v = reflect.ValueOf(slices.Clone(x))
			case map[string]string:
				v = reflect.ValueOf(maps.Clone(x))
			}
			d.Field(i).Set(v)
		}
	}
}

// storeBase is the store configuration without what Store reads: the
// passwords and the TLS files. InsecureSkipVerify is copied for Validate,
// which refuses it.
func (f *File) storeBase() store.Config {
	var c store.Config
	copyFields(&c, f.s.Redis)
	if t := f.s.Redis.TLS; t.Enabled || t.InsecureSkipVerify {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	return c
}

// reader reads the variables and files the configuration names,
// collecting problems at their keys.
type reader struct {
	f    *File
	env  func(string) (string, bool)
	read func(string) ([]byte, error)
	errs []*FieldError
}

// reader reads through env and readFile, nil for os's.
func (f *File) reader(env func(string) (string, bool), readFile func(string) ([]byte, error)) *reader {
	r := &reader{f: f, env: env, read: readFile}
	if env == nil {
		r.env = os.LookupEnv
	}
	return r
}

// Bounds of the files the config names: a secret is a short line, an
// items file a list of IDs. An attacker's trial pointed
// api_token_file at /dev/urandom (3.9 GB in 10 s), items.file at
// /dev/zero and a token file at a FIFO, which hung validate.
const (
	secretFileMax = 64 << 10
	itemsFileMax  = 1 << 30
)

// readRegular reads the regular file at path, at most max bytes: a
// device, a FIFO (opened without blocking) or a longer file is an error,
// and so is check's error about the file (nil: none), looked at on the
// file opened, so that what is checked is what is read.
func readRegular(path string, max int64, check func(fs.FileInfo) error) ([]byte, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	switch {
	case err != nil:
		return nil, err
	case fi.IsDir():
		return nil, errors.New("is a directory") // as reading one says
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("not a regular file: %s", fileKind(fi.Mode()))
	case fi.Size() > max:
		return nil, fmt.Errorf("%d bytes, more than the %d read", fi.Size(), max)
	}
	if check != nil {
		if err := check(fi); err != nil {
			return nil, err
		}
	}
	b, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("more than the %d bytes read", max)
	}
	return b, err
}

// fileKind names what a file that is not a regular one is, in words: an
// outside trial read a directory's "(d---------)".
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

func (r *reader) bad(err error, field, format string, args ...any) {
	r.errs = append(r.errs, r.f.errorAt(err, field, nil, fmt.Sprintf(format, args...)))
}

// file returns the file at path, at most max bytes, named by field; nil
// for "", an error, or a field with a load problem (reported already).
// A secret or trust file (secretfile.go) that others can write, or
// replace through its directory, is an error; a readFile given to Store
// or APIToken has no modes to check.
func (r *reader) file(field, path string, max int64) []byte {
	if path == "" || r.f.Failed(field) {
		return nil
	}
	read := r.read
	if read == nil {
		replaceable := func(fi fs.FileInfo) error {
			if me := modeError(field, path, fi.Mode()); me != nil && me.Writable() {
				return me
			}
			if de := dirError(field, path); de != nil {
				return de
			}
			return nil
		}
		read = func(path string) ([]byte, error) { return readRegular(path, max, replaceable) }
	}
	b, err := read(path)
	var (
		me *ModeError
		de *DirError
	)
	if errors.As(err, &me) || errors.As(err, &de) {
		r.bad(err, field, "%v", err)
	} else if err != nil {
		r.bad(err, field, "%s: %s", shownPath(path), fsReason(err))
	}
	return b
}

// secret returns the credential in the variable called name, else in the
// file at path without one trailing newline; "" if neither is set, or
// either field has a load problem (reported already: both set, say).
// Unset or empty is an error. Errors never quote the credential.
func (r *reader) secret(envField, name, fileField, path string) string {
	if r.f.Failed(envField) || fileField != "" && r.f.Failed(fileField) {
		return ""
	}
	if name != "" {
		switch v, ok := r.env(name); {
		case !ok:
			r.bad(nil, envField, "environment variable %s is not set", name)
		case v == "":
			r.bad(nil, envField, "environment variable %s is empty", name)
		default:
			return v
		}
		return ""
	}
	b := r.file(fileField, path, secretFileMax)
	if b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r")); b != nil && len(b) == 0 {
		r.bad(nil, fileField, "%s is empty", path)
	}
	return string(b)
}

// Store returns the store configuration, the Logger left for the caller.
// It reads the passwords (redis.password_env, password_file,
// sentinel_password_env) and redis.tls files through env and readFile
// (nil for os.LookupEnv and os.ReadFile). A password, key or CA file
// that others can write, or replace through its directory, is refused
// (secretfile.go).
func (f *File) Store(env func(string) (string, bool), readFile func(string) ([]byte, error)) (store.Config, error) {
	rd, r, c := f.reader(env, readFile), f.s.Redis, f.storeBase()
	c.Password = rd.secret("redis.password_env", r.PasswordEnv, "redis.password_file", r.PasswordFile)
	c.SentinelPassword = rd.secret("redis.sentinel_password_env", r.SentinelPasswordEnv, "", "")
	if t := r.TLS; t.Enabled {
		if pem := rd.file("redis.tls.ca_file", t.CAFile, secretFileMax); pem != nil {
			c.TLS.RootCAs = x509.NewCertPool()
			if !c.TLS.RootCAs.AppendCertsFromPEM(pem) {
				rd.bad(nil, "redis.tls.ca_file", "%s: no PEM certificate found", t.CAFile)
			}
		}
		// Parse checked that cert_file and key_file are set together.
		if cert, key := rd.file("redis.tls.cert_file", t.CertFile, secretFileMax), rd.file("redis.tls.key_file", t.KeyFile, secretFileMax); cert != nil && key != nil {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				rd.bad(err, "redis.tls.cert_file", "%s with key %s: %v", t.CertFile, t.KeyFile, err)
			}
			c.TLS.Certificates = []tls.Certificate{pair}
		}
	}
	if err := yamlstrict.List(rd.errs, 0); err != nil {
		return store.Config{}, err
	}
	return c, nil
}

// APIToken returns the HTTP API's bearer token from http.api_token_env or
// api_token_file, read as Store reads passwords (a file others can write
// or replace is refused); "" when neither is set: the API is off. A token
// api.CheckToken refuses is an error.
func (f *File) APIToken(env func(string) (string, bool), readFile func(string) ([]byte, error)) (string, error) {
	rd, h := f.reader(env, readFile), f.s.HTTP
	token := rd.secret("http.api_token_env", h.APITokenEnv, "http.api_token_file", h.APITokenFile)
	field := "http.api_token_env"
	if h.APITokenEnv == "" {
		field = "http.api_token_file"
	}
	if err := api.CheckToken(token); err != nil && len(rd.errs) == 0 && token != "" {
		rd.bad(err, field, "%v", err)
	}
	if err := yamlstrict.List(rd.errs, 0); err != nil {
		return "", err
	}
	return token, nil
}

// Ownership returns the ownership configuration, the Logger left for the
// caller.
func (f *File) Ownership() ownership.Config {
	var c ownership.Config
	copyFields(&c, f.s.Ownership)
	c.Owner.Host = f.s.Ownership.Owner
	return c
}

// margin is the lease margin in force, and the error of a bad ttl or margin.
func (f *File) margin() (time.Duration, error) {
	c := ownership.Config{TTL: f.s.Ownership.TTL, Margin: f.s.Ownership.Margin}
	return c.WithDefaults().Margin, c.Validate()
}

// Engine returns the engine configuration, with Ownership(), the Logger
// left for the caller.
func (f *File) Engine() engine.Config {
	c := engine.Config{Ownership: f.Ownership()}
	copyFields(&c, f.s.Engine)
	copyFields(&c.Target, f.s.Target)
	copyFields(&c.Target.Breaker, f.s.Target.Breaker)
	copyFields(&c.Items, f.s.Items)
	c.Target.Rate, _ = engine.ParseRate(f.s.Target.Rate) // a bad rate is reported at target.rate
	return c
}

// Items returns items.ids, then the lines of items.file read through
// readFile (nil for os.ReadFile) as `syncd items --file` reads them
// (package idlines), each ID once. Bad lines are reported as idlines
// reports them, in an *idlines.Error: "path:line: reason" each.
func (f *File) Items(readFile func(string) ([]byte, error)) ([]string, error) {
	rd, ids := f.reader(nil, readFile), slices.Clone(f.s.Items.IDs)
	if path := f.s.Items.File; path != "" {
		data := rd.file("items.file", path, itemsFileMax)
		if len(rd.errs) > 0 {
			return nil, yamlstrict.One(rd.errs[0])
		}
		more, err := idlines.Parse(path, bytes.NewReader(data), store.ValidateID)
		if err != nil {
			return nil, err
		}
		ids = append(ids, more...)
	}
	seen := make(map[string]bool, len(ids))
	return slices.DeleteFunc(ids, func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	}), nil
}

// ItemsCommand returns items.command and its timeout (default 1m); nil
// when none is set.
func (f *File) ItemsCommand() ([]string, time.Duration) {
	return slices.Clone(f.s.Items.Command), cmp.Or(f.s.Items.CommandTimeout, time.Minute)
}

// ItemsFile returns items.file, "" when none is set.
func (f *File) ItemsFile() string { return f.s.Items.File }

// SinkConfig is the configured sink's type and configuration; the other
// types' are zero.
type SinkConfig struct {
	Type string // SinkLog, SinkExec, SinkHTTP or SinkFile
	Exec execsink.Config
	HTTP httpsink.Config
	File filesink.Config
	Log  logsink.Config
}

// SinkType returns sink.type, SinkLog when it is not set.
func (f *File) SinkType() string { return cmp.Or(f.s.Sink.Type, SinkLog) }

// Sink returns the sink's configuration. An exec sink's grace, when not
// set, is the less of execsink.GraceDefault and half the lease margin:
// see the sink.exec.grace rule.
func (f *File) Sink() SinkConfig {
	c := SinkConfig{Type: f.SinkType()}
	copyFields(&c.Exec, f.s.Sink.Exec)
	for status, class := range f.s.Sink.Exec.ExitCodes {
		n, err := strconv.Atoi(status)
		if cl, cerr := sinks.ParseClass(class); err == nil && cerr == nil { // else reported at sink.exec.exit_codes.<status>
			if c.Exec.ExitCodes == nil {
				c.Exec.ExitCodes = map[int]sinks.Class{}
			}
			c.Exec.ExitCodes[n] = cl
		}
	}
	copyFields(&c.HTTP, f.s.Sink.HTTP)
	copyFields(&c.File, f.s.Sink.File)
	copyFields(&c.Log, f.s.Sink.Log)
	if margin, err := f.margin(); c.Type == SinkExec && c.Exec.Grace == 0 && err == nil { // a bad ttl or margin is reported at its key
		c.Exec.Grace = min(execsink.GraceDefault, margin/2)
	}
	return c
}

// BuildSink builds the configured sink, which logs through logger and
// the caller closes. The exec sink looks its command up, the file sink
// opens its file: errors name the key.
func (f *File) BuildSink(logger zerolog.Logger) (sinks.Sink, error) {
	c := f.Sink()
	var (
		s   sinks.Sink
		err error
	)
	switch c.Type {
	case SinkExec:
		s, err = asSink(execsink.New(c.Exec, logger))
	case SinkHTTP:
		s, err = asSink(httpsink.New(c.HTTP, logger))
	case SinkFile:
		s, err = asSink(filesink.New(c.File, logger))
	default:
		s, err = asSink(logsink.New(c.Log, logger))
	}
	if err == nil {
		return s, nil
	}
	return nil, f.sinkError(c.Type, err)
}

// CheckSink checks the sink as BuildSink would build it, offline and
// without side effects: the file sink's file is not created, only its
// directory looked at; every other sink is built and closed (the exec
// sink finds its program, the http sink checks its URL and TLS files).
// On a File with problems (LoadPartial) it checks nothing when sink.type
// has one, and drops an error about a field that has one: the sink's
// Validate finding again what Load reported.
func (f *File) CheckSink() error {
	if f.Failed("sink.type") {
		return nil
	}
	err := f.checkSink()
	if fe := (*FieldError)(nil); errors.As(err, &fe) && f.Failed(fe.Field) {
		return nil
	}
	return err
}

func (f *File) checkSink() error {
	c := f.Sink()
	if c.Type == SinkFile {
		if err := filesink.CheckPath(c.File.Path); err != nil {
			return f.sinkError(c.Type, err)
		}
		return nil
	}
	s, err := f.BuildSink(zerolog.Nop())
	if err != nil {
		return err
	}
	return s.Close()
}

// sinkError names the key a sink's error is about.
func (f *File) sinkError(typ string, err error) error {
	field, msg := libField(err)
	if field == "" {
		field, msg = "sink."+typ, strings.TrimPrefix(msg, typ+": ")
	}
	return yamlstrict.One(f.errorAt(err, field, []string{"sink.type"}, redact.URLs(f.scrub(field, msg), redact.Mask)))
}

// asSink returns s, or a nil sinks.Sink (not a nil *exec.Sink) on error.
func asSink[S sinks.Sink](s S, err error) (sinks.Sink, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Listen returns http.listen, the HTTP server's address; "" for none.
func (f *File) Listen() string { return f.s.HTTP.Listen }

// LogLevel returns log.level, zerolog.InfoLevel when it is not set.
func (f *File) LogLevel() zerolog.Level {
	l, _ := zerolog.ParseLevel(cmp.Or(f.s.Log.Level, logLevelDefault)) // Parse refused another
	return l
}

// LogFormat returns log.format, FormatAuto when it is not set.
func (f *File) LogFormat() string { return cmp.Or(f.s.Log.Format, FormatAuto) }
