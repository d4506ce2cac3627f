package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
	"github.com/syncd/syncd/internal/redact"
)

// Redacted returns the effective configuration as YAML: every key, with
// the defaults filled in, in the layout of the file; of the sinks, only
// the configured one. Secrets never appear: the file names password
// variables and files, never a password; http sink header values are
// "[redacted]" but for harmless headers (Content-Type, User-Agent, ...),
// as are exec sink env values whose names suggest a secret (Token, Key,
// ...: redact.SecretName); the commands' arguments have the passwords
// of their flags hidden across them (redact.Args), and every other value
// has redactValue's credentials hidden. The
// output parses back to the same configuration, but for redacted values.
func (f *File) Redacted() ([]byte, error) {
	s := f.effective()
	// A command's password may be an argument of its own, after its flag
	// (["mysql", "-p..."], ["curl", "-u", "user:pw"]), which redactField,
	// given one argument at a time, cannot tell.
	s.Sink.Exec.Command, s.Items.Command = redact.Args(s.Sink.Exec.Command), redact.Args(s.Items.Command)
	out, err := yamlstrict.Encode(s, yamlstrict.EncodeOptions{
		Comment: fmt.Sprintf("Effective configuration of %s: defaults filled in, secrets redacted.", f.name),
		Omit: func(path string) bool { // the other sink types' sub-sections
			typ, ok := strings.CutPrefix(path, "sink.")
			return ok && typ != f.SinkType() && slices.Contains(sinkTypes, typ)
		},
		String: redactField,
		Notes:  zeroNotes,
	})
	if err != nil {
		return nil, fmt.Errorf("config: redacted: %w", err)
	}
	return out, nil
}

// effective returns the schema with the defaults filled in: the
// libraries' WithDefaults, the sinks' defaults and this package's.
func (f *File) effective() schema {
	s := f.s
	copyFields(&s.Redis, f.storeBase().WithDefaults())
	o := f.Ownership().WithDefaults()
	copyFields(&s.Ownership, o)
	s.Ownership.Owner = o.Owner.Host
	ec := f.Engine().WithDefaults()
	copyFields(&s.Engine, ec)
	copyFields(&s.Target, ec.Target)
	copyFields(&s.Target.Breaker, ec.Target.Breaker)
	copyFields(&s.Items, ec.Items)
	_, s.Items.CommandTimeout = f.ItemsCommand()
	switch sc := f.Sink(); sc.Type { // another type's defaults would make its explicit zeros errors
	case SinkExec:
		copyFields(&s.Sink.Exec, sc.Exec.WithDefaults())
	case SinkHTTP:
		copyFields(&s.Sink.HTTP, sc.HTTP.WithDefaults())
	}
	s.Sink.Type, s.Log.Level, s.Log.Format = f.SinkType(), f.LogLevel().String(), f.LogFormat()
	return s
}

// zeroNotes explain, as line comments, zero values that mean something
// other than "nothing".
var zeroNotes = map[string]string{
	"redis.addrs":            "empty: the embedded in-process store",
	"redis.pool_size":        "0: go-redis's default, 10 per CPU",
	"ownership.settle":       "0: no settle wait",
	"ownership.min_replicas": "0: do not wait for replicas",
	"sink.exec.timeout":      "0: no timeout beyond the lease",
	"sink.log.fail_every":    "0: never fail",
	"http.listen":            "empty: no HTTP server",
	"http.allowed_hosts":     "empty: on a loopback http.listen, localhost and IP addresses; on another, any host",
}

// safeHeaders are the http sink headers whose values are shown.
var safeHeaders = []string{"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language",
	"Cache-Control", "Content-Encoding", "Content-Language", "Content-Type", "User-Agent"}

// redactField returns v, a value of the field at path (a list's elements
// have the list's path), with its secrets redacted. Addresses and item
// IDs hold none, and redaction could make them invalid.
func redactField(path, v string) string {
	name, header := strings.CutPrefix(path, "sink.http.headers.")
	k, _, kv := strings.Cut(v, "=")
	switch {
	case header && v != "" && !slices.ContainsFunc(safeHeaders, func(h string) bool { return strings.EqualFold(h, name) }):
		return redacted
	case kv && path == "sink.exec.env" && redact.SecretName(k):
		return k + "=" + redacted
	case slices.Contains([]string{"redis.addrs", "http.listen", "http.allowed_hosts", "items.ids"}, path):
		return v
	}
	return redactValue(v)
}

const redacted = redact.Redacted

// redactValue hides the credentials inside a value: the user information
// and query values of URLs (but harmless ones such as page=), token=, key=, secret= and password= pairs,
// bearer and basic credentials. Applied twice, it changes nothing more.
func redactValue(s string) string { return redact.Pairs(redact.URLs(s, redact.Mask)) }

// show quotes a value for a message, redacted and cut.
func show(v string) string { return strconv.Quote(yamlstrict.Clip(redactValue(v))) }
