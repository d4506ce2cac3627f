package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/syncd/syncd/cmd/syncd/internal/idlines"
	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/internal/redact"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// validate checks the decoded file. The libraries' Validate check their
// fields (libErrors maps them to keys); the rules here are about the file
// (keys that go together, explicit zeros) and what no library owns.
func (p *parser) validate() {
	s := &p.f.s
	r, t := s.Redis, s.Redis.TLS
	onlyOne := func(a, b string, both bool) {
		if both {
			p.report(nil, b, nil, "only one of %s and %s may be set", a, b)
		}
	}
	onlyOne("redis.password_env", "redis.password_file", r.PasswordEnv != "" && r.PasswordFile != "")
	onlyOne("http.api_token_env", "http.api_token_file", s.HTTP.APITokenEnv != "" && s.HTTP.APITokenFile != "")
	if r.SentinelPasswordEnv != "" && r.MasterName == "" && !p.Failed("redis.master_name") {
		p.report(nil, "redis.sentinel_password_env", nil, "set but redis.master_name is empty: there are no Sentinels")
	}
	for _, kv := range [][2]string{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"server_name", t.ServerName}} {
		if kv[1] != "" && !t.Enabled && !p.Failed("redis.tls.enabled") {
			p.report(nil, "redis.tls."+kv[0], nil, "set but redis.tls.enabled is false")
		}
	}
	if t.Enabled && (t.CertFile == "") != (t.KeyFile == "") {
		missing, other := "cert_file", "key_file"
		if t.KeyFile == "" {
			missing, other = other, missing
		}
		p.report(nil, "redis.tls."+missing, []string{"redis.tls." + other}, "required with redis.tls.%s", other)
	}
	if s.Ownership.MinReplicas > 0 && len(r.Addrs) == 0 && !p.Failed("redis.addrs") {
		p.report(nil, "ownership.min_replicas", nil, "needs redis.addrs: the embedded store has no replicas")
	}
	if _, err := engine.ParseRate(s.Target.Rate); err != nil && !p.Failed("target.rate") {
		p.report(err, "target.rate", nil, "%v", err)
	}
	for i, id := range s.Items.IDs {
		field, err := fmt.Sprintf("items.ids[%d]", i), store.ValidateID(id)
		if err != nil && !p.Failed(field) {
			p.report(err, field, nil, "%s", idlines.Reason(err))
		}
	}
	st := p.f.storeBase()
	p.libErrors(st.Validate(), p.f.Engine().Validate(), p.sink())
	p.RefuseZeros(p.f.effective())
	p.grace()
	p.oneOf("log.level", s.Log.Level)
	p.oneOf("log.format", s.Log.Format)
	if l := s.HTTP.Listen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil {
			p.report(nil, "http.listen", nil, "%s is not host:port (example: 127.0.0.1:9090)", show(l))
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			p.report(nil, "http.listen", nil, "port %s is not a number from 0 to 65535", show(port))
		}
	}
	p.allowedHosts()
}

// report adds a problem with field, its value cut and redacted in msg.
func (p *parser) report(err error, field string, alt []string, format string, args ...any) {
	p.Add(p.f.errorAt(err, field, alt, p.f.scrub(field, fmt.Sprintf(format, args...))))
}

// errorAt is a problem with field, at the line of the first of field and
// alt that is set, else of the nearest enclosing section that is set.
func (f *File) errorAt(err error, field string, alt []string, msg string) *FieldError {
	return &FieldError{File: f.name, Line: f.keys.Line(field, alt...), Field: field, Msg: msg, Err: err}
}

// At names err as a problem with field, at its line in the file (or the
// file alone when the field is not set there: a default), such as Redis
// not answering at redis.addrs. The error unwraps to err.
func (f *File) At(field string, err error) error {
	return f.errorAt(err, field, nil, err.Error())
}

// IsSet reports whether the file sets field to a non-null value, not
// left to its default.
func (f *File) IsSet(field string) bool { return f.isSet(field) }

// isSet reports whether field is set to a non-null value.
func (f *File) isSet(field string) bool {
	_, ok := f.keys[field]
	return ok
}

// scrub cuts and redacts the value of field where msg quotes it.
func (f *File) scrub(field, msg string) string {
	k, ok := f.keys[field]
	if !ok || k.Val.Kind != yaml.ScalarNode {
		return msg
	}
	msg = strings.ReplaceAll(msg, strconv.Quote(k.Val.Value), show(k.Val.Value))
	return strings.ReplaceAll(msg, k.Val.Value, redactValue(k.Val.Value))
}

// oneOf reports v, the value of the enum field, unless it is empty or
// one of its words: what was given, what is allowed and the default, as
// a type error says them ("expected one of log (the default), exec, http
// or file, got \"kafka\"").
func (p *parser) oneOf(field, v string) bool {
	e := enums[field]
	if v == "" || slices.Contains(e.words, v) {
		return true
	}
	if !p.Failed(field) {
		p.report(nil, field, nil, "expected %s, got %s", e.want(), show(v))
	}
	return false
}

// libErrors reports the libraries' Validate errors at their keys.
func (p *parser) libErrors(errs ...error) {
	typ := p.f.SinkType()
	for _, err := range unjoin(errors.Join(errs...)) {
		field, reason := libField(err)
		switch {
		case p.Failed(field):
		case strings.HasPrefix(field, "sink.") && reason == "must not be empty" && !p.f.isSet(field):
			p.report(err, field, []string{"sink." + typ, "sink.type"}, "required when sink.type is %s", typ)
		default:
			alt := map[string][]string{"redis.addrs": {"redis.cluster", "redis.master_name"}}[field]
			p.report(err, field, alt, "%s", redact.URLs(reason, redact.Mask))
		}
	}
}

// libField returns the key a library's *ConfigError is about (with the
// entry it names) and its reason; "" and the text for another error.
func libField(err error) (field, reason string) {
	var (
		se *store.ConfigError
		oe *ownership.ConfigError
		ee *engine.ConfigError
		ke *sinks.ConfigError
	)
	switch {
	case errors.As(err, &se):
		return "redis." + cmp.Or(map[string]string{"tls": "tls.insecure_skip_verify"}[se.Field], se.Field), se.Reason
	case errors.As(err, &oe):
		return "ownership." + oe.Field, oe.Reason
	case errors.As(err, &ee):
		if strings.Contains(ee.Field, ".") { // target.*, items.*
			return ee.Field, ee.Reason
		}
		return "engine." + ee.Field, ee.Reason
	case errors.As(err, &ke):
		field = "sink." + ke.Sink + "." + ke.Field
		switch {
		case ke.Entry == "":
		case ke.Field == "env":
			field += "[" + ke.Entry + "]"
		default:
			field += "." + yamlstrict.KeyName(ke.Entry)
		}
		return field, ke.Reason
	}
	return "", err.Error()
}

// unjoin returns the errors joined in err, at any depth.
func unjoin(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return slices.DeleteFunc([]error{err}, func(e error) bool { return e == nil })
	}
	var errs []error
	for _, e := range j.Unwrap() {
		errs = append(errs, unjoin(e)...)
	}
	return errs
}

// sink checks sink.type, the sub-sections and exit codes, and returns the
// sink's Validate error.
func (p *parser) sink() error {
	s, typ, c := p.f.s.Sink, p.f.SinkType(), p.f.Sink()
	validate := map[string]func() error{SinkExec: c.Exec.Validate, SinkHTTP: c.HTTP.Validate, SinkFile: c.File.Validate, SinkLog: c.Log.Validate}[typ]
	// A sink.type that did not load (a list, say) is not the default: it
	// has its own error, and the sections are not judged by a type the
	// user did not give (an outside trial read "sink.file: set but
	// sink.type is log (the default)" under "sink.type: [file]"). Nor is
	// an empty one, which is refused (RefuseZeros).
	if p.Failed("sink.type") || !p.oneOf("sink.type", typ) {
		return nil
	}
	if s.Type != "" || !p.f.isSet("sink.type") {
		p.otherSinks(typ, s.Type == "")
	}
	for status, class := range s.Exec.ExitCodes {
		field := "sink.exec.exit_codes." + status
		if _, err := strconv.Atoi(status); err != nil && !p.Failed(field) {
			p.report(err, field, nil, "%s is not an exit status: want a number from 1 to 255", show(status))
		} else if _, err := sinks.ParseClass(class); err != nil && !p.Failed(field) {
			p.report(err, field, nil, "%v", err)
		}
	}
	return validate()
}

// otherSinks reports the sections of sink types other than typ that are
// set: typ's sink runs, and ignores them. left says sink.type is left
// out, so typ is the default.
func (p *parser) otherSinks(typ string, left bool) {
	var others []string
	for _, other := range sinkTypes {
		if other != typ && p.f.isSet("sink."+other) && !p.Bad["sink."+other] {
			others = append(others, other)
		}
	}
	for _, other := range others {
		switch {
		case !left:
			p.report(nil, "sink."+other, nil, "set, but sink.type is %s, which ignores it", typ)
		case len(others) == 1:
			p.report(nil, "sink."+other, nil, "set, but sink.type is left out: the default sink, %s, runs and ignores it; add sink.type: %s", typ, other)
		default:
			p.report(nil, "sink."+other, nil, "set, but sink.type is left out: the default sink, %s, runs and ignores it; "+
				"add sink.type: %s, the one to run, and remove the other sections", typ, strings.Join(others, " or "))
		}
	}
}

// grace checks sink.exec.grace against the lease margin: when the trust
// window closes, the exec sink sends SIGTERM and, grace later, SIGKILL;
// margin later the claim can expire and another worker take the item.
func (p *parser) grace() {
	m, err := p.f.margin()
	if g := p.f.s.Sink.Exec.Grace; p.f.SinkType() == SinkExec && p.f.isSet("sink.exec.grace") && err == nil && g >= m &&
		!p.Failed("sink.exec.grace", "ownership.ttl", "ownership.margin") {
		p.report(nil, "sink.exec.grace", nil, "%s must be below ownership.margin (%s): a command is sent SIGTERM when "+
			"its lease's trust window closes and SIGKILL grace later, and must be dead before the claim can expire, "+
			"margin later, and another worker take the item", yamlstrict.FormatDuration(g), yamlstrict.FormatDuration(m))
	}
}
