package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
)

// Redacted returns the effective configuration as YAML: every key, with
// the defaults filled in, in the layout of the file; of the sinks, only
// the configured one. Secrets never appear: the file names password
// variables and files, never a password; http sink header values are
// "[redacted]" but for harmless headers (Content-Type, User-Agent, ...),
// as are exec sink env values whose names suggest a secret (Token, Key,
// ...); every other value has redactValue's credentials hidden. The
// output parses back to the same configuration, but for redacted values.
func (f *File) Redacted() ([]byte, error) {
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{f.node(reflect.ValueOf(f.effective()), "")},
		HeadComment: fmt.Sprintf("Effective configuration of %s: defaults filled in, secrets redacted.", f.name)}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := errors.Join(enc.Encode(doc), enc.Close()); err != nil {
		return nil, fmt.Errorf("config: redacted: %w", err)
	}
	return b.Bytes(), nil
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
}

// node renders v, the value of the field at path, as a YAML node, with
// secrets redacted.
func (f *File) node(v reflect.Value, path string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			key := v.Type().Field(i).Tag.Get("yaml")
			if path != "sink" || key == "type" || key == f.SinkType() { // not another sink type's sub-section
				n.Content = append(n.Content, str(key), f.node(v.Field(i), yamlstrict.Join(path, key)))
			}
		}
		return n
	case reflect.Map:
		m := v.Interface().(map[string]string)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			n.Content = append(n.Content, str(k), str(redactField(yamlstrict.Join(path, k), m[k])))
		}
	case reflect.Slice:
		n.Kind = yaml.SequenceNode
		for i := range v.Len() {
			n.Content = append(n.Content, str(redactField(path, v.Index(i).String())))
		}
	case reflect.String:
		n = str(redactField(path, v.String()))
	default: // a bool, a number or a duration, which yaml.v3 tags itself
		n = &yaml.Node{Kind: yaml.ScalarNode, Value: valueText(v)}
	}
	if n.Kind != yaml.ScalarNode && len(n.Content) == 0 {
		n.Style = yaml.FlowStyle
	}
	if v.IsZero() || n.Style == yaml.FlowStyle {
		n.LineComment = zeroNotes[path]
	}
	return n
}

// str is a string's node, quoted where it would read as another type.
func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// valueText is a scalar field's value as the file would write it.
func valueText(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		return formatDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.String:
		return show(v.String())
	}
	return fmt.Sprint(v.Interface())
}

// formatDuration is time.Duration.String without the zero tails that make
// "1m0s" out of a minute.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
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
	case kv && path == "sink.exec.env" && slices.ContainsFunc([]string{"auth", "token", "key", "secret", "cookie", "pass", "session", "signature", "credential"},
		func(s string) bool { return strings.Contains(strings.ToLower(k), s) }):
		return k + "=" + redacted
	case slices.Contains([]string{"redis.addrs", "http.listen", "items.ids"}, path):
		return v
	}
	return redactValue(v)
}

const redacted = "[redacted]"

var (
	urlRE    = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)([^/?#\s]*@)?([^?#\s]*)(\?[^#\s]*)?`)
	queryRE  = regexp.MustCompile(`([?&](?:[^=&]*=)?)[^&]*`)
	pairRE   = regexp.MustCompile(`(?i)([\w.-]*(?:token|secret|passw(?:or)?d|pwd|key|auth)[\w.-]*=)[^\s&;,'"\[][^\s&;,'"]*`)
	bearerRE = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[^\s,;'"\[]+`)
)

// redactValue hides the credentials inside a value: the user information
// and query values of URLs, token=, key=, secret= and password= pairs,
// bearer and basic credentials. Applied twice, it changes nothing more.
func redactValue(s string) string {
	s = pairRE.ReplaceAllString(redactURLs(s), "${1}xxxxx")
	return bearerRE.ReplaceAllString(s, "${1}${2}xxxxx")
}

// redactURLs hides the user information (user name and password) and the
// query values of every URL in s.
func redactURLs(s string) string {
	return urlRE.ReplaceAllStringFunc(s, func(u string) string {
		m := urlRE.FindStringSubmatch(u)
		if m[2] != "" {
			m[2] = "xxxxx@"
		}
		return m[1] + m[2] + m[3] + queryRE.ReplaceAllString(m[4], "${1}xxxxx")
	})
}

// show quotes a value for a message, redacted and cut.
func show(v string) string { return strconv.Quote(yamlstrict.Clip(redactValue(v))) }
