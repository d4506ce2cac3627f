package yamlstrict

import (
	"bytes"

	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Options shape the decoder's messages.
type Options struct {
	// Hints replace "unknown key" for dotted fields people write by
	// mistake ("redis.password": "use password_env").
	Hints map[string]string
	// TopLevel is the message when the document is not a mapping, before
	// ", got a list"; "" for the generic type message.
	TopLevel string
	// Want replaces what a type error says a dotted field expects ("a
	// string") for fields that take one of a few words: "log (the
	// default), exec, http or file".
	Want map[string]string
	// Show quotes a value for a message; nil for strconv.Quote of Clip.
	// A caller that redacts secrets passes its own.
	Show func(string) string
}

// Key is where a field is set: the line of the key or list element, and
// the value (aliases followed).
type Key struct {
	Line int
	Val  *yaml.Node
}

// Keys maps dotted fields to where they are set.
type Keys map[string]Key

// Line returns the line of field, else of the first of alt that is set,
// else of the nearest section around field that is set; 0 if none is: a
// problem with a field left out is shown where its section is.
func (k Keys) Line(field string, alt ...string) int {
	for _, f := range append([]string{field}, alt...) {
		if key, ok := k[f]; ok {
			return key.Line
		}
	}
	for f := field; f != ""; {
		f = f[:max(strings.LastIndexAny(f, ".["), 0)]
		if key, ok := k[f]; ok {
			return key.Line
		}
	}
	return 0
}

// Decoder holds what Decode found: where each field is set, and the
// problems. A caller that validates further adds its own with Add.
type Decoder struct {
	Name     string
	Keys     Keys          // dotted field -> where it is set, for fields set to a non-null value
	Nulls    Keys          // dotted field -> where it is set to nothing (`key:` alone, ~ or null)
	Bad      Fields        // fields that did not decode: rules about them are best skipped
	Problems Fields        // fields with a problem: Bad's and those Add was given; "" for the whole file
	errs     []*FieldError // the first maxKept problems
	dropped  int           // and how many more
	opt      Options
	val      reflect.Value // the struct decoded into
}

// Fields is a set of dotted fields.
type Fields map[string]bool

// Has reports whether the set holds any of fields, a field inside one,
// or "" (the whole file).
func (s Fields) Has(fields ...string) bool {
	for b := range s {
		for _, f := range fields {
			if b == "" || b == f || strings.HasPrefix(b, f+".") || strings.HasPrefix(b, f+"[") {
				return true
			}
		}
	}
	return false
}

// Failed reports whether any of fields, anything inside one, or the whole
// file failed to decode: rules about its value (the zero left in its
// place) would mislead.
func (d *Decoder) Failed(fields ...string) bool { return d.Bad.Has(fields...) }

// Add keeps fe, or counts it past maxKept: a hostile file can have
// hundreds of thousands. Its field is in Problems either way.
func (d *Decoder) Add(fe *FieldError) {
	d.Problems[fe.Field] = true
	if len(d.errs) < maxKept {
		d.errs = append(d.errs, fe)
	} else {
		d.dropped++
	}
}

// FailAt reports that field, at line, did not decode.
func (d *Decoder) FailAt(line int, field, msg string) {
	d.Bad[field] = true
	d.Add(&FieldError{File: d.Name, Line: line, Field: field, Msg: msg})
}

// Err returns every problem added, as List does; nil if none.
func (d *Decoder) Err() error { return List(d.errs, d.dropped) }

var (
	durationType = reflect.TypeFor[time.Duration]()
	yamlLine     = regexp.MustCompile(`^yaml: line (\d+): `)
)

// Decode parses data, the contents of the file called name, into the
// struct into points to. ok is false when the file is beyond validating:
// not YAML, or not one document of sane size. An empty document leaves
// into zero. Every problem is in the Decoder (Err).
func Decode(name string, data []byte, into any, opt Options) (d *Decoder, ok bool) {
	v := reflect.ValueOf(into).Elem()
	d = &Decoder{Name: name, Keys: Keys{}, Nulls: Keys{}, Bad: Fields{}, Problems: Fields{}, opt: opt, val: v}
	if d.opt.Show == nil {
		d.opt.Show = func(s string) string { return strconv.Quote(Clip(s)) }
	}
	if len(data) > MaxFileSize {
		d.FailAt(0, "", fmt.Sprintf("larger than %d bytes (1 MiB), the limit for a configuration file", MaxFileSize))
		return d, false
	}
	docs, err := parseDocs(data)
	switch {
	case err != nil:
		d.FailAt(errorLine(data, err), "", "malformed YAML: "+strings.TrimPrefix(yamlLine.ReplaceAllString(err.Error(), ""), "yaml: "))
		return d, false
	case len(docs) > 1:
		d.FailAt(docs[1].Line, "", "a second YAML document: the file must hold one")
		return d, false
	case len(docs) == 0 || len(docs[0].Content) == 0:
		return d, true // empty: every value is its default
	}
	root := docs[0].Content[0]
	if n, at := aliasNodes(root); n > maxAliasNodes {
		d.FailAt(at, "", fmt.Sprintf("aliases expand to more than %d values; a configuration needs a few at most", maxAliasNodes))
		return d, false
	}
	if err := safely(func() error { d.walk(root, "", v); return nil }); err != nil {
		d.FailAt(0, "", strings.TrimPrefix(err.Error(), "yaml: "))
		return d, false
	}
	return d, true
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

// MaxShown bounds a value or key quoted in a message.
const MaxShown = 80

// Clip cuts s to 80 bytes, on a character boundary, marking the cut.
func Clip(s string) string {
	if len(s) <= MaxShown {
		return s
	}
	i := MaxShown
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
