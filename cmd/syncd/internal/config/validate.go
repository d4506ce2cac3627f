package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/syncd/syncd/cmd/syncd/internal/idlines"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// validate checks the decoded file. The rules of each library stay in the
// library: validate runs the library's Validate, which reports every bad
// field, and maps each field back to a key and a line. The rules here are
// the ones about the file itself (which keys go together, explicit zeros)
// and the few no library owns (sink.exec.grace against the lease margin).
func (p *parser) validate() {
	p.redis()
	p.ownership()
	p.engine()
	p.explicitZeros()
	p.items()
	p.sink()
	p.grace()
	p.http()
	p.log()
}

// report adds a problem with field, at errorAt's line. The value of
// field, where msg quotes it, is cut and redacted.
func (p *parser) report(err error, field string, alt []string, format string, args ...any) {
	p.add(p.f.errorAt(err, field, alt, p.f.scrub(field, fmt.Sprintf(format, args...))))
}

// errorAt is the problem msg with field, at the line of the first of field
// and alt that is set, else at the line of field's section.
func (f *File) errorAt(err error, field string, alt []string, msg string) *FieldError {
	return &FieldError{File: f.name, Line: f.lineOf(field, alt...), Field: field, Msg: msg, Err: err}
}

// skip reports whether any of fields, or anything inside them, failed to
// decode: its value is the default, not what the file says, so rules
// about it would mislead.
func (p *parser) skip(fields ...string) bool {
	for b := range p.bad {
		for _, f := range fields {
			if b == "" || b == f || strings.HasPrefix(b, f+".") || strings.HasPrefix(b, f+"[") {
				return true
			}
		}
	}
	return false
}

// lineOf returns the line of the first of field and alt that is set, else
// of the nearest enclosing section of field that is set, else 0.
func (f *File) lineOf(field string, alt ...string) int {
	keys := append([]string{field}, alt...)
	for k := parent(field); k != ""; k = parent(k) {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if k, ok := f.keys[k]; ok {
			return k.line
		}
	}
	return 0
}

// isSet reports whether field is set to a non-null value.
func (f *File) isSet(field string) bool {
	_, ok := f.keys[field]
	return ok
}

// scrub cuts and redacts the value of field where msg quotes it.
func (f *File) scrub(field, msg string) string {
	k, ok := f.keys[field]
	if !ok || k.val.Kind != yaml.ScalarNode {
		return msg
	}
	raw := k.val.Value
	msg = strings.ReplaceAll(msg, strconv.Quote(raw), show(raw))
	return strings.ReplaceAll(msg, raw, redactValue(raw))
}

// libErrors reports the errors of a library's Validate, each a *E (the
// library's *ConfigError) at the field that name gives it, unless that
// field did not decode; anything else at the section.
func libErrors[E error](p *parser, section string, err error, name func(E) (field, reason string)) {
	for _, err := range unjoin(err) {
		var ce E
		if !errors.As(err, &ce) {
			p.report(err, section, nil, "%v", err)
			continue
		}
		if field, reason := name(ce); !p.skip(field) {
			alt := map[string][]string{"redis.addrs": {"redis.cluster", "redis.master_name"}}[field]
			p.report(ce, field, alt, "%s", reason)
		}
	}
}

func (p *parser) redis() {
	r := &p.f.s.Redis
	if r.PasswordEnv != "" && r.PasswordFile != "" {
		p.report(nil, "redis.password_file", nil, "only one of redis.password_env and redis.password_file may be set")
	}
	if r.SentinelPasswordEnv != "" && r.MasterName == "" && !p.skip("redis.master_name") {
		p.report(nil, "redis.sentinel_password_env", nil, "set but redis.master_name is empty: there are no Sentinels")
	}
	t := r.TLS
	if !t.Enabled && !p.skip("redis.tls.enabled") {
		for _, kv := range [][2]string{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"server_name", t.ServerName}} {
			if kv[1] != "" {
				p.report(nil, "redis.tls."+kv[0], nil, "set but redis.tls.enabled is false")
			}
		}
	}
	if t.Enabled && (t.CertFile == "") != (t.KeyFile == "") {
		missing, other := "cert_file", "key_file"
		if t.KeyFile == "" {
			missing, other = other, missing
		}
		p.report(nil, "redis.tls."+missing, []string{"redis.tls." + other}, "required with redis.tls.%s", other)
	}
	c := p.f.storeBase()
	if t.Enabled || t.InsecureSkipVerify {
		c.TLS = &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify} // only what Validate looks at
	}
	libErrors(p, "redis", c.Validate(), func(e *store.ConfigError) (string, string) {
		if e.Field == "tls" {
			return "redis.tls.insecure_skip_verify", e.Reason
		}
		return "redis." + e.Field, e.Reason
	})
}

func (p *parser) ownership() {
	if p.f.s.Ownership.MinReplicas > 0 && len(p.f.s.Redis.Addrs) == 0 && !p.skip("redis.addrs") {
		p.report(nil, "ownership.min_replicas", nil, "needs redis.addrs: the embedded store has no replicas")
	}
	libErrors(p, "ownership", p.f.Ownership().Validate(), func(e *ownership.ConfigError) (string, string) {
		return "ownership." + e.Field, e.Reason
	})
}

func (p *parser) engine() {
	c := p.f.Engine()
	c.Ownership = ownership.Config{} // checked on its own above
	if _, err := engine.ParseRate(p.f.s.Target.Rate); err != nil && !p.skip("target.rate") {
		p.report(err, "target.rate", nil, "%v", err)
	}
	libErrors(p, "engine", c.Validate(), func(e *engine.ConfigError) (string, string) {
		if strings.HasPrefix(e.Field, "target.") || strings.HasPrefix(e.Field, "items.") {
			return e.Field, e.Reason
		}
		return "engine." + e.Field, e.Reason
	})
}

// explicitZeros reports keys set to a zero value where zero is not the
// default. The libraries read a zero as "the default", so without this
// `workers: 0` would quietly run 4 workers: an explicit value out of
// range is an error, and only a key left out takes the default.
func (p *parser) explicitZeros() {
	var walk func(file, eff reflect.Value, path string)
	walk = func(file, eff reflect.Value, path string) {
		for i := range file.NumField() {
			field := join(path, file.Type().Field(i).Tag.Get("yaml"))
			fv, ev := file.Field(i), eff.Field(i)
			switch {
			case fv.Kind() == reflect.Struct:
				walk(fv, ev, field)
			case p.f.isSet(field) && fv.IsZero() && !ev.IsZero() && !p.skip(field):
				p.report(nil, field, nil, "%s is not allowed: leave the key out for the default (%s)", valueText(fv), valueText(ev))
			}
		}
	}
	walk(reflect.ValueOf(p.f.s), reflect.ValueOf(p.f.effective()), "")
}

// valueText is a scalar field's value as the file would write it.
func valueText(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return formatDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.String:
		return show(v.String())
	}
	return fmt.Sprint(v.Interface())
}

func (p *parser) items() {
	for i, id := range p.f.s.Items.IDs {
		field := fmt.Sprintf("items.ids[%d]", i)
		if err := store.ValidateID(id); err != nil && !p.skip(field) {
			p.report(err, field, nil, "%s", idlines.Reason(err))
		}
	}
}

// sink checks sink.type and that only its sub-section is set, then runs
// the sink's own Validate and reports each error at its key.
func (p *parser) sink() {
	typ := p.f.SinkType()
	if !slices.Contains(sinkTypes, typ) {
		if !p.skip("sink.type") {
			p.report(nil, "sink.type", nil, "unknown sink type %s (one of: %s)", show(typ), strings.Join(sinkTypes, ", "))
		}
		return
	}
	for _, other := range sinkTypes {
		switch {
		case other == typ || !p.f.isSet("sink."+other) || p.bad["sink."+other]:
		case p.f.s.Sink.Type == "":
			p.report(nil, "sink."+other, nil, "set but sink.type is %s (the default); add sink.type: %s", typ, other)
		default:
			p.report(nil, "sink."+other, nil, "set but sink.type is %s", typ)
		}
	}
	for status, class := range p.f.s.Sink.Exec.ExitCodes {
		field := "sink.exec.exit_codes." + status
		if _, err := strconv.Atoi(status); err != nil && !p.skip(field) {
			p.report(err, field, nil, "%s is not an exit status: want a number from 1 to 255", show(status))
		} else if _, err := sinks.ParseClass(class); err != nil && !p.skip(field) {
			p.report(err, field, nil, "%v", err)
		}
	}
	c := p.f.sinkConfig()
	validate := map[string]func() error{SinkExec: c.Exec.Validate, SinkHTTP: c.HTTP.Validate, SinkFile: c.File.Validate, SinkLog: c.Log.Validate}
	for _, err := range unjoin(validate[typ]()) {
		field, reason := sinkField(typ, err)
		switch {
		case p.skip(field):
		case reason == "must not be empty" && !p.f.isSet(field):
			p.report(err, field, []string{"sink." + typ, "sink.type"}, "required when sink.type is %s", typ)
		default:
			p.report(err, field, nil, "%s", redactURLs(reason))
		}
	}
}

// sinkField returns the field that a sink's error is about, the entry of
// a list or map where it names one, and the reason; sink.<typ> and the
// whole text for an error that is not a *sinks.ConfigError.
func sinkField(typ string, err error) (field, reason string) {
	var ce *sinks.ConfigError
	if !errors.As(err, &ce) {
		return "sink." + typ, strings.TrimPrefix(err.Error(), typ+": ")
	}
	field = "sink." + ce.Sink + "." + ce.Field
	switch {
	case ce.Entry == "":
	case ce.Field == "env":
		field += "[" + ce.Entry + "]"
	default:
		field += "." + keyName(ce.Entry)
	}
	return field, ce.Reason
}

// unjoin returns the errors joined in err.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	} else if err != nil {
		return []error{err}
	}
	return nil
}

// grace checks sink.exec.grace against the lease margin. When a lease's
// trust window closes the engine cancels the sync, and the exec sink
// sends its command SIGTERM and, grace later, SIGKILL. The claim can
// expire in Redis, and another worker take the item, margin after the
// window closed: a grace that long lets two commands run for one item.
// The default grace is kept below the margin (see Sink).
func (p *parser) grace() {
	m, err := p.f.margin()
	if p.f.SinkType() != SinkExec || !p.f.isSet("sink.exec.grace") || err != nil ||
		p.skip("sink.exec.grace", "ownership.ttl", "ownership.margin") {
		return
	}
	if g := p.f.s.Sink.Exec.Grace; g >= m {
		p.report(nil, "sink.exec.grace", nil, "%s must be below ownership.margin (%s): a command is sent SIGTERM when "+
			"its lease's trust window closes and SIGKILL grace later, and must be dead before the claim can expire, "+
			"margin later, and another worker take the item", formatDuration(g), formatDuration(m))
	}
}

func (p *parser) http() {
	h := p.f.s.HTTP
	if h.APITokenEnv != "" && h.APITokenFile != "" {
		p.report(nil, "http.api_token_file", nil, "only one of http.api_token_env and http.api_token_file may be set")
	}
	l := h.Listen
	if l == "" {
		return
	}
	_, port, err := net.SplitHostPort(l)
	if err != nil {
		p.report(nil, "http.listen", nil, "%s is not host:port (example: 127.0.0.1:9090)", show(l))
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		p.report(nil, "http.listen", nil, "port %s is not a number from 0 to 65535", show(port))
	}
}

var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{FormatAuto, FormatJSON, FormatConsole}
)

func (p *parser) log() {
	l := p.f.s.Log
	if l.Level != "" && !slices.Contains(logLevels, l.Level) {
		p.report(nil, "log.level", nil, "unknown level %s (one of: %s)", show(l.Level), strings.Join(logLevels, ", "))
	}
	if l.Format != "" && !slices.Contains(logFormats, l.Format) {
		p.report(nil, "log.format", nil, "unknown format %s (one of: %s)", show(l.Format), strings.Join(logFormats, ", "))
	}
}
