package yamlstrict

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// EncodeOptions shape Encode's output.
type EncodeOptions struct {
	// Comment is the document's head comment; "" for none.
	Comment string
	// Omit reports whether the field at a dotted path is left out; nil
	// keeps every field.
	Omit func(path string) bool
	// String returns what is written for s, a string at a dotted path (a
	// list's elements have the list's path, a map's values the map's path
	// and their key); nil writes s. A caller that redacts secrets passes
	// its own.
	String func(path, s string) string
	// Notes are line comments, by dotted path, for fields at their zero
	// value or empty: what a zero means where it is not "nothing".
	Notes map[string]string
}

// Encode writes v, a struct of the field types Decode reads (sections,
// string, bool, int, time.Duration, []string and map[string]string), as
// one YAML document: the keys of the yaml tags in the order of the
// fields, map keys sorted, two-space indentation, durations as
// FormatDuration writes them, strings quoted where they would read as
// another type, empty lists and maps as [] and {}. Decode reads the
// output back to v, but for what Omit and String change.
func Encode(v any, opt EncodeOptions) ([]byte, error) {
	if opt.Omit == nil {
		opt.Omit = func(string) bool { return false }
	}
	if opt.String == nil {
		opt.String = func(_, s string) string { return s }
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, HeadComment: opt.Comment, Content: []*yaml.Node{opt.node(reflect.ValueOf(v), "")}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := errors.Join(enc.Encode(doc), enc.Close()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// node renders v, the value of the field at path, as a YAML node.
func (opt *EncodeOptions) node(v reflect.Value, path string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			key := v.Type().Field(i).Tag.Get("yaml")
			if field := Join(path, key); !opt.Omit(field) {
				n.Content = append(n.Content, str(key), opt.node(v.Field(i), field))
			}
		}
		return n
	case reflect.Map:
		m := v.Interface().(map[string]string)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			n.Content = append(n.Content, str(k), str(opt.String(Join(path, k), m[k])))
		}
	case reflect.Slice:
		n.Kind = yaml.SequenceNode
		for i := range v.Len() {
			n.Content = append(n.Content, str(opt.String(path, v.Index(i).String())))
		}
	case reflect.String:
		n = str(opt.String(path, v.String()))
	default: // a bool, a number or a duration, which yaml.v3 tags itself
		n = &yaml.Node{Kind: yaml.ScalarNode, Value: scalarText(v)}
	}
	if n.Kind != yaml.ScalarNode && len(n.Content) == 0 {
		n.Style = yaml.FlowStyle
	}
	if v.IsZero() || n.Style == yaml.FlowStyle {
		n.LineComment = opt.Notes[path]
	}
	return n
}

// str is a string's node, quoted where it would read as another type or
// lose characters.
func str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	switch {
	case s == "<<": // yaml.v3 writes it plain, and reads it back as a merge key
		n.Style = yaml.DoubleQuotedStyle
	case strings.ContainsAny(s, "\n\r\t"):
		// yaml.v3 writes a line break as a literal block, which loses
		// leading line breaks and blanks ("\n0" reads back "0") and
		// cannot hold a tab at the start of a line: quoted, it escapes
		// them (FuzzEncode found it).
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// scalarText is a bool, number or duration as a file would write it.
func scalarText(v reflect.Value) string {
	if v.Type() == durationType {
		return FormatDuration(time.Duration(v.Int()))
	}
	return fmt.Sprint(v.Interface())
}

// FormatDuration is time.Duration.String without the zero tails that make
// "1m0s" out of a minute.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
