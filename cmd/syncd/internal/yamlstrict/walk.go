package yamlstrict

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// walk decodes n, the value of the field at path, into v, recording where
// each field is set. A null leaves v zero: the default.
func (d *Decoder) walk(n *yaml.Node, path string, v reflect.Value) {
	n, t := resolve(n), v.Type()
	switch k := t.Kind(); {
	case isNull(n):
	case (k == reflect.Struct || k == reflect.Map) && n.Kind == yaml.MappingNode:
		d.mapping(n, path, v)
	case k == reflect.Slice && n.Kind == yaml.SequenceNode:
		v.Set(reflect.MakeSlice(t, len(n.Content), len(n.Content)))
		for i, el := range n.Content {
			field := fmt.Sprintf("%s[%d]", path, i)
			if el = resolve(el); isNull(el) {
				d.FailAt(el.Line, field, d.typeMessage(el, field, t.Elem())) // yaml.v3 would drop it
				continue
			}
			d.Keys[field] = Key{el.Line, el}
			d.walk(el, field, v.Index(i))
		}
	case n.Kind != yaml.ScalarNode || k == reflect.Struct || k == reflect.Slice || k == reflect.Map,
		n.ShortTag() == "!!float" && k == reflect.Int, // yaml.v3 would truncate it
		// yaml.v3 reads the strings y, yes, on, n, no, off (YAML 1.1's
		// booleans) into a bool, quoted or not, but refuses "true": only
		// true and false, unquoted, are booleans here (an operator's trial
		// found "yes" taken and "true" refused).
		k == reflect.Bool && n.ShortTag() != "!!bool",
		n.Decode(v.Addr().Interface()) != nil:
		d.FailAt(n.Line, path, d.typeMessage(n, path, t))
	}
}

// mapping decodes the mapping n into v, a section or a map of names.
func (d *Decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	t := v.Type()
	if t.Kind() == reflect.Map {
		v.Set(reflect.MakeMap(t))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			d.FailAt(k.Line, path, d.typeMessage(k, "", reflect.TypeFor[string]()))
			continue
		}
		field, fv := Join(path, KeyName(k.Value)), fieldOf(v, k.Value)
		first, dup := seen[k.Value]
		switch {
		case k.ShortTag() == "!!merge":
			d.FailAt(k.Line, field, "merge keys are not supported")
			continue
		case dup:
			d.FailAt(k.Line, field, fmt.Sprintf("duplicate key (first at line %d)", first))
			continue
		}
		seen[k.Value] = k.Line
		if !fv.IsValid() {
			d.FailAt(k.Line, field, d.unknownKey(field, k.Value, t))
			continue
		}
		if isNull(val) {
			d.Nulls[field] = Key{k.Line, val}
		} else {
			d.Keys[field] = Key{k.Line, val}
		}
		d.walk(val, field, fv)
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

// unknownKey is the message for an unknown key of section.
func (d *Decoder) unknownKey(field, key string, section reflect.Type) string {
	if h, ok := d.opt.Hints[field]; ok {
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

// typeMessage says that n, the value of field, does not decode to t.
func (d *Decoder) typeMessage(n *yaml.Node, field string, t reflect.Type) string {
	want := map[reflect.Kind]string{reflect.String: "a string", reflect.Bool: "true or false", reflect.Int: "a whole number",
		reflect.Slice: "a list of strings", reflect.Map: "a mapping of names to strings", reflect.Struct: "a section (a mapping of keys)"}[t.Kind()]
	if w, ok := d.opt.Want[field]; ok && field != "" {
		want = w
	}
	got := describe(n)
	switch {
	case t == d.val.Type() && d.opt.TopLevel != "":
		return d.opt.TopLevel + ", got " + got
	case t == durationType && n.Kind == yaml.ScalarNode && durationTooLarge(n.Value):
		return d.opt.Show(n.Value) + fmt.Sprintf(" is too large (at most %dh)", math.MaxInt64/int64(time.Hour))
	case t.Kind() == reflect.Int && n.Kind == yaml.ScalarNode && n.ShortTag() != "!!str" && intOutOfRange(n.Value):
		if strings.HasPrefix(n.Value, "-") {
			return n.Value + fmt.Sprintf(" is too small (at least %d)", math.MinInt)
		}
		return n.Value + fmt.Sprintf(" is too large (at most %d)", math.MaxInt)
	case t == durationType && n.Kind == yaml.ScalarNode:
		return d.opt.Show(n.Value) + " is not a duration (examples: 30s, 500ms, 2m)"
	case t == durationType:
		want = "a duration such as 30s"
	case n.Kind == yaml.ScalarNode && !isNull(n) && (t.Kind() == reflect.Bool || t.Kind() == reflect.Int):
		got = d.opt.Show(n.Value)
	}
	return "expected " + want + ", got " + got
}

// durationSyntax is a duration as time.ParseDuration writes it, without
// a sign: a run of numbers, each with its unit.
var durationSyntax = regexp.MustCompile(`^\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// durationTooLarge reports whether s is written as a duration but is
// past the largest time.Duration, about 292 years, which ParseDuration
// refuses as it refuses a typo: ttl: 99999999999h said it "is not a
// duration" (an outside trial).
func durationTooLarge(s string) bool {
	_, err := time.ParseDuration(s)
	return err != nil && durationSyntax.MatchString(s)
}

// intOutOfRange reports whether s is written as a whole number that
// does not fit an int (YAML tags one past uint64 a float): it said
// `expected a whole number, got "99999999999999999999"`.
func intOutOfRange(s string) bool {
	_, err := strconv.ParseInt(s, 0, strconv.IntSize)
	return errors.Is(err, strconv.ErrRange)
}

// describe names the kind of n for a type error: "a list", "a string".
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return cmp.Or(map[string]string{"!!null": "nothing", "!!bool": "a boolean", "!!int": "a whole number", "!!float": "a number"}[n.ShortTag()], "a string")
	}
	return cmp.Or(map[yaml.Kind]string{yaml.SequenceNode: "a list", yaml.MappingNode: "a mapping"}[n.Kind], "something else")
}

// RefuseZeros reports each field set to its type's zero where effective,
// the decoded struct with its defaults applied, is not zero: where a zero
// means "the default", `workers: 0` must not quietly run 4 workers. It
// reports too each whole number or duration set to nothing (`shards:`
// alone, ~ or null), whatever its default: nothing is no number, and a
// key written without one (a value forgotten, or a template's variable
// that expanded to nothing) must not quietly take the default, which
// for redis.shards then named a deployment of 16 shards. A section, a
// string, a list or a boolean set to nothing is its zero, as before. A
// field that failed to decode is left to its own problem.
func (d *Decoder) RefuseZeros(effective any) {
	d.refuseZeros(d.val, reflect.ValueOf(effective), "")
}

func (d *Decoder) refuseZeros(file, eff reflect.Value, path string) {
	for i := range file.NumField() {
		field := Join(path, file.Type().Field(i).Tag.Get("yaml"))
		fv, ev := file.Field(i), eff.Field(i)
		_, set := d.Keys[field]
		null, isNull := d.Nulls[field]
		switch {
		case fv.Kind() == reflect.Struct:
			d.refuseZeros(fv, ev, field)
		case isNull && (fv.Kind() == reflect.Int || fv.Type() == durationType):
			want := "a whole number"
			if fv.Type() == durationType {
				want = "a duration such as 30s"
			}
			d.Add(&FieldError{File: d.Name, Line: null.Line, Field: field,
				Msg: "expected " + want + ", got nothing: give one, or leave the key out for the default (" + d.text(ev) + ")"})
		case set && fv.IsZero() && !ev.IsZero() && !d.Failed(field):
			msg := d.text(fv) + " is not allowed: leave the key out for the default (" + d.text(ev) + ")"
			if w, ok := d.opt.Want[field]; ok {
				// What the key takes, too (an outside trial read only
				// that "" is not allowed).
				msg = "expected " + w + ", got " + d.text(fv)
			}
			d.Add(&FieldError{File: d.Name, Line: d.Keys[field].Line, Field: field, Msg: msg})
		}
	}
}

// text is a scalar as a message shows it: a string by Show, a duration
// as FormatDuration writes it.
func (d *Decoder) text(v reflect.Value) string {
	if v.Kind() == reflect.String {
		return d.opt.Show(v.String())
	}
	return scalarText(v)
}

// resolve follows aliases (bounded, though aliasNodes refuses cycles).
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// Join appends key to the dotted path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// KeyName is a key as a path shows it: cut, quoted if not printable.
func KeyName(k string) string {
	if strings.IndexFunc(k, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
		return strconv.Quote(Clip(k))
	}
	return Clip(k)
}
