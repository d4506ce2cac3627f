package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// File is a loaded, valid configuration file. Its methods turn it into the
// configurations of the libraries; zero values in the file mean the
// libraries' defaults throughout.
type File struct {
	name  string
	s     schema
	lines map[string]int // dotted field -> line of its key, for fields set to a non-null value
}

// Load reads and parses the configuration file at path. Errors name the
// file as path was given.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errorList([]*FieldError{{File: path, Msg: fsReason(err), Err: err}})
	}
	return Parse(path, data)
}

// Parse parses and validates data, the contents of the file called name.
// Every problem found is reported, each with its line and dotted field, in
// an *Errors. An empty file, or one of only comments, is valid: every value
// is its default.
func Parse(name string, data []byte) (*File, error) {
	f := &File{name: name, lines: make(map[string]int)}
	d := &decoder{file: name, lines: f.lines, bad: make(map[string]bool)}
	root, ferr := parseYAML(name, data)
	if ferr != nil {
		return nil, errorList([]*FieldError{ferr})
	}
	if root != nil {
		d.root(root, &f.s)
	}
	v := &validator{f: f, bad: d.bad}
	v.run()
	if err := errorList(append(d.errs, v.errs...)); err != nil {
		return nil, err
	}
	return f, nil
}

// Name returns the file's name as it was given to Load or Parse.
func (f *File) Name() string { return f.name }

// fsReason is the text of a file system error without the operation and
// path that the caller already names.
func fsReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parseYAML returns the document's root node; nil for an empty document.
func parseYAML(name string, data []byte) (*yaml.Node, *FieldError) {
	docs, err := decodeDocs(data)
	if err != nil {
		msg := yamlLine.ReplaceAllString(err.Error(), "")
		msg = strings.TrimPrefix(msg, "yaml: ")
		return nil, &FieldError{File: name, Line: errorLine(data, err), Msg: "malformed YAML: " + msg, Err: err}
	}
	switch len(docs) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, &FieldError{File: name, Line: docs[1].Line, Msg: "a second YAML document: the file must hold one"}
	}
	doc := docs[0]
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return doc, nil
}

// decodeDocs parses data into at most two documents (a second one is an
// error the caller reports).
func decodeDocs(data []byte) (docs []*yaml.Node, err error) {
	// yaml.v3 has panicked on hostile input before; a configuration file
	// must never take the daemon down with a stack trace.
	defer func() {
		if r := recover(); r != nil {
			docs, err = nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for len(docs) < 2 {
		doc := new(yaml.Node)
		if err := dec.Decode(doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		docs = append(docs, doc)
	}
	return docs, nil
}

// errorLine returns the line of a syntax error. yaml.v3 often reports the
// start of the enclosing construct, counted from 0 (or no line at all),
// instead of where the error is; so look for it: the shortest prefix of
// whole lines that fails the same way ends at the line that broke it.
// Prefixes do not fail monotonically (an open [ on line 2 fails a prefix
// that the full file closes later), but comparing the error and bisecting
// between a prefix that parses and one that fails lands on a line that
// introduces this error, which is what the reader needs.
func errorLine(data []byte, err error) int {
	want := yamlLine.ReplaceAllString(err.Error(), "")
	fails := func(n int) bool { // the first n lines fail like data
		end := 0
		for range n {
			i := bytes.IndexByte(data[end:], '\n')
			if i < 0 {
				end = len(data)
				break
			}
			end += i + 1
		}
		_, err := decodeDocs(data[:end])
		return err != nil && yamlLine.ReplaceAllString(err.Error(), "") == want
	}
	lines := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		lines++
	}
	if lines > 100000 || !fails(lines) {
		// Not worth it, or the error is not about a line. yaml.v3's own
		// line, if any, is better than nothing.
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
		return 0
	}
	lo, hi := 0, lines // fails(lo) is false: the empty prefix parses
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

var durationType = reflect.TypeFor[time.Duration]()

// decoder fills a schema from a yaml.Node tree, recording the line of
// every key it sets and an error for everything it cannot set.
type decoder struct {
	file  string
	lines map[string]int
	errs  []*FieldError
	bad   map[string]bool // fields that had errors: validation skips them
}

func (d *decoder) errorf(line int, field, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
	d.bad[field] = true
}

func (d *decoder) root(n *yaml.Node, s *schema) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, "", "the top level must be a mapping of sections (redis:, engine:, ...), got %s", describe(n))
		return
	}
	d.mapping(n, "", reflect.ValueOf(s).Elem())
}

// mapping decodes the mapping n into the struct v, the section at path.
func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	keys := fieldsByKey(v.Type())
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, path, "keys must be names, got %s", describe(k))
			continue
		}
		field := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, field, "duplicate key (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		idx, ok := keys[k.Value]
		if !ok {
			d.unknown(k, field, keys)
			continue
		}
		if !isNull(resolve(val)) {
			d.lines[field] = k.Line
		}
		d.value(val, field, v.Field(idx))
	}
}

// unknown reports an unknown key, suggesting a known one it is close to.
func (d *decoder) unknown(k *yaml.Node, field string, keys map[string]int) {
	if k.Value == "<<" {
		d.errorf(k.Line, field, "merge keys are not supported")
		return
	}
	best, bestDist := "", 3
	for name := range keys {
		if dist := editDistance(k.Value, name); dist < bestDist || dist == bestDist && name < best {
			best, bestDist = name, dist
		}
	}
	if best != "" {
		d.errorf(k.Line, field, "unknown key (did you mean %s?)", best)
		return
	}
	d.errorf(k.Line, field, "unknown key")
}

// value decodes n into v, the field at path. A null value (a key with
// nothing after it, or ~) leaves v zero: the default.
func (d *decoder) value(n *yaml.Node, field string, v reflect.Value) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	switch t := v.Type(); {
	case t == durationType:
		s, ok := d.scalar(n, field, "a duration such as 30s")
		if !ok {
			return
		}
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.errorf(n.Line, field, "%q is not a duration (examples: 30s, 500ms, 2m)", s)
			return
		}
		v.SetInt(int64(dur))
	case t.Kind() == reflect.String:
		if s, ok := d.scalar(n, field, "a string"); ok {
			v.SetString(s)
		}
	case t.Kind() == reflect.Bool:
		s, ok := d.scalar(n, field, "true or false")
		if !ok {
			return
		}
		var b bool
		if n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			d.errorf(n.Line, field, "expected true or false, got %q", s)
			return
		}
		v.SetBool(b)
	case t.Kind() == reflect.Int:
		s, ok := d.scalar(n, field, "a whole number")
		if !ok {
			return
		}
		var i int
		if n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			d.errorf(n.Line, field, "expected a whole number, got %q", s)
			return
		}
		v.SetInt(int64(i))
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n.Line, field, "expected a list of strings, got %s", describe(n))
			return
		}
		list := make([]string, 0, len(n.Content))
		for i, el := range n.Content {
			el = resolve(el)
			elField := fmt.Sprintf("%s[%d]", field, i)
			if isNull(el) {
				d.errorf(el.Line, elField, "expected a string, got nothing")
				continue
			}
			if s, ok := d.scalar(el, elField, "a string"); ok {
				d.lines[elField] = el.Line
				list = append(list, s)
			}
		}
		v.Set(reflect.ValueOf(list))
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String:
		if n.Kind != yaml.MappingNode {
			d.errorf(n.Line, field, "expected a mapping of names to strings, got %s", describe(n))
			return
		}
		m := make(map[string]string, len(n.Content)/2)
		seen := make(map[string]int)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := resolve(n.Content[i]), resolve(n.Content[i+1])
			if k.Kind != yaml.ScalarNode {
				d.errorf(k.Line, field, "keys must be names, got %s", describe(k))
				continue
			}
			kField := join(field, k.Value)
			if first, dup := seen[k.Value]; dup {
				d.errorf(k.Line, kField, "duplicate key (first at line %d)", first)
				continue
			}
			seen[k.Value] = k.Line
			d.lines[kField] = k.Line
			s := ""
			if !isNull(val) {
				var ok bool
				if s, ok = d.scalar(val, kField, "a string"); !ok {
					continue
				}
			}
			m[k.Value] = s
		}
		v.Set(reflect.ValueOf(m))
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.errorf(n.Line, field, "expected a section (a mapping of keys), got %s", describe(n))
			return
		}
		d.mapping(n, field, v)
	default:
		panic("config: schema field " + field + " has unsupported type " + t.String())
	}
}

// scalar returns the text of a scalar node, reporting anything else as the
// wrong type. Any plain scalar is accepted as a string: `owner: 42` means
// "42"; binary data and application tags (!foo) are not text.
func (d *decoder) scalar(n *yaml.Node, field, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n.Line, field, "expected %s, got %s", want, describe(n))
		return "", false
	}
	if tag := n.ShortTag(); tag == "!!binary" || !strings.HasPrefix(tag, "!!") {
		d.errorf(n.Line, field, "expected %s, got a value tagged %s", want, tag)
		return "", false
	}
	return n.Value, true
}

// resolve follows aliases. The parser refuses an alias to an anchor not
// yet complete, so the chain is finite; the bound is a guard all the same.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" ||
		n.Kind == yaml.DocumentNode && len(n.Content) == 0
}

// describe names the kind of n for a type error: "a list", "a string".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!bool":
			return "a boolean"
		case "!!int":
			return "a whole number"
		case "!!float":
			return "a number"
		default:
			return "a string"
		}
	}
	return "something else"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldsByKey maps the yaml keys of struct type t to field indexes.
func fieldsByKey(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		if key := t.Field(i).Tag.Get("yaml"); key != "" {
			m[key] = i
		}
	}
	return m
}

// editDistance is the Levenshtein distance between a and b, for "did you
// mean" suggestions.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
