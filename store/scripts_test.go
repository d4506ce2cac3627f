package store

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// helperProblems checks a script's list of prelude helpers against what
// its body calls, directly or through a listed helper: every helper
// called must be listed (else the script fails at run time), every one
// listed must exist and be called (else each call pays for a closure it
// never uses).
func helperProblems(helpers []helper, body string, listed []string) []string {
	byName := map[string]string{}
	for _, h := range helpers {
		byName[h.name] = h.text
	}
	var problems []string
	for _, name := range listed {
		if _, ok := byName[name]; !ok {
			problems = append(problems, "lists "+name+", which prelude.lua does not define")
		}
	}
	need := map[string]bool{}
	var visit func(text string)
	visit = func(text string) {
		for _, h := range helpers {
			if !need[h.name] && calls(text, h.name) {
				need[h.name] = true
				visit(h.text[strings.Index(h.text, "local function "):])
			}
		}
	}
	visit(body)
	for _, h := range helpers {
		switch in := slices.Contains(listed, h.name); {
		case need[h.name] && !in:
			problems = append(problems, "calls "+h.name+" but does not list it")
		case !need[h.name] && in:
			problems = append(problems, "lists "+h.name+" but never calls it")
		}
	}
	return problems
}

var luaComment = regexp.MustCompile(`--[^\n]*`)

// calls reports whether Lua text calls name, comments aside.
func calls(text, name string) bool {
	return regexp.MustCompile(`(^|[^\w.:])` + name + `\s*\(`).MatchString(luaComment.ReplaceAllString(text, ""))
}

// TestScriptHelpers: each script lists exactly the prelude helpers it
// calls, directly or through another helper.
func TestScriptHelpers(t *testing.T) {
	if len(scriptDefs) < 14 {
		t.Fatalf("%d scripts registered", len(scriptDefs))
	}
	for _, d := range scriptDefs {
		for _, p := range helperProblems(prelude, d.body, d.helpers) {
			t.Errorf("%s.lua: %s", d.name, p)
		}
	}
}

// The checker itself fails on each kind of mistake.
func TestHelperProblems(t *testing.T) {
	helpers := splitPrelude(`-- a file comment
local function a() return 1 end
-- b calls a
local function b(x)
  -- a comment that says c() is not a call
  return a() + x
end
local function c() return 3 end
`)
	var names []string
	for _, h := range helpers {
		names = append(names, h.name)
	}
	if diff := cmp.Diff(names, []string{"a", "b", "c"}); diff != "" {
		t.Fatalf("split (-got +want):\n%s", diff)
	}
	if !strings.HasPrefix(helpers[0].text, "-- a file comment\n") || !strings.HasPrefix(helpers[1].text, "-- b calls a\n") ||
		!strings.HasSuffix(helpers[1].text, "  return a() + x\nend\n") {
		t.Errorf("helpers keep their comments and bodies: %q", helpers)
	}
	tests := []struct {
		body   string
		listed []string
		want   []string
	}{
		{"return b(1)", []string{"a", "b"}, nil},
		{"return b(1)", []string{"b"}, []string{"calls a but does not list it"}},
		{"return a()", []string{"a", "c"}, []string{"lists c but never calls it"}},
		{"return a() -- and c()", []string{"a"}, nil},
		{"return x.c() + y:c() + ac()", nil, nil},
		{"return a()", []string{"a", "d"}, []string{"lists d, which prelude.lua does not define"}},
	}
	for _, tt := range tests {
		got := helperProblems(helpers, tt.body, tt.listed)
		if diff := cmp.Diff(got, tt.want); diff != "" {
			t.Errorf("helperProblems(%q, %q) (-got +want):\n%s", tt.body, tt.listed, diff)
		}
	}
}
