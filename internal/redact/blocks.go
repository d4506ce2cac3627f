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
