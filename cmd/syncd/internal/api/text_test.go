package api

import "testing"

// An item's error loses the sink's name and its own id where they start
// a part; anything else stays, os/exec's and net/http's own "exec:" and
// "http:" too. The target's error keeps the item.
func TestItemError(t *testing.T) {
	for _, tt := range []struct{ id, in, item, target string }{
		{"a", `exec: item "a": exit status 3; stderr: "boom"`, `exit status 3; stderr: "boom"`, `item "a": exit status 3; stderr: "boom"`},
		{"a", `http: item "a": status 500`, `status 500`, `item "a": status 500`},
		{"a", `file: item "a": write: no space left`, `write: no space left`, `item "a": write: no space left`},
		{"a", `log: item "a": simulated failure (call 3, every 3)`, `simulated failure (call 3, every 3)`, `item "a": simulated failure (call 3, every 3)`},
		{"a", `the target refused fence 7 as stale, though this claim was still current: http: item "a": status 409`,
			`the target refused fence 7 as stale, though this claim was still current: status 409`,
			`the target refused fence 7 as stale, though this claim was still current: item "a": status 409`},
		{"a\x1b", "exec: item \"a\\x1b\": exit status 1", "exit status 1", "item \"a\\x1b\": exit status 1"},
		// Another item's id stays in a row.
		{"a", `exec: item "b": exit status 1`, `item "b": exit status 1`, `item "b": exit status 1`},
		// The standard library's own prefixes stay.
		{"a", `exec: item "a": start: exec: "prog": executable file not found in $PATH`, `start: exec: "prog": executable file not found in $PATH`,
			`item "a": start: exec: "prog": executable file not found in $PATH`},
		{"a", `http: server gave HTTP response to HTTPS client`, `http: server gave HTTP response to HTTPS client`, `http: server gave HTTP response to HTTPS client`},
		{"a", `rehttp: item "a": x`, `rehttp: item "a": x`, `rehttp: item "a": x`},
		{"a", ``, ``, ``},
	} {
		if got := ItemError(tt.id, tt.in); got != tt.item {
			t.Errorf("ItemError(%q, %q) = %q, want %q", tt.id, tt.in, got, tt.item)
		}
		if got := TargetError(tt.in); got != tt.target {
			t.Errorf("TargetError(%q) = %q, want %q", tt.in, got, tt.target)
		}
	}
}
