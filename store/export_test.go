package store

import "strings"

// PreludeHelpers returns the text of the named prelude helpers, in the
// prelude's order, for tests of the helpers themselves.
func PreludeHelpers(names ...string) string {
	var b strings.Builder
	for _, h := range prelude {
		for _, n := range names {
			if h.name == n {
				b.WriteString(h.text)
			}
		}
	}
	return b.String()
}

// EncodeMeta is encodeMeta, for tests.
var EncodeMeta = encodeMeta
