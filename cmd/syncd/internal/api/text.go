package api

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/syncd/syncd/store"
)

// Shown makes text read back from Redis safe for a terminal or a log:
// control and other invisible characters are escaped as in Go strings (a
// planted ID must not move the cursor or change colours), and anything
// past n runes is cut, saying how long the whole was.
func Shown(s string, n int) string {
	var b strings.Builder
	for i, runes := 0, 0; i < len(s); runes++ {
		if runes == n {
			fmt.Fprintf(&b, "...(%d bytes)", len(s))
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r) || r == ' ':
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// Count is n and noun, plural but for one: "1 unknown id", "2 unknown
// ids". syncd's commands use it too.
func Count[N int | int64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// TriggerTrouble names the IDs a trigger did nothing with, nil when
// there are none. addHint is how the caller asks for unknown IDs to be
// added.
func TriggerTrouble(res store.TriggerResult, addHint string) error {
	var errs []error
	if n := len(res.Unknown); n > 0 {
		errs = append(errs, fmt.Errorf("%s (not in the item set; %s adds %s): %s", Count(n, "unknown id"), addHint, them(n), IDList(res.Unknown)))
	}
	if n := len(res.Quarantined); n > 0 {
		errs = append(errs, fmt.Errorf("%s not triggered (syncd requeue brings %s back): %s", Count(n, "quarantined id"), them(n), IDList(res.Quarantined)))
	}
	return errors.Join(errs...)
}

// them is the pronoun for n things.
func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// IDList shows ids for a message, each escaped and cut (see Shown).
func IDList(ids []string) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = cmp.Or(Shown(id, store.MaxIDLen), `""`)
	}
	return strings.Join(names, ", ")
}

// sinkNames are the names of syncd's sink packages, which start the text
// of every error a sink returns: "exec: item \"a\": exit status 3".
var sinkNames = []string{"exec", "http", "file", "log"}

// ItemError is the error an item's sync failed with, as status, the API
// and the web page show it in the item's row or detail: without the
// sink's name and the item's own id that start it ("exec: item \"a\":
// exit status 3" reads "exit status 3" for a), there or after the
// engine's words. A deployment has one sink, so its name tells nothing
// the configuration does not, as the package names cmd/syncd leaves out
// of its own errors (an outside trial read "exec:" and "http:" as
// syncd's internals); what a sink's error holds after them stays.
func ItemError(id, text string) string {
	return TargetError(dropSinkName(text, "item "+strconv.Quote(id)+": ", true))
}

// TargetError is the target's last error, as status, the API and the web
// page show it: without the sink's name (see ItemError), but with the
// item whose sync it was.
func TargetError(text string) string {
	return dropSinkName(text, `item "`, false)
}

// dropSinkName removes "<sink>: " from text where it starts a part
// (text's start, or after ": ") followed by next; with withNext, next
// goes too.
func dropSinkName(text, next string, withNext bool) string {
	for _, name := range sinkNames {
		prefix := name + ": " + next
		for i := 0; i+len(prefix) <= len(text); {
			j := strings.Index(text[i:], prefix)
			if j < 0 {
				break
			}
			j += i
			if j > 0 && !strings.HasSuffix(text[:j], ": ") {
				i = j + 1
				continue
			}
			cut := len(name) + 2
			if withNext {
				cut = len(prefix)
			}
			text = text[:j] + text[j+cut:]
			i = j
		}
	}
	return text
}

// pkgNames are the package names syncd's errors start each wrapped part
// with, as Go libraries do ("store: ..."); Plain drops them.
var pkgNames = map[string]bool{"store": true, "ownership": true, "engine": true, "sinks": true}

// Plain is err's text for a person, about the operation op (a command
// of syncd's, or an API action): without the package names that start
// its wrapped parts ("redis.addrs: store: connect to ..." reads
// "redis.addrs: connect to ..."), which say where in the code an error
// came from, not what it means (an operator's trial), and without the
// part after such a name that only repeats op ("syncd trigger: nothing
// triggered: store: trigger: reason: ..." read trigger twice: an outside
// trial). Each line of a joined error is read on its own. A part is what
// lies between ": " separators; a quoted id or value that holds one
// keeps its quote mark, so it is never dropped, and neither is a file's
// name (syncd status -c store: an outside trial read "no such file or
// directory" without it).
func Plain(err error, op string) string {
	var pe *fs.PathError
	path := ""
	if errors.As(err, &pe) {
		path = pe.Path
	}
	lines := strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = plainLine(l, path, op)
	}
	return strings.Join(lines, "\n")
}

// plainLine is one line of Plain: line without package names, or the
// part after one that is op, but for path.
func plainLine(line, path, op string) string {
	parts := strings.Split(line, ": ")
	kept := parts[:0]
	dropped := false
	for i, p := range parts {
		last := i == len(parts)-1
		switch {
		case p == path || last:
			dropped = false
		case pkgNames[p]:
			dropped = true
			continue
		case dropped && p == op:
			dropped = false
			continue
		default:
			dropped = false
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, ": ")
}
