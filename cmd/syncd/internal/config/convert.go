package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
	filesink "github.com/syncd/syncd/sinks/file"
	httpsink "github.com/syncd/syncd/sinks/http"
	logsink "github.com/syncd/syncd/sinks/log"
	"github.com/syncd/syncd/store"
)

// storeBase is the store configuration without what Store has to read:
// the passwords and the TLS configuration.
func (f *File) storeBase() store.Config {
	r := f.s.Redis
	return store.Config{
		Addrs:          slices.Clone(r.Addrs),
		MasterName:     r.MasterName,
		Cluster:        r.Cluster,
		Username:       r.Username,
		DB:             r.DB,
		KeyPrefix:      r.KeyPrefix,
		Shards:         r.Shards,
		RefuseEviction: r.RefuseEviction,
		DialTimeout:    r.DialTimeout,
		ReadTimeout:    r.ReadTimeout,
		WriteTimeout:   r.WriteTimeout,
		PoolSize:       r.PoolSize,
	}
}

// Store returns the store configuration. It reads the passwords named by
// redis.password_env, redis.password_file and redis.sentinel_password_env
// through env and readFile, and the files of redis.tls; nil env and
// readFile mean os.LookupEnv and os.ReadFile. A named variable that is
// unset or empty, or a password file that is empty, is an error; one
// trailing newline is trimmed from a password file. Errors never quote a
// password. The Logger is left for the caller to set.
func (f *File) Store(env func(string) (string, bool), readFile func(string) ([]byte, error)) (store.Config, error) {
	if env == nil {
		env = os.LookupEnv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	r := f.s.Redis
	c := f.storeBase()
	var errs []*FieldError
	bad := func(field string, err error, format string, args ...any) {
		errs = append(errs, &FieldError{File: f.name, Line: f.lineOf(field), Field: field, Msg: fmt.Sprintf(format, args...), Err: err})
	}
	fromEnv := func(field, name string) string {
		if name == "" {
			return ""
		}
		switch v, ok := env(name); {
		case !ok:
			bad(field, nil, "environment variable %s is not set", name)
		case v == "":
			bad(field, nil, "environment variable %s is empty", name)
		default:
			return v
		}
		return ""
	}
	read := func(field, path string) []byte {
		b, err := readFile(path)
		if err != nil {
			bad(field, err, "%s: %s", path, fsReason(err))
			return nil
		}
		return b
	}
	c.Password = fromEnv("redis.password_env", r.PasswordEnv)
	if r.PasswordFile != "" {
		if b := read("redis.password_file", r.PasswordFile); b != nil {
			b = bytes.TrimSuffix(b, []byte("\n"))
			b = bytes.TrimSuffix(b, []byte("\r"))
			if len(b) == 0 {
				bad("redis.password_file", nil, "%s is empty", r.PasswordFile)
			}
			c.Password = string(b)
		}
	}
	c.SentinelPassword = fromEnv("redis.sentinel_password_env", r.SentinelPasswordEnv)

	if t := r.TLS; t.Enabled {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
		if t.CAFile != "" {
			if pem := read("redis.tls.ca_file", t.CAFile); pem != nil {
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					bad("redis.tls.ca_file", nil, "%s: no PEM certificate found", t.CAFile)
				}
				c.TLS.RootCAs = pool
			}
		}
		if t.CertFile != "" && t.KeyFile != "" {
			cert, key := read("redis.tls.cert_file", t.CertFile), read("redis.tls.key_file", t.KeyFile)
			if cert != nil && key != nil {
				pair, err := tls.X509KeyPair(cert, key)
				if err != nil {
					bad("redis.tls.cert_file", err, "%s with key %s: %v", t.CertFile, t.KeyFile, err)
				}
				c.TLS.Certificates = []tls.Certificate{pair}
			}
		}
	}
	if err := errorList(errs); err != nil {
		return store.Config{}, err
	}
	return c, nil
}

// Ownership returns the ownership configuration: the timing of the claim
// protocol and the host name to write in records. The Logger is left for
// the caller to set.
func (f *File) Ownership() ownership.Config {
	o := f.s.Ownership
	return ownership.Config{
		TTL:            o.TTL,
		Heartbeat:      o.Heartbeat,
		Settle:         o.Settle,
		Margin:         o.Margin,
		MinReplicas:    o.MinReplicas,
		ReplicaTimeout: o.ReplicaTimeout,
		Owner:          store.Owner{Host: o.Owner},
	}
}

// Engine returns the engine configuration, with Ownership() in its
// Ownership field. The Logger is left for the caller to set.
func (f *File) Engine() engine.Config {
	e := f.s.Engine
	return engine.Config{
		Workers:      e.Workers,
		Interval:     e.Interval,
		Batch:        e.Batch,
		MaxAttempts:  e.MaxAttempts,
		BackoffMin:   e.BackoffMin,
		BackoffMax:   e.BackoffMax,
		DrainTimeout: e.DrainTimeout,
		Poll:         e.Poll,
		Ownership:    f.Ownership(),
	}
}

// maxItemErrors bounds the bad lines of an items file that are reported
// one by one: a file that is not an items file at all fails on every line.
const maxItemErrors = 20

// Items returns the item IDs: items.ids, then the lines of items.file read
// through readFile (nil means os.ReadFile). In the file, each line holds
// one ID with surrounding white space trimmed; blank lines and lines
// starting with # are skipped. Repeated IDs are kept once, at their first
// place. A bad line is reported as "items.txt:3: invalid item id ...".
func (f *File) Items(readFile func(string) ([]byte, error)) ([]string, error) {
	if readFile == nil {
		readFile = os.ReadFile
	}
	ids := slices.Clone(f.s.Items.IDs)
	if path := f.s.Items.File; path != "" {
		data, err := readFile(path)
		if err != nil {
			return nil, errorList([]*FieldError{{File: f.name, Line: f.lineOf("items.file"), Field: "items.file", Msg: fmt.Sprintf("%s: %s", path, fsReason(err)), Err: err}})
		}
		var errs []*FieldError
		more := 0
		for i, line := range strings.Split(string(data), "\n") {
			id := strings.TrimSpace(line)
			if id == "" || strings.HasPrefix(id, "#") {
				continue
			}
			if err := store.ValidateID(id); err != nil {
				if len(errs) == maxItemErrors {
					more++
					continue
				}
				errs = append(errs, &FieldError{File: path, Line: i + 1, Msg: idReason(err), Err: err})
				continue
			}
			ids = append(ids, id)
		}
		if more > 0 {
			errs = append(errs, &FieldError{File: path, Line: 0, Msg: fmt.Sprintf("and %d more invalid lines", more)})
		}
		if err := errorList(errs); err != nil {
			return nil, err
		}
	}
	seen := make(map[string]bool, len(ids))
	return slices.DeleteFunc(ids, func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	}), nil
}

// SinkConfig is what it takes to build the configured sink: its type and
// the configuration of that type. The configurations of the other types
// are zero.
type SinkConfig struct {
	Type string // SinkLog, SinkExec, SinkHTTP or SinkFile
	Exec execsink.Config
	HTTP httpsink.Config
	File filesink.Config
	Log  logsink.Config
}

// SinkType returns sink.type, SinkLog when it is not set.
func (f *File) SinkType() string {
	if f.s.Sink.Type == "" {
		return SinkLog
	}
	return f.s.Sink.Type
}

// Sink returns the configuration of the sink.
func (f *File) Sink() SinkConfig {
	s := f.s.Sink
	c := SinkConfig{Type: f.SinkType()}
	switch c.Type {
	case SinkExec:
		c.Exec = execsink.Config{
			Command: slices.Clone(s.Exec.Command),
			Env:     slices.Clone(s.Exec.Env),
			Dir:     s.Exec.Dir,
			Timeout: s.Exec.Timeout,
			Grace:   s.Exec.Grace,
		}
	case SinkHTTP:
		var h map[string]string
		if len(s.HTTP.Headers) > 0 {
			h = make(map[string]string, len(s.HTTP.Headers))
			for k, v := range s.HTTP.Headers {
				h[k] = v
			}
		}
		c.HTTP = httpsink.Config{URL: s.HTTP.URL, Headers: h, Timeout: s.HTTP.Timeout}
	case SinkFile:
		c.File = filesink.Config{Path: s.File.Path}
	case SinkLog:
		c.Log = logsink.Config{Delay: s.Log.Delay, FailEvery: s.Log.FailEvery}
	}
	return c
}

// BuildSink builds the configured sink, which logs through logger. This is
// where the sink touches the system: the exec sink looks its command up
// (a command that does not exist is an error naming sink.exec.command) and
// the file sink opens its file. The caller closes the sink.
func (f *File) BuildSink(logger zerolog.Logger) (sinks.Sink, error) {
	c := f.Sink()
	var (
		s   sinks.Sink
		err error
	)
	// Assign only on success: a nil *exec.Sink in a sinks.Sink is not nil.
	switch c.Type {
	case SinkExec:
		var x *execsink.Sink
		if x, err = execsink.New(c.Exec, logger); err == nil {
			s = x
		}
	case SinkHTTP:
		var x *httpsink.Sink
		if x, err = httpsink.New(c.HTTP, logger); err == nil {
			s = x
		}
	case SinkFile:
		var x *filesink.Sink
		if x, err = filesink.New(c.File, logger); err == nil {
			s = x
		}
	case SinkLog:
		var x *logsink.Sink
		if x, err = logsink.New(c.Log, logger); err == nil {
			s = x
		}
	default:
		err = fmt.Errorf("unknown sink type %q", c.Type)
	}
	if err != nil {
		// The sink packages prefix errors with "type: key: "; name the
		// key in full and point at its line.
		field := "sink." + c.Type
		msg := strings.TrimPrefix(err.Error(), c.Type+": ")
		if key, rest, ok := strings.Cut(msg, ": "); ok && f.isKey(field+"."+key) {
			field, msg = field+"."+key, rest
		}
		if c.Type == SinkHTTP {
			msg = strings.ReplaceAll(msg, c.HTTP.URL, redactURL(c.HTTP.URL))
		}
		return nil, errorList([]*FieldError{{File: f.name, Line: f.lineOf(field, "sink.type"), Field: field, Msg: msg, Err: err}})
	}
	return s, nil
}

// isKey reports whether the dotted field is a key of the schema.
func (f *File) isKey(field string) bool {
	return slices.Contains(schemaKeys(), field)
}

// Listen returns http.listen: the address of the HTTP server, "" for none.
func (f *File) Listen() string { return f.s.HTTP.Listen }

// LogLevel returns log.level, zerolog.InfoLevel when it is not set.
func (f *File) LogLevel() zerolog.Level {
	switch f.s.Log.Level {
	case "debug":
		return zerolog.DebugLevel
	case "warn":
		return zerolog.WarnLevel
	case "error":
		return zerolog.ErrorLevel
	default:
		return zerolog.InfoLevel
	}
}

// LogFormat returns log.format: FormatAuto (the default), FormatJSON or
// FormatConsole.
func (f *File) LogFormat() string {
	if f.s.Log.Format == "" {
		return FormatAuto
	}
	return f.s.Log.Format
}
