package redact

import (
	"regexp"
	"strings"
)

// cutLine returns what Tail shows of line, all that is left of a tail
// cut in its only line: "…" and the line's end after its first clause
// (clauseEnd), with Pairs' credentials hidden in the whole line first,
// so that a name it still shows hides its value wherever the clause
// ends. The cut may have fallen inside what marks a credential (AUTH,
// -u, password:, Authorization: Bearer, a JSON key), whose rest no
// longer says that the words after it are one; those words run at most
// to the end of the clause: of a Redis command's words, of a quoted
// string, of a list of auth-params. What follows the first clause is
// read as the lines after a cut line are, with three more rules for
// what the cut may still reach there:
//
//   - when the clause ends with the : or = of its first word, and that
//     word may be the end of a secret's name (cutName: ssword: for
//     password:, ization: for Authorization:, 00: for KEY00:, any word
//     but one that says the value is about a secret, as TTL: does), the
//     first value after it is read as that name's;
//   - the values of the password flags of any command that Pairs knows
//     (anyPasswordFlags: -p, -a, -u, --pass, ...) are hidden up to the
//     end of the command the cut line starts in, whose name the cut may
//     have taken (curl -u a:pw cut to "…rl -v: x -u a:pw");
//   - a private key's body that an END line follows, with no BEGIN line
//     before it, goes to that END line (a key on one line, its newlines
//     escaped as in a JSON string).
//
// A line with no clause end shows "…" alone: all of it may be the words
// of a Redis AUTH whose name was cut off (redis-cli AUTH éééé THE END).
func cutLine(line string) string {
	out := Pairs(line)
	end := clauseEnd(out)
	if e := pemEnd.FindStringIndex(out); e != nil && e[1] > end {
		if b := pemBegin.FindStringIndex(out); b == nil || b[0] > e[0] {
			end = e[1] // the body of a key cut in it, on one line
		}
	}
	if end >= len(out) {
		return "…"
	}
	shown := anyPasswordFlags(out[end:])
	name := cutName(out[:end], shown)
	if s, ok := strings.CutPrefix(Pairs(name+shown), name); ok {
		return "…" + s
	}
	return "…" // Pairs changed the name: it never does
}

// clauseEnd returns where the first clause of text, a cut line, ends:
// after the first word (outside quotes) that ends with : , or ; (error:,
// a,), after the : , or ; right after a closing quote ("key":, compact
// JSON), or after a word that is only such marks and | or & (a command's
// end: ; | &&); len(text) when there is none. Those end a Redis
// command's words as Pairs reads them (commandWords), and a quoted
// string, a value or a header's credential before them. A , before an
// auth-param goes on (Digest username="u", response="r": its list).
// A bracket or a quote inside a word ends no clause, though it ends a
// Redis command's words: a value of a pair or of a flag may go on past
// it (password=pa)ss, -p'my pass'). A quote opens a string wherever it
// is, but an apostrophe between letters (can't) or a quote that a
// backslash escapes.
//
// The cut may have fallen inside a quoted string: a line with an odd
// number of double quotes, or of single quotes, starts in one, and its
// first clause ends after that string has closed. So a line whose
// quotes do not pair up, cut outside them, may lose more than it
// needed; cut inside a string that a stray quote pairs up, it may show
// part of it.
func clauseEnd(text string) int {
	dq, sq := quoteParity(text)
	var starts []byte // where the cut fell: in a string of " or ', or in none (0)
	if dq {
		starts = append(starts, '"')
	}
	if sq {
		starts = append(starts, '\'')
	}
	if len(starts) == 0 {
		starts = append(starts, 0)
	}
	end := 0
	for _, q := range starts {
		end = max(end, clauseEndFrom(text, q))
	}
	return end
}

// clauseEndFrom is clauseEnd for a cut inside a string that q, " or ',
// quotes, or outside any when q is 0.
func clauseEndFrom(text string, q byte) int {
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '\\':
			i++ // an escaped character: \" is no quote
		case q != 0 && c == q:
			q = 0
			if i+1 < len(text) && strings.IndexByte(":,;", text[i+1]) >= 0 && !listGoesOn(text, i+1) {
				return i + 2
			}
		case q != 0:
		case c == '"', c == '\'' && !apostrophe(text, i):
			q = c
		case strings.IndexByte(":,;", c) >= 0 && (i+1 == len(text) || isBlank(text[i+1])) && !listGoesOn(text, i):
			return i + 1
		case c == '|' || c == '&':
			start := strings.LastIndexAny(text[:i], blanks) + 1
			end := i + 1 + strings.IndexAny(text[i+1:]+" ", blanks)
			if strings.Trim(text[start:end], ":,;|&") == "" {
				return end
			}
		}
	}
	return len(text)
}

// quoteParity reports whether text holds an odd number of double quotes
// and of single quotes, but those a backslash escapes and apostrophes.
func quoteParity(text string) (dq, sq bool) {
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '\\':
			i++
		case '"':
			dq = !dq
		case '\'':
			sq = sq != !apostrophe(text, i)
		}
	}
	return dq, sq
}

// apostrophe reports whether the ' at i in text stands between two
// letters or digits, as in can't and O'Brien: no quote.
func apostrophe(text string, i int) bool {
	return i > 0 && i+1 < len(text) && isWordByte(text[i-1]) && isWordByte(text[i+1])
}

// isWordByte reports whether c is an ASCII letter or digit, or a byte of
// a UTF-8 sequence (é in l'été).
func isWordByte(c byte) bool { return isLetter(c) || '0' <= c && c <= '9' || c >= 0x80 }

// isBlank reports whether c is one of blanks.
func isBlank(c byte) bool { return strings.IndexByte(blanks, c) >= 0 }

// listGoesOn reports whether the mark at i in text is a comma that an
// auth-param follows (response="r" after Digest username="u", ): the
// list an Authorization value holds goes on.
func listGoesOn(text string, i int) bool {
	return text[i] == ',' && authParamStart.MatchString(text[i+1:])
}

// authParamStart matches the start of an auth-param (authParam), blanks
// before it maybe.
var authParamStart = regexp.MustCompile(`^[ \t]*[\w!#$%&*+.^|~-]+[ \t]*=`)

// cutName returns the secret's name that cutLine puts before shown, the
// line after its first clause, dropped, when that clause ends with the :
// or = of its first word (or shown starts with one), and that word may
// be the end of a secret's name: its first word (nameWords) is the end
// of one of secretWord (ssword for password, en for token, ization for
// authorization), or it has none. The name is an Authorization's for
// the end of authorization (Pairs then hides the word after a scheme,
// or two words), a password's otherwise; "" when no name is cut.
func cutName(dropped, shown string) string {
	d := strings.TrimRight(dropped, blanks)
	head := "" // the first word
	if f := strings.Fields(d); len(f) > 0 {
		head = f[0]
	}
	var name string
	switch {
	case strings.HasSuffix(d, ":") || strings.HasSuffix(d, "="):
		if strings.ContainsAny(strings.TrimRight(d[:len(d)-1], blanks), blanks) {
			return "" // the name before it is whole
		}
		name = ":\n"
	case strings.HasPrefix(strings.TrimLeft(shown, blanks), ":"), strings.HasPrefix(strings.TrimLeft(shown, blanks), "="):
		if strings.ContainsAny(d, blanks) {
			return ""
		}
		name = "\n"
	default:
		return ""
	}
	words := nameWords(head)
	switch {
	case len(words) == 0 || strings.HasSuffix("authorization", words[0]):
		return "authorization" + name
	case secretEnd(words[0]):
		return "password" + name
	}
	// The cut may have taken whole words before the first one: a secret's
	// (KEY00: cut to 00:, FuzzTailCut), unless the last word says the
	// value is about a secret, not one (TOKEN_TTL: cut to TTL:); an id
	// may be a session's.
	if last := words[len(words)-1]; !metaWords[last] || last == "id" {
		return "password" + name
	}
	return ""
}

// secretEnd reports whether w is the end of one of secretWord.
func secretEnd(w string) bool {
	for s := range secretWord {
		if strings.HasSuffix(s, w) {
			return true
		}
	}
	return false
}

// anyPasswordFlags hides, in text up to the end of its first command (|
// ; & or a newline), the values of the password flags of any command
// that commandFlagsOf knows, whole: the command's name may be what a
// cut took (cutLine), and its flags read as any of them would.
func anyPasswordFlags(text string) string {
	_, masks := flagValues(text, 0, anyPasswordCommand)
	out := splicer{text: text}
	for _, m := range masks {
		out.replace(m[0], m[1], Masked)
	}
	return out.String()
}

// anyPasswordCommand has the password flags of every command
// commandFlagsOf knows, each taking its value whole, attached or as the
// next word: -p and -hp (MySQL, sshpass, 7-Zip, RAR, mongo), -a and
// --pass (redis-cli), -u, --user, -U and --proxy-user (curl, Samba), -w,
// -a and -s (OpenLDAP), --password and MySQL's --password1 to 3.
var anyPasswordCommand = pwCommand{flags: []pwFlag{
	{short: "p", long: "password"}, {short: "hp"}, {short: "a", long: "pass"}, {short: "u", long: "user"},
	{short: "U", long: "proxy-user"}, {short: "w"}, {short: "s"},
	{long: "password1"}, {long: "password2"}, {long: "password3"},
}, bundled: true}
