package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// FieldError is one problem in a configuration file, or in a file it
// names (items.file), at a line.
type FieldError struct {
	File  string // as given to Load or Parse, or the path of the named file
	Line  int    // 1-based; 0 when the problem has no line
	Field string // dotted YAML path ("redis.tls.ca_file", "items.ids[2]"); "" for the whole file or an items line
	Msg   string // what is wrong
	Err   error  // the underlying error, if any: a library *ConfigError, a file system error
}

// Error formats e as "file:line: field: msg", without a zero line or an
// empty field.
func (e *FieldError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Msg
}

func (e *FieldError) Unwrap() error { return e.Err }

// Errors is every problem found, in line order, one per line of its
// text. Every function of this package that fails returns one.
type Errors struct{ List []*FieldError }

func (e *Errors) Error() string { return fmt.Sprint(errors.Join(e.Unwrap()...)) }

// Unwrap returns the entries, so that errors.Is and errors.As look at each.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i, fe := range e.List {
		errs[i] = fe
	}
	return errs
}

// Bounds on hostile input (a real configuration is a few kilobytes with
// an alias or two; yaml.v3's alias guard lets 1 MiB of aliases through).
const (
	maxFileSize   = 1 << 20  // the file
	maxAliasNodes = 10000    // the nodes that aliases add once expanded
	maxErrors     = 20       // the problems reported one by one, then a count
	maxKept       = 1000     // the problems kept; past maxErrors, they are only counted
	maxBisectSize = 64 << 10 // the file whose syntax error errorLine looks for
)

// fail returns the one problem fe as an *Errors.
func fail(fe *FieldError) error { return &Errors{List: []*FieldError{fe}} }

// errorList returns nil or list, and a count of dropped problems, as an
// *Errors sorted by line (no line last), without repeats, past maxErrors
// a count of the rest.
func errorList(list []*FieldError, dropped int) error {
	if len(list) == 0 {
		return nil
	}
	line := func(e *FieldError) int { return cmp.Or(max(e.Line, 0), math.MaxInt) }
	list = slices.Clone(list)
	slices.SortStableFunc(list, func(a, b *FieldError) int { return cmp.Compare(line(a), line(b)) })
	list = slices.CompactFunc(list, func(a, b *FieldError) bool { return a.Error() == b.Error() })
	if more := max(len(list)-maxErrors, 0) + dropped; more > 0 {
		list = append(list[:min(len(list), maxErrors)], &FieldError{File: list[0].File, Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return &Errors{List: list}
}

// File is a loaded, valid configuration file. Its methods turn it into the
// configurations of the libraries.
type File struct {
	name string
	s    schema
	keys map[string]key // dotted field -> where it is set, for fields set to a non-null value
}

// key is where a field is set: the line of the key or list element, and
// the value (aliases followed).
type key struct {
	line int
	val  *yaml.Node
}

// Load reads and parses the file at path, named as given in errors.
func Load(path string) (*File, error) {
	fh, err := os.Open(path)
	if err == nil {
		defer fh.Close()
		var data []byte
		if data, err = io.ReadAll(io.LimitReader(fh, maxFileSize+1)); err == nil { // Parse refuses more
			return Parse(path, data)
		}
	}
	return nil, fail(&FieldError{File: path, Msg: fsReason(err), Err: err})
}

// Parse parses and validates data, the contents of the file called name,
// reporting every problem. An empty file is valid: all defaults.
func Parse(name string, data []byte) (*File, error) {
	p, ok := decode(name, data)
	if ok {
		p.validate()
	}
	if err := errorList(p.errs, p.dropped); err != nil {
		return nil, err
	}
	return p.f, nil
}

// Name returns the file's name as it was given to Load or Parse.
func (f *File) Name() string { return f.name }

// parser decodes a file by a walk over yaml.v3's node tree against the
// schema, each scalar decoded by yaml.v3 (node.Decode, durations
// included), and validates it. yaml.v3's strict Decode gives a line but
// not the field, stops at the first syntax problem in a section, truncates
// 1.5 into an int, takes an empty list element as "" and follows merge
// keys; the walk names the field and refuses those.
type parser struct {
	f       *File
	errs    []*FieldError   // the first maxKept problems
	dropped int             // and how many more
	bad     map[string]bool // fields that did not decode: rules about them are skipped
}

// add keeps fe, or counts it past maxKept: a hostile file can have
// hundreds of thousands.
func (p *parser) add(fe *FieldError) {
	if len(p.errs) < maxKept {
		p.errs = append(p.errs, fe)
	} else {
		p.dropped++
	}
}

// failAt reports that field, at line, did not decode.
func (p *parser) failAt(line int, field, msg string) {
	p.bad[field] = true
	p.add(&FieldError{File: p.f.name, Line: line, Field: field, Msg: msg})
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	schemaType   = reflect.TypeFor[schema]()
	yamlLine     = regexp.MustCompile(`^yaml: line (\d+): `)
)

// decode parses data into p.f; false when it is beyond validating: not
// YAML, or not one document of sane size.
func decode(name string, data []byte) (*parser, bool) {
	p := &parser{f: &File{name: name, keys: map[string]key{}}, bad: map[string]bool{}}
	if len(data) > maxFileSize {
		p.failAt(0, "", fmt.Sprintf("larger than %d bytes (1 MiB), the limit for a configuration file", maxFileSize))
		return p, false
	}
	docs, err := parseDocs(data)
	switch {
	case err != nil:
		p.failAt(errorLine(data, err), "", "malformed YAML: "+strings.TrimPrefix(yamlLine.ReplaceAllString(err.Error(), ""), "yaml: "))
		return p, false
	case len(docs) > 1:
		p.failAt(docs[1].Line, "", "a second YAML document: the file must hold one")
		return p, false
	case len(docs) == 0 || len(docs[0].Content) == 0:
		return p, true // empty: every value is its default
	}
	root := docs[0].Content[0]
	if n, at := aliasNodes(root); n > maxAliasNodes {
		p.failAt(at, "", fmt.Sprintf("aliases expand to more than %d values; a configuration needs a few at most", maxAliasNodes))
		return p, false
	}
	if err := safely(func() error { p.walk(root, "", reflect.ValueOf(&p.f.s).Elem()); return nil }); err != nil {
		p.failAt(0, "", strings.TrimPrefix(err.Error(), "yaml: "))
		return p, false
	}
	return p, true
}

// safely runs fn, turning a panic into an error: yaml.v3 has panicked on
// hostile input before.
func safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: %v", r)
		}
	}()
	return fn()
}

// parseDocs parses data into at most two documents (a second is an error).
func parseDocs(data []byte) (docs []*yaml.Node, err error) {
	err = safely(func() error {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for len(docs) < 2 {
			doc := new(yaml.Node)
			if err := dec.Decode(doc); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			docs = append(docs, doc)
		}
		return nil
	})
	return docs, err
}

// aliasNodes returns how many nodes the aliases under root add expanded,
// and the line of the alias that took the count past maxAliasNodes. Each
// node is sized once: linear however far it expands; a cycle is too far.
func aliasNodes(root *yaml.Node) (added, at int) {
	const huge = 1 << 40
	sizes := map[*yaml.Node]int{}
	var size func(n *yaml.Node) int
	size = func(n *yaml.Node) int {
		if n.Kind == yaml.AliasNode {
			s := huge
			if n.Alias != nil {
				s = size(n.Alias)
			}
			if added = min(added+s, huge); added > maxAliasNodes && at == 0 {
				at = n.Line
			}
			return s
		}
		if s, ok := sizes[n]; ok {
			return s
		}
		sizes[n] = huge // until known: an alias inside n to n is a cycle
		s := 1
		for _, c := range n.Content {
			s = min(s+size(c), huge)
		}
		sizes[n] = s
		return s
	}
	size(root)
	return added, at
}

// errorLine returns the line of a syntax error. yaml.v3 often gives the
// start of the enclosing construct, counted from 0; the shortest prefix of
// lines that fails the same way ends at the line that broke it. A file too
// large to bisect gets yaml.v3's line.
func errorLine(data []byte, err error) int {
	if len(data) > maxBisectSize {
		var n int // 0 when yaml.v3 gives no line
		_, _ = fmt.Sscanf(err.Error(), "yaml: line %d:", &n)
		return n
	}
	want := yamlLine.ReplaceAllString(err.Error(), "")
	lines := bytes.SplitAfter(data, []byte("\n"))
	return sort.Search(len(lines), func(n int) bool {
		_, err := parseDocs(bytes.Join(lines[:n], nil))
		return err != nil && yamlLine.ReplaceAllString(err.Error(), "") == want
	})
}

// walk decodes n, the value of the field at path, into v, recording where
// each field is set. A null leaves v zero: the default.
func (p *parser) walk(n *yaml.Node, path string, v reflect.Value) {
	n, t := resolve(n), v.Type()
	switch k := t.Kind(); {
	case isNull(n):
	case (k == reflect.Struct || k == reflect.Map) && n.Kind == yaml.MappingNode:
		p.mapping(n, path, v)
	case k == reflect.Slice && n.Kind == yaml.SequenceNode:
		v.Set(reflect.MakeSlice(t, len(n.Content), len(n.Content)))
		for i, el := range n.Content {
			field := fmt.Sprintf("%s[%d]", path, i)
			if el = resolve(el); isNull(el) {
				p.failAt(el.Line, field, typeMessage(el, t.Elem())) // yaml.v3 would drop it
				continue
			}
			p.f.keys[field] = key{el.Line, el}
			p.walk(el, field, v.Index(i))
		}
	case n.Kind != yaml.ScalarNode || k == reflect.Struct || k == reflect.Slice || k == reflect.Map,
		n.ShortTag() == "!!float" && k == reflect.Int, // yaml.v3 would truncate it
		n.Decode(v.Addr().Interface()) != nil:
		p.failAt(n.Line, path, typeMessage(n, t))
	}
}

// mapping decodes the mapping n into v, a section or a map of names.
func (p *parser) mapping(n *yaml.Node, path string, v reflect.Value) {
	t := v.Type()
	if t.Kind() == reflect.Map {
		v.Set(reflect.MakeMap(t))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.failAt(k.Line, path, typeMessage(k, reflect.TypeFor[string]()))
			continue
		}
		field, fv := join(path, keyName(k.Value)), fieldOf(v, k.Value)
		first, dup := seen[k.Value]
		switch {
		case k.ShortTag() == "!!merge":
			p.failAt(k.Line, field, "merge keys are not supported")
			continue
		case dup:
			p.failAt(k.Line, field, fmt.Sprintf("duplicate key (first at line %d)", first))
			continue
		}
		seen[k.Value] = k.Line
		if !fv.IsValid() {
			p.failAt(k.Line, field, unknownKey(field, k.Value, t))
			continue
		}
		if !isNull(val) {
			p.f.keys[field] = key{k.Line, val}
		}
		p.walk(val, field, fv)
		if t.Kind() == reflect.Map {
			v.SetMapIndex(reflect.ValueOf(k.Value), fv)
		}
	}
}

// fieldOf returns where the value of key name goes in v, a section or a
// map; invalid for an unknown key.
func fieldOf(v reflect.Value, name string) reflect.Value {
	if v.Kind() == reflect.Map {
		return reflect.New(v.Type().Elem()).Elem()
	}
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("yaml") == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// hints replace "unknown key" for keys people write by mistake.
var hints = map[string]string{
	"redis.password":          "passwords are not written in the configuration file: name an environment variable with password_env or a file with password_file",
	"redis.sentinel_password": "passwords are not written in the configuration file: name an environment variable with sentinel_password_env",
}

// unknownKey is the message for an unknown key of section.
func unknownKey(field, key string, section reflect.Type) string {
	if h, ok := hints[field]; ok {
		return h
	}
	best, bestDist := "", 3
	for i := range section.NumField() {
		name := section.Field(i).Tag.Get("yaml")
		if d := editDistance(key, name); d < bestDist || d == bestDist && name < best {
			best, bestDist = name, d
		}
	}
	if best != "" {
		return "unknown key (did you mean " + best + "?)"
	}
	return "unknown key"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := range len(a) {
		diag := row[0]
		row[0] = i + 1
		for j := range len(b) {
			sub := diag
			if a[i] != b[j] {
				sub++
			}
			diag, row[j+1] = row[j+1], min(row[j+1]+1, row[j]+1, sub)
		}
	}
	return row[len(b)]
}

// typeMessage says that n does not decode to t.
func typeMessage(n *yaml.Node, t reflect.Type) string {
	want := map[reflect.Kind]string{reflect.String: "a string", reflect.Bool: "true or false", reflect.Int: "a whole number",
		reflect.Slice: "a list of strings", reflect.Map: "a mapping of names to strings", reflect.Struct: "a section (a mapping of keys)"}[t.Kind()]
	got := describe(n)
	switch {
	case t == schemaType:
		return "the top level must be a mapping of sections (redis:, engine:, ...), got " + got
	case t == durationType && n.Kind == yaml.ScalarNode:
		return show(n.Value) + " is not a duration (examples: 30s, 500ms, 2m)"
	case t == durationType:
		want = "a duration such as 30s"
	case n.Kind == yaml.ScalarNode && !isNull(n) && (t.Kind() == reflect.Bool || t.Kind() == reflect.Int):
		got = show(n.Value)
	}
	return "expected " + want + ", got " + got
}

// describe names the kind of n for a type error: "a list", "a string".
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return cmp.Or(map[string]string{"!!null": "nothing", "!!bool": "a boolean", "!!int": "a whole number", "!!float": "a number"}[n.ShortTag()], "a string")
	}
	return cmp.Or(map[yaml.Kind]string{yaml.SequenceNode: "a list", yaml.MappingNode: "a mapping"}[n.Kind], "something else")
}

// resolve follows aliases (bounded, though aliasNodes refuses cycles).
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// keyName is a key as a path shows it: cut, quoted if not printable.
func keyName(k string) string {
	if strings.IndexFunc(k, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
		return strconv.Quote(clip(k))
	}
	return clip(k)
}

// fsReason is a file system error without the operation and path.
func fsReason(err error) string {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
