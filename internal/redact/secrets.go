package redact

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// What a sink shows of the secrets of its configuration: nothing. Its
// errors are logged and stored with the item, where `syncd status`, the
// API and the web page show them, and the text it quotes in them (a
// target's response, a command's stderr) may echo a secret.
const (
	// Redacted replaces a known secret in text.
	Redacted = "[redacted]"
	// MinSecret is the shortest value Secrets hides: replacing "1" or
	// "ok" everywhere would garble the text and hide nothing worth
	// hiding.
	MinSecret = 4
)

// Secrets hides known secret values in text.
type Secrets struct {
	list []string // longest first, so that a secret inside another goes with it
	r    *strings.Replacer
}

// NewSecrets collects values (trimmed, each at least MinSecret long)
// with their escaped forms (escapes): a command or a target that prints
// a secret inside a URL, a JSON document or a Go-quoted string shows it
// escaped, as {"pw":"Pw0rd\u0026\u003cx\u003e\"q\""} for Pw0rd&<x>"q".
func NewSecrets(values ...string) *Secrets {
	var list []string
	for _, v := range values {
		v = strings.TrimSpace(v)
		if len(v) >= MinSecret {
			list = append(list, escapes(v)...)
		}
	}
	slices.SortFunc(list, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	list = slices.Compact(list)
	pairs := make([]string, 0, 2*len(list))
	for _, s := range list {
		pairs = append(pairs, s, Redacted)
	}
	return &Secrets{list: list, r: strings.NewReplacer(pairs...)}
}

// escapes returns v and the forms it takes escaped: in a URL's query and
// path, inside a JSON string as encoding/json writes it (<, > and & as
// \u003c...) and as JSON.stringify or Python's json do (only quotes,
// backslashes and control characters; Python's also every non-ASCII
// character as \u00e9), and inside a Go-quoted string (%q, %+q).
func escapes(v string) []string {
	out := []string{v, url.QueryEscape(v), url.PathEscape(v), strconv.Quote(v), strconv.QuoteToASCII(v)}
	for _, html := range []bool{true, false} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(v) == nil {
			out = append(out, strings.TrimSuffix(b.String(), "\n"))
		}
	}
	out = append(out, asciiJSON(out[len(out)-1]))
	for i, q := range out[3:] { // the quoted forms, without their quotes
		out[3+i] = q[1 : len(q)-1]
	}
	return out
}

// asciiJSON returns q, a JSON string, with each character beyond ASCII
// escaped as Python's json.dumps writes it: \u00e9, and a surrogate
// pair beyond the Basic Multilingual Plane.
func asciiJSON(q string) string {
	var b strings.Builder
	for _, r := range q {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, "\\u%04x\\u%04x", r1, r2)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

// Longest returns the length of the longest secret, 0 when there is none.
func (s *Secrets) Longest() int {
	if len(s.list) == 0 {
		return 0
	}
	return len(s.list[0])
}

// Clean returns text with every secret replaced and every URL shown as
// Display shows it.
func (s *Secrets) Clean(text string) string {
	return URLs(s.r.Replace(text), Display)
}

// CleanPairs is Clean with Pairs between the two, as Tail does: the
// secrets go first, since a secret of several words that Pairs cut at its
// first ("token=hunter two words" to "token=xxxxx two words") was no
// longer found, and Pairs before URLs, which keeps the host of a URL
// with user information that a secret's name names.
func (s *Secrets) CleanPairs(text string) string {
	return URLs(Pairs(s.r.Replace(text)), Display)
}

// Extend returns end moved forward past any secret in b that starts
// before end and ends after it, so that cutting b at end does not leave a
// piece of a secret that Clean cannot recognise.
func (s *Secrets) Extend(b []byte, end int) int {
	for changed := true; changed; {
		changed = false
		for _, sec := range s.list {
			for i := max(0, end-len(sec)+1); i < end; i++ {
				if i+len(sec) > end && i+len(sec) <= len(b) && string(b[i:i+len(sec)]) == sec {
					end = i + len(sec)
					changed = true
					break
				}
			}
		}
	}
	return end
}

// CleanTail is Clean for the end of a longer text, which then starts
// with "…": a secret cut in two at its start would leave a piece Clean
// cannot recognise, so a start that is the end of a secret goes first
// (the longest such piece, and any UTF-8 sequence that leaves cut).
func (s *Secrets) CleanTail(tail string) string {
	return URLs(s.replaceTail(tail), Display)
}

// replaceTail is CleanTail but for URLs: tail with its secrets replaced.
func (s *Secrets) replaceTail(tail string) string {
	rest, cut := strings.CutPrefix(tail, "…")
	if !cut {
		return s.r.Replace(tail)
	}
	// Again while the new start is such a piece too (FuzzCleanTail: a
	// secret's end repeated, "en-1234en-1234" for "0en-1234", or one
	// behind the rest of a UTF-8 sequence the cut split).
	for drop := -1; drop != 0; rest = rest[drop:] {
		drop = 0
		for _, sec := range s.list {
			for k := min(len(sec)-1, len(rest)); k > drop; k-- {
				if strings.HasPrefix(rest, sec[len(sec)-k:]) {
					drop = k
					break
				}
			}
		}
		for i := 0; i < 3 && drop < len(rest) && rest[drop]&0xC0 == 0x80; i++ {
			drop++
		}
	}
	return s.r.Replace("…" + rest)
}

// Tail hides the secrets in the end of a command's stderr that an error
// quotes: s's values, credentials named as such (Pairs) and URLs'
// secrets (Clean). A tail that was cut (it starts with "…") also loses
// its whole first line, through its newline: the cut may have fallen
// inside what marks a credential (AUTH, -u, password:, Authorization:
// Bearer), whose rest no longer says that the words after it are one
// (redis-cli AUTH bob pw cut to "…H bob pw"). What marks a credential
// is on its line, but for a pair whose value is on the next line
// (password:\n  pw, which Pairs hides too): when the line dropped ends
// with : or =, or the next starts with one, the next line's first value
// is read as a secret name's (password). When it ends with a YAML block
// scalar's indicator (|, >-: cutBlockHead) and lines more indented than
// it follow, those are read as a secret's block (yamlBlocks): the key
// that said whether they are one may be what the cut took. A cut in a
// comment after the indicator, or in the block itself, leaves no sign
// of one, and the block's lines after it show: hiding every indented
// line after a cut would take a traceback's frames too.
//
// A tail with no newline in it, one line longer than the tail, is all
// that cut line: it shows what follows the line's first clause, where
// the rest of a credential cut off ends (cutLine), or "…" alone.
func Tail(tail string, s *Secrets) string {
	// Pairs before URLs: a secret's name keeps the host of a URL with
	// user information that it names (secretURL), which Display removes.
	return URLs(cutTail(s.replaceTail(tail)), Display)
}

// cutTail is Tail for tail with its secrets replaced, but for URLs.
func cutTail(tail string) string {
	rest, cut := strings.CutPrefix(tail, "…")
	if !cut {
		return Pairs(tail)
	}
	first, rest, ok := strings.Cut(rest, "\n")
	if !ok {
		return cutLine(first)
	}
	name := "" // the first line's end, a secret's name's maybe
	switch end := strings.TrimRight(first, " \t\r"); {
	case (end == "" || cutBlockHead.MatchString(end)) && blockAfterName(rest):
		// Cut at a line's end, the whole key line before the cut: the
		// lines more indented after it may be its block, or the value
		// of password: on the next line (an outside trial).
		name = blockName
	case strings.HasSuffix(end, "-") && pemBody.MatchString(rest):
		// Cut in a private key's BEGIN line: its body follows.
		name = pemName
	case strings.HasSuffix(end, ":"), strings.HasSuffix(end, "="):
		name = "password:\n"
	case strings.HasPrefix(strings.TrimLeft(rest, " \t"), ":"), strings.HasPrefix(strings.TrimLeft(rest, " \t"), "="):
		name = "password\n"
	}
	if out, ok := strings.CutPrefix(Pairs(name+rest), name); ok {
		return "…\n" + out
	}
	return "…" // Pairs changed the name: it never does
}

// cutBlockHead matches the end of a line that a YAML block scalar's
// indicator ends (blockHead), as much of it as a cut may leave: key: >-,
// !!binary | # comment, |, or the - of |- alone.
var cutBlockHead = regexp.MustCompile(`(?:(?:^|[ \t:])[|>][1-9+-]{0,2}(?:[ \t]+#.*)?|^[1-9+-]{1,2})$`)

// blockName is the secret's key that Tail puts before the lines after a
// cut line that ended with a block's indicator.
const blockName = "password: |\n"

// pemName is the BEGIN line that Tail puts before the lines after a cut
// line that ended with a dash when they start as a key's body does
// (pemBody): the cut may have taken the BEGIN line's PRIVATE KEY.
const pemName = "-----BEGIN PRIVATE KEY-----\n"

// pemBody matches the start of a PEM body: a line of base64 of some
// length, or a header (Proc-Type:, DEK-Info:, an OpenPGP key's
// Version:), or a blank line after which one comes.
var pemBody = regexp.MustCompile(`^(?:[ \t]*\r?\n)?[ \t]*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\n]*)[ \t]*\r?(?:\n|$)`)

// blockAfterName reports whether rest, the lines after a cut line, start
// with a block (blockAfter) once blockName is put before them.
func blockAfterName(rest string) bool {
	s, e := blockAfter(blockName+rest, len(blockName)-1)
	return s < e
}
