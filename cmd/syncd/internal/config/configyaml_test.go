package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
)

// checkedIn is the documented config.yaml at the root of the repository.
const checkedIn = "../../../../config.yaml"

func readCheckedIn(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(checkedIn)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The checked-in file is the newcomer demo: it loads, and runs the
// embedded store, demo items, the log sink and the HTTP server. Its text
// is parsed, not the checkout loaded: under umask 002 git checks it out
// 0664, which Load refuses (TestConfigFileMode).
func TestCheckedInConfigLoads(t *testing.T) {
	f, err := Parse(checkedIn, []byte(readCheckedIn(t)))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	st, err := f.Store(fakeEnv(nil), fakeFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	items, err := f.Items(fakeFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Embedded() || len(items) == 0 || f.SinkType() != SinkLog || f.Listen() == "" {
		t.Errorf("not the demo: embedded %v, %d items, sink %s, listen %q", st.Embedded(), len(items), f.SinkType(), f.Listen())
	}
	if err := f.Engine().Validate(); err != nil {
		t.Error(err)
	}
}

// docKey is a key found in the documented file, set or commented out.
type docKey struct {
	path  string
	line  int
	value string   // the text after "key:", for a key set on its line
	doc   []string // the comment lines right above it
}

var keyLine = regexp.MustCompile(`^([a-z_][a-z0-9_]*):(?:\s+(.*))?$`)

// docKeys finds the keys of a documented YAML file. A comment line whose
// text, after "# ", is "key:" or "key: value" is a commented-out key, at
// the indentation of the "#" plus that of the text; any other comment line
// is prose. A key's doc is the prose right above it. Children of
// map-valued keys (headers) are values, not keys.
func docKeys(t *testing.T, src string, maps []string) []docKey {
	t.Helper()
	type level struct {
		indent int
		name   string
	}
	var (
		stack []level
		keys  []docKey
		doc   []string
	)
	for i, raw := range strings.Split(src, "\n") {
		text := strings.TrimLeft(raw, " ")
		indent := len(raw) - len(text)
		if text == "" {
			doc = nil
			continue
		}
		if strings.HasPrefix(text, "#") {
			inner := strings.TrimPrefix(strings.TrimPrefix(text, "#"), " ")
			trimmed := strings.TrimLeft(inner, " ")
			if strings.HasPrefix(trimmed, "#") || !keyLine.MatchString(trimmed) {
				doc = append(doc, strings.TrimLeft(strings.TrimPrefix(trimmed, "#"), " "))
				continue
			}
			indent += len(inner) - len(trimmed)
			text = trimmed
		}
		m := keyLine.FindStringSubmatch(text)
		if m == nil {
			doc = nil // a list item or other value
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		var parts []string
		for _, l := range stack {
			parts = append(parts, l.name)
		}
		if len(parts) > 0 && slices.Contains(maps, strings.Join(parts, ".")) {
			doc = nil
			continue
		}
		path := strings.Join(append(parts, m[1]), ".")
		keys = append(keys, docKey{path: path, line: i + 1, value: m[2], doc: doc})
		stack = append(stack, level{indent, m[1]})
		doc = nil
	}
	return keys
}

// schemaKeys returns every dotted key of the schema, sections included, in
// the order of the schema, and the keys whose values are mappings of free
// names.
func schemaKeys() (keys, maps []string) {
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for i := range t.NumField() {
			ft := t.Field(i)
			key := yamlstrict.Join(path, ft.Tag.Get("yaml"))
			keys = append(keys, key)
			switch ft.Type.Kind() {
			case reflect.Map:
				maps = append(maps, key)
			case reflect.Struct:
				walk(ft.Type, key)
			}
		}
	}
	walk(reflect.TypeFor[schema](), "")
	return keys, maps
}

// Every key the loader knows is in config.yaml, set or commented out,
// exactly once, with a comment saying what it means; the comment of each
// value says its default (or that it is required). Commented-out values
// are well-typed. So the file cannot fall behind the loader.
func TestCheckedInConfigDocumentsEveryKey(t *testing.T) {
	src := readCheckedIn(t)
	known, maps := schemaKeys()
	keys := docKeys(t, src, maps)
	sections := make(map[string]bool)
	for _, k := range known {
		if i := strings.LastIndexByte(k, '.'); i >= 0 {
			sections[k[:i]] = true
		}
	}

	found := make(map[string][]int)
	for _, k := range keys {
		found[k.path] = append(found[k.path], k.line)
		if !slices.Contains(known, k.path) {
			t.Errorf("config.yaml:%d: %s: not a key the loader knows", k.line, k.path)
			continue
		}
		if len(k.doc) == 0 {
			t.Errorf("config.yaml:%d: %s: no comment right above it", k.line, k.path)
			continue
		}
		text := strings.ToLower(strings.Join(k.doc, " "))
		if !sections[k.path] && !strings.Contains(text, "default") && !strings.Contains(text, "required") {
			t.Errorf("config.yaml:%d: %s: the comment does not give the default", k.line, k.path)
		}
		if k.value != "" && !sections[k.path] {
			// Decode the value alone, at its place in the schema.
			var b strings.Builder
			parts := strings.Split(k.path, ".")
			for i, p := range parts[:len(parts)-1] {
				b.WriteString(strings.Repeat("  ", i) + p + ":\n")
			}
			b.WriteString(strings.Repeat("  ", len(parts)-1) + parts[len(parts)-1] + ": " + k.value + "\n")
			if err := decodeOnly(b.String()); err != nil {
				t.Errorf("config.yaml:%d: %s: the shown value does not decode: %v", k.line, k.path, err)
			}
		}
	}
	var missing, repeated []string
	for _, k := range known {
		switch n := len(found[k]); {
		case n == 0:
			missing = append(missing, k)
		case n > 1:
			repeated = append(repeated, k)
		}
	}
	if diff := cmp.Diff(missing, []string(nil)); diff != "" {
		t.Errorf("keys missing from config.yaml (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(repeated, []string(nil)); diff != "" {
		t.Errorf("keys in config.yaml more than once (-got +want):\n%s", diff)
	}
}

// decodeOnly decodes src without validating it.
func decodeOnly(src string) error {
	d, _ := yamlstrict.Decode("x", []byte(src), &schema{}, decodeOptions)
	return d.Err()
}

// The doc parser itself: commented keys, nesting and prose.
func TestDocKeys(t *testing.T) {
	src := `# Head.
a:
  # A's b. Default 1.
  b: 1
  # C, a section.
  # c:
  #   # D. Default x.
  #   d: x
  #   m:
  #     k: v
  # Prose: not a key.
e: {}
`
	var got []string
	for _, k := range docKeys(t, src, []string{"a.c.m"}) {
		got = append(got, k.path+"="+k.value+"|"+strings.Join(k.doc, " "))
	}
	want := []string{"a=|Head.", "a.b=1|A's b. Default 1.", "a.c=|C, a section.", "a.c.d=x|D. Default x.", "a.c.m=|", "e={}|Prose: not a key."}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("docKeys (-got +want):\n%s", diff)
	}
}
