package redact

import (
	"regexp"
	"strings"
)

// blockKey finds a YAML key with a block scalar's indicator after it and
// nothing more on its line but a comment: password: |, key: >-, a tag or
// an anchor between them maybe (cert: !!binary |). Its first group is
// the key; its second, the indicator, | or > and an indentation digit or
// a chomping + or - maybe.
var blockKey = regexp.MustCompile(`(?m)` + name + `["']?[ \t]*:[ \t]*(?:[!&][^\s]*[ \t]+)*([|>][1-9+-]{0,2})[ \t]*(?:[ \t]#[^\n]*)?\r?$`)

// blockHead matches what follows a YAML key on its line when a block
// scalar is its value: tags or anchors maybe, the indicator, a comment
// maybe.
var blockHead = regexp.MustCompile(`^(?:[!&][^\s]*[ \t]+)*[|>][1-9+-]{0,2}(?:[ \t]+#.*)?[ \t]*\r?$`)

// yamlBlocks hides the value of each YAML block scalar whose key names a
// secret (pairName): the lines after password: | or key: >- that are
// more indented than the key's line, blank lines among them, are
// replaced with one line of xxxxx at the first one's indentation; the
// key, its indicator and the lines after the block stay. A PEM key or a
// password is written so, and Pairs' pairs read a value on the key's
// line only, where the indicator is (an outside trial saw the block
// whole).
func yamlBlocks(text string) string {
	out := splicer{text: text}
	for _, m := range blockKey.FindAllStringSubmatchIndex(text, -1) {
		if m[0] < out.done || !pairName(text, m[2], m[3]) {
			continue // inside a block hidden, or not a secret's
		}
		start, end := blockAfter(text, m[1])
		if start < end && text[start:end] != Masked {
			out.replace(start, end, Masked)
		}
	}
	return out.String()
}

// blockAfter returns where the block that follows the line ending at i
// in text starts and ends: from its first line's first character that
// is not a blank to its last line's last one (before a \r). A block is
// the lines after that line that are more indented than it, and the
// blank lines among them; start == end when there is none.
func blockAfter(text string, i int) (start, end int) {
	lineStart := strings.LastIndexByte(text[:i], '\n') + 1
	indent := len(text[lineStart:]) - len(strings.TrimLeft(text[lineStart:], " \t"))
	start, end = -1, -1
	for i < len(text) && text[i] != '\n' {
		i++ // a comment, a \r
	}
	for i < len(text) {
		lineStart = i + 1
		lineEnd := strings.IndexByte(text[lineStart:], '\n')
		if lineEnd < 0 {
			lineEnd = len(text)
		} else {
			lineEnd += lineStart
		}
		line := strings.TrimRight(text[lineStart:lineEnd], " \t\r")
		if content := strings.TrimLeft(line, " \t"); content != "" {
			if len(line)-len(content) <= indent {
				break
			}
			if start < 0 {
				start = lineStart + len(line) - len(content)
			}
			end = lineStart + len(line)
		}
		i = lineEnd
	}
	if start < 0 {
		return 0, 0
	}
	return start, end
}

// blockHidden reports whether the value of a pair that starts at start
// in text is a YAML block scalar's indicator, or a tag or an anchor
// before one, at the end of its line (blockHead), with a block after it
// (blockAfter) that yamlBlocks hid: the block was the value, and the
// rest of the key's line stays.
func blockHidden(text string, start int) bool {
	eol := strings.IndexByte(text[start:], '\n')
	if eol < 0 {
		eol = len(text) - start
	}
	if !blockHead.MatchString(text[start : start+eol]) {
		return false
	}
	s, e := blockAfter(text, start+eol)
	return text[s:e] == Masked
}

// pemBegin and pemEnd find the armour lines of a PEM private key
// (-----BEGIN RSA PRIVATE KEY-----, ENCRYPTED, OPENSSH, or none), and of
// an OpenPGP one (-----BEGIN PGP PRIVATE KEY BLOCK-----).
var (
	pemBegin = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
	pemEnd   = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
)

// pemLine matches a line of a PEM body: base64, or a header of an
// encrypted key's (Proc-Type: 4,ENCRYPTED, DEK-Info: ...).
var pemLine = regexp.MustCompile(`^[ \t]*(?:[A-Za-z0-9+/=]+|[A-Za-z-]+: [^\n]*)[ \t]*\r?$`)

// pemKeys hides the body of each PEM private key in text: what is
// between its BEGIN and END lines (to the text's end when it has none),
// on lines or in one line with its newlines escaped (a JSON body), is
// replaced with xxxxx; the armour lines stay, so that what was there
// still shows. A text that starts inside a key (a tail cut in it) holds
// an END line with no BEGIN before it: the lines of its body just above
// that END are hidden. A command that prints its key, or a config it
// echoes, showed it whole: no name says it is a secret.
func pemKeys(text string) string {
	if !strings.Contains(text, "PRIVATE KEY") {
		return text
	}
	out := splicer{text: text}
	for at := 0; at < len(text); {
		b := pemBegin.FindStringIndex(text[at:])
		e := pemEnd.FindStringIndex(text[at:])
		switch {
		case e != nil && (b == nil || e[0] < b[0]):
			// An END first: the body above it, from a cut.
			end := strings.LastIndexByte(text[at:at+e[0]], '\n') + 1 + at // the END's line
			start := end
			for start > at {
				prev := strings.LastIndexByte(text[at:start-1], '\n') + 1 + at
				if !pemLine.MatchString(text[prev : start-1]) {
					break
				}
				start = prev
			}
			if start < end {
				out.replace(start, end, Masked+"\n")
			}
			at += e[1]
		case b != nil:
			start, end, next := at+b[1], len(text), len(text)
			if e := pemEnd.FindStringIndex(text[start:]); e != nil {
				end, next = start+e[0], start+e[1]
			}
			start, end = trimPEM(text, start, end)
			if start < end && text[start:end] != Masked {
				out.replace(start, end, Masked)
			}
			at = next
		default:
			at = len(text)
		}
	}
	return out.String()
}

// trimPEM returns text[start:end] without the blanks and newlines, real
// or escaped (\n, \r\n in a JSON or Go string), at its ends.
func trimPEM(text string, start, end int) (int, int) {
	for start < end {
		n := pemSpace(text[start:end], true)
		if n == 0 {
			break
		}
		start += n
	}
	for start < end {
		n := pemSpace(text[start:end], false)
		if n == 0 {
			break
		}
		end -= n
	}
	return start, end
}

// pemSpace returns the length of the blank or newline, real or escaped,
// at the start of s (first) or its end, 0 when there is none.
func pemSpace(s string, first bool) int {
	c := s[len(s)-1]
	if first {
		c = s[0]
	}
	if strings.IndexByte(" \t\r\n", c) >= 0 {
		return 1
	}
	for _, esc := range []string{`\n`, `\r`} {
		if first && strings.HasPrefix(s, esc) || !first && strings.HasSuffix(s, esc) {
			return 2
		}
	}
	return 0
}
