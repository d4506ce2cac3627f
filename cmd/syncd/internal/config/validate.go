package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	execsink "github.com/syncd/syncd/sinks/exec"
	filesink "github.com/syncd/syncd/sinks/file"
	httpsink "github.com/syncd/syncd/sinks/http"
	logsink "github.com/syncd/syncd/sinks/log"
	"github.com/syncd/syncd/store"
)

// validator checks a decoded file. The rules of each library stay in the
// library: the validator runs the library's Validate and maps the field it
// names back to a key and a line. The rules here are the ones about the
// file itself (which keys go together) and the few no library owns.
type validator struct {
	f    *File
	bad  map[string]bool // fields the decoder could not decode
	errs []*FieldError
}

func (v *validator) run() {
	v.redis()
	v.ownership()
	v.engine()
	v.items()
	v.sink()
	v.http()
	v.log()
}

// errorf reports a problem with field, at the line of the first of field
// and alt that is set, else at the line of field's section.
func (v *validator) errorf(err error, field string, alt []string, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{
		File:  v.f.name,
		Line:  v.f.lineOf(field, alt...),
		Field: field,
		Msg:   fmt.Sprintf(format, args...),
		Err:   err,
	})
}

// skip reports whether any of fields, or anything inside them, failed to
// decode: its value is the default, not what the file says, so rules
// about it would mislead.
func (v *validator) skip(fields ...string) bool {
	for b := range v.bad {
		for _, f := range fields {
			if b == f || strings.HasPrefix(b, f+".") || strings.HasPrefix(b, f+"[") {
				return true
			}
		}
	}
	return false
}

// lineOf returns the line of the first of field and alt that is set, else
// of the nearest enclosing section of field that is set, else 0.
func (f *File) lineOf(field string, alt ...string) int {
	for _, k := range append([]string{field}, alt...) {
		if l, ok := f.lines[k]; ok {
			return l
		}
	}
	for k := field; k != ""; {
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
		if l, ok := f.lines[k]; ok {
			return l
		}
	}
	return 0
}

// isSet reports whether field, or something inside it, is set to a
// non-null value.
func (f *File) isSet(field string) bool {
	_, ok := f.lines[field]
	return ok
}

// maxLibErrors bounds the rounds of a library validator: each round finds
// one bad field, which is then reset to its default so that the next round
// can find the next.
const maxLibErrors = 32

func (v *validator) redis() {
	r := &v.f.s.Redis
	if r.PasswordEnv != "" && r.PasswordFile != "" {
		v.errorf(nil, "redis.password_file", nil, "only one of redis.password_env and redis.password_file may be set")
	}
	if r.SentinelPasswordEnv != "" && r.MasterName == "" && !v.skip("redis.master_name") {
		v.errorf(nil, "redis.sentinel_password_env", nil, "set but redis.master_name is empty: there are no Sentinels")
	}
	t := r.TLS
	if !t.Enabled && !v.skip("redis.tls.enabled") {
		for _, kv := range [][2]string{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"server_name", t.ServerName}} {
			if kv[1] != "" {
				v.errorf(nil, "redis.tls."+kv[0], nil, "set but redis.tls.enabled is false")
			}
		}
	}
	if t.Enabled && (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			v.errorf(nil, "redis.tls.cert_file", []string{"redis.tls.key_file"}, "required with redis.tls.key_file")
		} else {
			v.errorf(nil, "redis.tls.key_file", []string{"redis.tls.cert_file"}, "required with redis.tls.cert_file")
		}
	}

	c := v.f.storeBase()
	c.Addrs = slices.Clone(c.Addrs)
	if t.Enabled || t.InsecureSkipVerify {
		// Only what Validate looks at; Store loads the files.
		c.TLS = &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify}
	}
	var last string
	for range maxLibErrors {
		err := c.Validate()
		if err == nil {
			return
		}
		var ce *store.ConfigError
		if !errors.As(err, &ce) || ce.Field == last {
			v.errorf(err, "redis", nil, "%v", err)
			return
		}
		last = ce.Field
		report := func(field string, alt ...string) {
			if !v.skip(field) {
				v.errorf(ce, field, alt, "%s", ce.Reason)
			}
		}
		switch f := ce.Field; {
		case strings.HasPrefix(f, "addrs["):
			report("redis." + f)
			i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "addrs["), "]"))
			if i < 0 || i >= len(c.Addrs) {
				return
			}
			c.Addrs[i] = "placeholder:6379"
		case f == "addrs":
			report("redis.addrs", "redis.cluster", "redis.master_name")
			c.Cluster, c.MasterName = false, ""
		case f == "master_name":
			report("redis.master_name")
			c.MasterName = ""
		case f == "db":
			report("redis.db")
			c.DB = 0
		case f == "shards":
			report("redis.shards")
			c.Shards = 0
		case f == "tls":
			report("redis.tls.insecure_skip_verify")
			c.TLS = nil
		case f == "timeouts":
			// One rule for three keys: report each that breaks it.
			for _, d := range []struct {
				key string
				val *time.Duration
			}{{"dial_timeout", &c.DialTimeout}, {"read_timeout", &c.ReadTimeout}, {"write_timeout", &c.WriteTimeout}} {
				if *d.val < 0 {
					report("redis." + d.key)
					*d.val = 0
				}
			}
			c.ClusterReload = 0
		case f == "pool_size":
			report("redis.pool_size")
			c.PoolSize = 0
		case f == "key_prefix":
			report("redis.key_prefix")
			c.KeyPrefix = ""
		default:
			report("redis." + f)
			return
		}
	}
}

func (v *validator) ownership() {
	o := v.f.s.Ownership
	if o.MinReplicas > 0 && len(v.f.s.Redis.Addrs) == 0 && !v.skip("redis.addrs") {
		v.errorf(nil, "ownership.min_replicas", nil, "needs redis.addrs: the embedded store has no replicas")
	}
	c := v.f.Ownership()
	var last string
	for range maxLibErrors {
		err := c.Validate()
		if err == nil {
			return
		}
		var ce *ownership.ConfigError
		if !errors.As(err, &ce) || ce.Field == last {
			v.errorf(err, "ownership", nil, "%v", err)
			return
		}
		last = ce.Field
		field := "ownership." + ce.Field
		if !v.skip(field) {
			v.errorf(ce, field, nil, "%s", ce.Reason)
		}
		switch ce.Field {
		case "heartbeat":
			c.Heartbeat = 0
		case "settle":
			c.Settle = 0
		case "min_replicas":
			c.MinReplicas = 0
		case "replica_timeout":
			c.ReplicaTimeout = 0
		default:
			// ttl and margin: the later checks are relative to them, and
			// would measure against a default the file does not say.
			return
		}
	}
}

func (v *validator) engine() {
	c := v.f.Engine()
	c.Ownership = ownership.Config{} // checked on its own above
	var last string
	for range maxLibErrors {
		err := c.Validate()
		if err == nil {
			return
		}
		var ce *engine.ConfigError
		if !errors.As(err, &ce) || ce.Field == last {
			v.errorf(err, "engine", nil, "%v", err)
			return
		}
		last = ce.Field
		field := "engine." + ce.Field
		if !v.skip(field) {
			v.errorf(ce, field, nil, "%s", ce.Reason)
		}
		switch ce.Field {
		case "workers":
			c.Workers = 0
		case "batch":
			c.Batch = 0
		case "max_attempts":
			c.MaxAttempts = 0
		case "interval":
			c.Interval = 0
		case "backoff_min", "backoff_max":
			// Each is checked against the other: reset both.
			c.BackoffMin, c.BackoffMax = 0, 0
		case "drain_timeout":
			c.DrainTimeout = 0
		case "poll":
			c.Poll = 0
		default:
			return
		}
	}
}

func (v *validator) items() {
	for i, id := range v.f.s.Items.IDs {
		if err := store.ValidateID(id); err != nil {
			v.errorf(err, fmt.Sprintf("items.ids[%d]", i), nil, "%s", idReason(err))
		}
	}
}

// idReason is the text of a store.ValidateID error without its package
// prefix.
func idReason(err error) string {
	var ie *store.IDError
	if errors.As(err, &ie) {
		return fmt.Sprintf("invalid item id %q: %s", ie.ID, ie.Reason)
	}
	return strings.TrimPrefix(err.Error(), "store: ")
}

// sink checks sink.type, that only its sub-section is set, and each value
// of that sub-section with the sink package's own Validate. The sink
// validators stop at the first problem and have no rules across fields,
// so each value is validated on its own, with placeholders for the
// required ones: that finds every bad value and knows its key.
func (v *validator) sink() {
	s := &v.f.s.Sink
	typ := v.f.SinkType()
	if !slices.Contains(sinkTypes, typ) {
		if !v.skip("sink.type") {
			v.errorf(nil, "sink.type", nil, "unknown sink type %q (one of: %s)", typ, strings.Join(sinkTypes, ", "))
		}
		return
	}
	for _, other := range sinkTypes {
		if other != typ && v.f.isSet("sink."+other) && !v.bad["sink."+other] {
			if s.Type == "" {
				v.errorf(nil, "sink."+other, nil, "set but sink.type is %s (the default); add sink.type: %s", typ, other)
			} else {
				v.errorf(nil, "sink."+other, nil, "set but sink.type is %s", typ)
			}
		}
	}
	required := func(field string, missing bool) bool {
		if missing && !v.skip(field) {
			v.errorf(nil, field, []string{"sink." + typ, "sink.type"}, "required when sink.type is %s", typ)
		}
		return !missing
	}
	check := func(field string, err error) {
		if err == nil || v.skip(field) {
			return
		}
		// The sink packages prefix errors with "type: key: ".
		key := strings.TrimPrefix(field, "sink."+typ+".")
		if i := strings.IndexAny(key, ".["); i >= 0 {
			key = key[:i]
		}
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), typ+": "), key+": ")
		v.errorf(err, field, nil, "%s", msg)
	}
	switch typ {
	case SinkExec:
		e := s.Exec
		cmd := []string{"placeholder"}
		if required("sink.exec.command", len(e.Command) == 0) {
			check("sink.exec.command", execsink.Config{Command: e.Command}.Validate())
		}
		for i, kv := range e.Env {
			check(fmt.Sprintf("sink.exec.env[%d]", i), execsink.Config{Command: cmd, Env: []string{kv}}.Validate())
		}
		check("sink.exec.timeout", execsink.Config{Command: cmd, Timeout: e.Timeout}.Validate())
		check("sink.exec.grace", execsink.Config{Command: cmd, Grace: e.Grace}.Validate())
	case SinkHTTP:
		h := s.HTTP
		const url = "http://placeholder"
		if required("sink.http.url", h.URL == "") {
			if err := (httpsink.Config{URL: h.URL}).Validate(); err != nil {
				// A URL that does not parse is quoted in the error,
				// password and all.
				check("sink.http.url", errors.New(strings.ReplaceAll(err.Error(), h.URL, redactURL(h.URL))))
			}
		}
		for _, name := range sortedKeys(h.Headers) {
			check("sink.http.headers."+name, httpsink.Config{URL: url, Headers: map[string]string{name: h.Headers[name]}}.Validate())
		}
		check("sink.http.timeout", httpsink.Config{URL: url, Timeout: h.Timeout}.Validate())
	case SinkFile:
		if required("sink.file.path", s.File.Path == "") {
			check("sink.file.path", filesink.Config{Path: s.File.Path}.Validate())
		}
	case SinkLog:
		check("sink.log.delay", logsink.Config{Delay: s.Log.Delay}.Validate())
		check("sink.log.fail_every", logsink.Config{FailEvery: s.Log.FailEvery}.Validate())
	}
}

func (v *validator) http() {
	l := v.f.s.HTTP.Listen
	if l == "" {
		return
	}
	_, port, err := net.SplitHostPort(l)
	if err != nil {
		v.errorf(nil, "http.listen", nil, "%q is not host:port (example: 127.0.0.1:9090)", l)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.errorf(nil, "http.listen", nil, "port %q is not a number from 0 to 65535", port)
	}
}

var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{FormatAuto, FormatJSON, FormatConsole}
)

func (v *validator) log() {
	l := v.f.s.Log
	if l.Level != "" && !slices.Contains(logLevels, l.Level) {
		v.errorf(nil, "log.level", nil, "unknown level %q (one of: %s)", l.Level, strings.Join(logLevels, ", "))
	}
	if l.Format != "" && !slices.Contains(logFormats, l.Format) {
		v.errorf(nil, "log.format", nil, "unknown format %q (one of: %s)", l.Format, strings.Join(logFormats, ", "))
	}
}
