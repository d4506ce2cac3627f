package config

import (
	"bytes"
	"fmt"
	"maps"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	execsink "github.com/syncd/syncd/sinks/exec"
	httpsink "github.com/syncd/syncd/sinks/http"
	"github.com/syncd/syncd/store"
)

// Redacted returns the effective configuration as YAML: every key, with
// the defaults filled in, in the layout of the file. Only the sub-section
// of the configured sink type is shown. Secrets never appear: the file
// holds only the names of password variables and files, never a password,
// and the values of http sink headers and exec sink environment variables
// whose names suggest a secret (Authorization, Token, Key, Secret, Cookie,
// Password, ...) are shown as "[redacted]", as is the password in the http
// sink's URL. The output parses back to the same configuration, but for
// the redacted values.
func (f *File) Redacted() ([]byte, error) {
	doc := &yaml.Node{
		Kind:        yaml.DocumentNode,
		HeadComment: fmt.Sprintf("Effective configuration of %s: defaults filled in, secrets redacted.", f.name),
		Content:     []*yaml.Node{f.node(reflect.ValueOf(f.effective()), "")},
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("config: redacted: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: redacted: %w", err)
	}
	return b.Bytes(), nil
}

const redacted = "[redacted]"

// zeroNotes explain, as line comments, the zero values that mean something
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

// effective returns the schema with the libraries' defaults filled in.
//
// The libraries apply their defaults privately (store's withDefaults,
// ownership's and engine's resolve), so the values here are copies that
// must follow them; each group names its source.
func (f *File) effective() schema {
	s := f.s
	s.Redis.Addrs = slices.Clone(s.Redis.Addrs)
	s.Items.IDs = slices.Clone(s.Items.IDs)
	s.Sink.Exec.Command = slices.Clone(s.Sink.Exec.Command)
	s.Sink.Exec.Env = slices.Clone(s.Sink.Exec.Env)
	s.Sink.HTTP.Headers = maps.Clone(s.Sink.HTTP.Headers)

	// store.Config.withDefaults
	r := &s.Redis
	def(&r.KeyPrefix, store.DefaultKeyPrefix)
	def(&r.Shards, store.DefaultShards)
	def(&r.DialTimeout, 5*time.Second)
	def(&r.ReadTimeout, 3*time.Second)
	def(&r.WriteTimeout, 3*time.Second)

	// ownership.Config.resolve
	o := &s.Ownership
	def(&o.TTL, 30*time.Second)
	def(&o.Margin, o.TTL/10+2*time.Millisecond)
	def(&o.Heartbeat, o.TTL/3)
	def(&o.ReplicaTimeout, o.TTL/10)
	if o.Owner == "" {
		o.Owner, _ = os.Hostname()
		def(&o.Owner, "unknown")
	}

	// engine.Config.resolve
	e := &s.Engine
	def(&e.Workers, 4)
	def(&e.Batch, 32)
	def(&e.MaxAttempts, 5)
	def(&e.Interval, time.Minute)
	def(&e.BackoffMin, time.Second)
	def(&e.BackoffMax, 5*time.Minute)
	def(&e.DrainTimeout, 30*time.Second)
	def(&e.Poll, 250*time.Millisecond)

	// The sink packages' New.
	s.Sink.Type = f.SinkType()
	def(&s.Sink.Exec.Grace, execsink.DefaultGrace)
	def(&s.Sink.HTTP.Timeout, httpsink.DefaultTimeout)

	def(&s.Log.Level, "info")
	def(&s.Log.Format, FormatAuto)

	h := &s.Sink.HTTP
	h.URL = redactURL(h.URL)
	for k := range h.Headers {
		if secretName(k) {
			h.Headers[k] = redacted
		}
	}
	for i, kv := range s.Sink.Exec.Env {
		if k, _, ok := strings.Cut(kv, "="); ok && secretName(k) {
			s.Sink.Exec.Env[i] = k + "=" + redacted
		}
	}
	return s
}

func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// node renders v, the value of the field at path, as a YAML node.
func (f *File) node(v reflect.Value, path string) *yaml.Node {
	str := func(tag, s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s} }
	var n *yaml.Node
	switch t := v.Type(); {
	case t == durationType:
		n = str("!!str", formatDuration(time.Duration(v.Int())))
	case t.Kind() == reflect.String:
		n = str("!!str", v.String())
	case t.Kind() == reflect.Bool:
		n = str("!!bool", strconv.FormatBool(v.Bool()))
	case t.Kind() == reflect.Int:
		n = str("!!int", strconv.FormatInt(v.Int(), 10))
	case t.Kind() == reflect.Slice:
		n = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		for i := range v.Len() {
			n.Content = append(n.Content, str("!!str", v.Index(i).String()))
		}
	case t.Kind() == reflect.Map:
		n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		m := v.Interface().(map[string]string)
		for _, k := range sortedKeys(m) {
			n.Content = append(n.Content, str("!!str", k), str("!!str", m[k]))
		}
	case t.Kind() == reflect.Struct:
		n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i := range t.NumField() {
			key := t.Field(i).Tag.Get("yaml")
			field := join(path, key)
			if path == "sink" && key != "type" && key != f.SinkType() {
				continue // another sink type's sub-section
			}
			n.Content = append(n.Content, str("!!str", key), f.node(v.Field(i), field))
		}
		return n
	}
	if v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0 {
		n.LineComment = zeroNotes[path]
	}
	return n
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

// secretName reports whether a header or variable called name probably
// holds a secret.
func secretName(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"auth", "token", "key", "secret", "cookie", "pass", "session", "signature", "credential"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// redactURL hides the password of a URL's user information and the values
// of query parameters with secret names. A URL that does not parse has the
// part between the first colon and the @ of its authority hidden.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		scheme, rest, ok := strings.Cut(raw, "://")
		if !ok {
			return raw
		}
		auth, path, _ := strings.Cut(rest, "/")
		at := strings.LastIndexByte(auth, '@')
		colon := strings.IndexByte(auth, ':')
		if at < 0 || colon < 0 || colon > at {
			return raw
		}
		out := scheme + "://" + auth[:colon+1] + "xxxxx" + auth[at:]
		if len(rest) > len(auth) {
			out += "/" + path
		}
		return out
	}
	if q := u.Query(); len(q) > 0 {
		changed := false
		for k := range q {
			if secretName(k) {
				q[k] = []string{"xxxxx"}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.Redacted()
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
