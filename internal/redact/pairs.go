package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// name matches the name of a pair or a flag, whose words (nameWords)
// say whether its value is a secret (pairName).
const name = `([\w.-]+)`

var (
	// A name, a quote maybe, = or :, then the value: in double quotes
	// (with its escaped quotes: "a\"b" in JSON), in single quotes, or
	// bare (as in a query string, a command line, JSON or YAML).
	pairDQ   = regexp.MustCompile(`(` + name + `["']?\s*[:=]\s*")((?:[^"\\\n]|\\.)*\\?)`)
	pairSQ   = regexp.MustCompile(`(` + name + `["']?\s*[:=]\s*')([^']*)`)
	pairBare = regexp.MustCompile(`(` + name + `["']?\s*[:=]\s*)([^\s&;,'"\[\]{}<>][^\s&;,'"\]{}<>]*)`)
	// A flag and its value: --password value, also at the start of the
	// text. The : , or ; that end the value are the text's (--password
	// hunter2: access denied), but for a value that is only those.
	flagRE = regexp.MustCompile(`((?:^|\s)--?` + name + `\s+)([^\s\-'"\[](?:[^\s'"]*[^\s'":,;])?)`)
	// A Bearer or Basic credential in header form, as the value of a name
	// that says it is one (pairName, or any name with authorization in
	// it; not WWW-Authenticate, whose Bearer realm="x" is a challenge):
	// Authorization: Bearer x, -H 'Authorization: Basic x',
	// "authorization": "Bearer x", {"Authorization":["Bearer x"]},
	// map[Authorization:[Bearer x]], HTTP_AUTHORIZATION=Bearer x,
	// token=Bearer x.
	schemeHeader = regexp.MustCompile(`(?i)(` + name + `["']?\s*[:=][\s\["']*(?:bearer|basic)\s+)([^\s,;'"\[]+)`)
	// The value of a name with authorization in it (Authorization,
	// Proxy-Authorization, HTTP_AUTHORIZATION), bare or quoted: a word,
	// and the word after it if any, as a scheme and its credential
	// (authValue). Either may be a list of auth-params instead, taken
	// whole: Digest's username="u", nonce="n", response="..." (a word
	// would end at the first quote, and show response=).
	authHeader = regexp.MustCompile(`(?i)([\w.-]*authorization[\w.-]*["']?\s*[:=][\s\["']*)(` + authParams + `|[^\s,;'"\[]+)(?:([ \t]+)(` + authParams + `|[^\s,;'"\[]+))?`)
	// The word after bearer or basic anywhere else: prose, or a credential
	// quoted without its header's name.
	schemeWord = regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)([^\s,;'"\[]+)`)
	// A word of prose: letters in lower case, capitalised or in capitals,
	// hyphenated maybe, with a punctuation mark after it, or = as in an
	// auth-param (Bearer realm="api").
	proseWord = regexp.MustCompile(`^(?:[a-z]+|[A-Z][a-z]*|[A-Z]+)(?:-(?:[a-z]+|[A-Z][a-z]*|[A-Z]+))*[.:!?)\]}>=]?$`)
)

// authParam is one auth-param of an Authorization value (RFC 9110
// §11.2): a name, =, and a value that is a token or a quoted string,
// with its quotes escaped maybe (\"n\" in JSON or a Go string). A bare
// value ends at a quote or ] as well, where a value quoted in a shell
// command or a Go map ends; what follows a closing quote up to a blank
// or comma is the value's too (0=""0 was hidden as xxxxx0, whose 0 a
// second pass hid: FuzzPairs). authParams is a list of them, separated
// by commas.
const (
	authParam  = `[\w!#$%&*+.^|~-]+[ \t]*=[ \t]*(?:(?:"(?:[^"\\\n]|\\.)*"|\\"(?:[^"\\\n]|\\[^"])*\\")[^\s,"'\]\\]*|[^\s,"'\]\\]*)`
	authParams = authParam + `(?:(?:[ \t]*,)+[ \t]*` + authParam + `)*`
)

// maxProseWord is the length from which the word after bearer or basic
// is a credential even when it is all letters: English has next to no
// words this long, and a token of random letters is rarely shorter.
const maxProseWord = 20

// credential reports whether word, the word after bearer or basic outside
// the header form, is a credential: at least MinSecret bytes and not a
// word of prose (proseWord) shorter than maxProseWord. So "basic auth
// failed" and "falling back to bearer mode" keep their words, and
// "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "basic dXNlcjpwdw==", "bearer
// ghp_16C7e42F292c" and "Basic admin:hunter2" lose theirs. A word with
// xxxxx in it is none: Pairs hid it, whole or as a pair's value
// (Bearer :0 is Bearer's pair, Bearer :xxxxx).
func credential(word string) bool {
	return len(word) >= MinSecret && (len(word) >= maxProseWord || !proseWord.MatchString(word)) && !strings.Contains(word, Masked)
}

// Pairs hides the credentials that text names as such: the values of
// token=, secret=, password=, pw=, api_key= (and the like) pairs, quoted
// or not, with = or : (password: x, "token":"x"), of such flags
// (--password x), where the name's words say so as they say it to
// SecretName (pairName: not KEYWORD=, token_ttl=, max_tokens=, sort
// key:), the short password flags of the commands that have one (mysql
// -phunter2, sshpass -p x, redis-cli -a x, curl -u user:x:
// commandFlags), the password of a Redis AUTH command echoed (redisAuth)
// and of MIGRATE's AUTH (redisMigrate), bearer and basic credentials,
// a password of user:password@host (userPasswords) and a URL's user
// information (urlUserinfos), each replaced with xxxxx. Applied twice,
// it changes nothing more.
//
// A Bearer or Basic credential in header form, the value of a name such
// as Authorization (schemeHeader), is hidden whatever it looks like; so
// is any other value of a name with authorization in it, but a known
// scheme before it (authValue: Authorization: token xxxxx for "token
// ghp_x", xxxxx xxxxx for two words of which the first is none). The
// word after bearer or basic elsewhere is hidden only when it looks like
// a credential (see credential), so that prose such as "basic auth
// failed" stays readable.
func Pairs(text string) string {
	text = commandFlags(text)
	text = redisAuth(text)
	text = redisMigrate(text)
	text = authValues(text)
	text = schemeWords(text)
	text = yamlBlocks(text)
	text = pemKeys(text)
	text = replaceValues(text, schemeHeader, func(text string, start, end int) bool {
		return pairName(text, start, end) || strings.Contains(strings.ToLower(text[start:end]), "authorization")
	})
	for _, re := range []*regexp.Regexp{pairDQ, pairSQ, pairBare} {
		text = replaceValues(text, re, pairName)
	}
	asks := askFlags(text) // mysql --password db: db is no password
	text = replaceValues(text, flagRE, func(text string, start, end int) bool {
		return pairName(text, start, end) && !asks[start]
	})
	text = userPasswords(text)
	// Last: a pass before may hide a part of a URL's authority that
	// changes where its user information ends (A://[0:#@0, whose #
	// userPasswords hid, reads A://[0:xxxxx@0).
	return urlUserinfos(text)
}

// urlUserinfos hides the user information of each URL in text, as URL
// does with Mask (userinfoEnd), and nothing else of it: its password is
// a credential the text names as such, as user:password@host's without
// a scheme is, and Args, which has Pairs alone, showed
// redis-cli -u redis://:pw@cache:6379's. Its query and fragment are
// URLs' (Pairs hides the pairs so named in them). User information
// whose end a second reading moves, once the first is hidden, goes to
// that end as well (A://[@!:#@0, as settled does).
func urlUserinfos(text string) string {
	return urlRE.ReplaceAllStringFunc(text, func(u string) string {
		scheme, rest, _ := strings.Cut(u, "://")
		for range maxPasses {
			at := userinfoEnd(rest)
			if at < 0 || rest[:at] == Masked {
				break
			}
			rest = Masked + rest[at:]
		}
		return scheme + "://" + rest
	})
}

var (
	// userPassword finds user:password@host without a scheme (a URL's
	// is urlUserinfos'), as a word of its own: alice:pw@db.example:5432,
	// a Go MySQL DSN's u:pw@tcp(h:3306)/db. The password (the second group)
	// runs to the last @ that a host follows: a name, an IPv4 or [IPv6]
	// address, or tcp(...) or unix(...), with a port maybe, then the
	// word's end, a path, or a punctuation mark. So image:1.25@sha256:ab
	// (a digest, not a host and a port) and pkg:npm/x@1.2 (a / in it)
	// are none.
	userPassword = regexp.MustCompile(`(?:^|[\s'"(=,\[<])([\w.+-]+):([^\s'"/\\]+)@(?:[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*|(?:tcp|unix)\([^)\s]*\)|\[[0-9a-fA-F:.]+\])(?::[0-9]{1,5})?(?:$|[\s/,;)\]'">]|:(?:$|\s))`)
	// uriSchemes are the schemes of URIs without // whose part after
	// the scheme is user@host, without a password: mailto:ann@h,
	// sip:ann@h, xmpp:, acct: (WebFinger).
	uriSchemes = map[string]bool{"mailto": true, "sip": true, "sips": true, "xmpp": true, "acct": true, "im": true, "pres": true, "tel": true}
	// mailHeaders are the names of a mail's headers and SMTP's commands
	// whose value is an address (in lower case): Cc:bob@example.com,
	// RCPT TO:<ann@example.com>. Sender is not among them: it is a name
	// an account may have, and to, cc or from are none.
	mailHeaders = map[string]bool{
		"to": true, "cc": true, "bcc": true, "from": true, "reply-to": true, "return-path": true,
		"delivered-to": true, "envelope-to": true, "x-original-to": true, "errors-to": true,
		"resent-to": true, "resent-cc": true, "resent-bcc": true, "resent-from": true, "resent-sender": true,
	}
	// localPart matches an address's part before its @, an < before it
	// maybe: a dot-atom (RFC 5322), without the ' and / that
	// userPassword's password does not hold.
	localPart = regexp.MustCompile("^<?[A-Za-z0-9!#$%&*+=?^_`{|}~.-]+$")
	// mailDomain matches what follows the @ of a mail's address, as
	// userPassword's match has it: a domain name of two labels or more,
	// the last one starting with a letter, no port, then the match's end
	// or the character that ended it.
	mailDomain = regexp.MustCompile(`^[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z][A-Za-z0-9-]*(?:$|[\s/,;)\]'">]|:(?:$|\s))`)
)

// userPasswords hides the password of each user:password@host in text
// (userPassword), but after a scheme of uriSchemes, or one hidden
// already (user alice:xxxxx@host failed), or a mail's address after its
// header's name (mailAddress).
func userPasswords(text string) string {
	out := splicer{text: text}
	for i := 0; i < len(text); {
		m := userPassword.FindStringSubmatchIndex(text[i:])
		if m == nil {
			break
		}
		for k := range m {
			m[k] += i
		}
		i = m[5] // the next may start at the end of this one's host
		if uriSchemes[strings.ToLower(text[m[2]:m[3]])] || strings.Contains(text[m[4]:m[5]], Masked) || mailAddress(text[m[2]:m[3]], text[m[4]:m[5]], text[m[5]+1:m[1]]) {
			continue
		}
		out.replace(m[4], m[5], Masked)
	}
	return out.String()
}

// mailAddress reports whether user:pw@host, as userPassword finds it, is
// a mail's header or SMTP's command and the address after it (an outside
// trial saw Cc:bob@example.com read as Cc:xxxxx@example.com): user is one
// of mailHeaders, in any case, pw an address's local part (localPart),
// and host a mail's domain (mailDomain), where a database's is often a
// name of one label or has a port. It would show a password only of an
// account called to, cc or from (as uriSchemes would of one called
// mailto), and only one that an address's local part could be.
func mailAddress(user, pw, host string) bool {
	return mailHeaders[strings.ToLower(user)] && localPart.MatchString(pw) && mailDomain.MatchString(host)
}

// replaceValues returns text with the value of each match of re (its
// third group, up to a bracket that closes one before it: closes)
// replaced with xxxxx where secret says that its name (the second group,
// text[start:end]) is a secret's, unless the value is a plainValue. A
// match whose name is not a secret's is looked at again from its name's
// end, as its value may hold a pair of its own (note:password=x).
func replaceValues(text string, re *regexp.Regexp, secret func(text string, start, end int) bool) string {
	out := splicer{text: text}
	for i := 0; i < len(text); {
		m := re.FindStringSubmatchIndex(text[i:])
		if m == nil {
			break
		}
		for k := range m {
			m[k] += i
		}
		if !secret(text, m[4], m[5]) {
			i = m[5]
			continue
		}
		end := closes(text, m[6], m[7])
		i = max(end, m[5])
		if plainValue(text[m[6]:end]) || schemeBefore(text, m[6], end) || blockHidden(text, m[6]) {
			continue
		}
		if uEnd, shown, ok := valueURL(text, m[6], end); ok {
			out.replace(m[6], uEnd, shown)
			i = uEnd
			continue
		}
		out.replace(m[6], end, Masked)
	}
	return out.String()
}

// valueURL returns, when the value of a secret's name at start in text,
// up to end, is a URL with user information (secretURL), where that URL
// ends and how it is shown: dsn=postgres://xxxxx@db:5432/prod, where
// dsn=xxxxx hid the host an operator needs. A bare value is the whole
// URL (urlRE), which may run past end: a password may hold the & ; , '
// or ] that end a bare value (dsn=redis://:p;ss@h showed ;ss@h). A
// quoted one is the URL only if all of it is one.
func valueURL(text string, start, end int) (uEnd int, shown string, ok bool) {
	loc := urlRE.FindStringIndex(text[start:])
	if loc == nil || loc[0] != 0 || start+loc[1] < end {
		return 0, "", false
	}
	uEnd = start + loc[1]
	if q := text[max(start-1, 0)]; start > 0 && (q == '"' || q == '\'') {
		uEnd = end // the URL ends where its quotes close
	}
	shown, ok = secretURL(text[start:uEnd])
	return uEnd, shown, ok
}

// secretURL returns u, the value of a secret's name (dsn=, --token), as
// URL shows it with Mask when all of it is a URL (urlRE) with user
// information: its scheme, host, port and path kept, its user
// information and its query's values hidden
// (postgres://xxxxx@db:5432/prod), as elsewhere in a text. It reports
// false for a value that is anything else, and for a URL that url.Parse
// does not read, once hidden, as the user xxxxx at a host: what shows of
// it would then be unsure, and the whole value goes.
func secretURL(u string) (string, bool) {
	if loc := urlRE.FindStringIndex(u); loc == nil || loc[0] != 0 || loc[1] != len(u) {
		return "", false
	}
	shown := URL(u, Mask)
	p, err := url.Parse(shown)
	if err != nil || p.User == nil || p.User.String() != Masked || p.Host == "" {
		return "", false
	}
	return shown, true
}

// splicer builds text with spans of it replaced, left to right: the
// loop each of Pairs' passes runs over its matches.
type splicer struct {
	text string
	out  strings.Builder
	done int // text before it is in out
}

// replace puts with in place of text[start:end], which starts at or
// after the end of the span replaced before it.
func (s *splicer) replace(start, end int, with string) {
	s.out.WriteString(s.text[s.done:start])
	s.out.WriteString(with)
	s.done = end
}

// String is the text with its spans replaced; text itself when none was.
func (s *splicer) String() string {
	if s.done == 0 {
		return s.text
	}
	return s.out.String() + s.text[s.done:]
}

// plainValue reports whether v, the value of a secret's name, is shown:
// empty, a scheme's name (bearer, basic), xxxxx, or a yes or no (true,
// false, null, none, yes, no, on, off), which says whether there is a
// secret, not what it is: MySQL's "(using password: YES)", "private":
// true.
func plainValue(v string) bool {
	switch strings.ToLower(v) {
	case "", "bearer", "basic", Masked, "true", "false", "null", "nil", "none", "yes", "no", "on", "off":
		return true
	}
	return false
}

// schemeBefore reports whether text[start:end], the value of a pair,
// is an authentication scheme (authSchemes) and a credential hidden
// follows it: authValues' Authorization: token xxxxx keeps its scheme.
func schemeBefore(text string, start, end int) bool {
	return authSchemes[strings.ToLower(text[start:end])] && strings.HasPrefix(strings.TrimLeft(text[end:], " \t"), Masked)
}

// closes returns where a bare value, text[start:end], ends: at the first
// ) or ] in it that closes a ( or [ opened before it on its line (and
// not in it), or at end. So "(using password: x)" and auth=[Bearer x]
// keep the bracket after x; a bracket opened nowhere goes with the
// value, which may hold it.
func closes(text string, start, end int) int {
	var before []byte // the brackets open before the value
	for _, c := range []byte(text[strings.LastIndexByte(text[:start], '\n')+1 : start]) {
		switch c {
		case '(', '[':
			before = append(before, c)
		case ')', ']':
			if n := len(before); n > 0 && before[n-1] == opener(c) {
				before = before[:n-1]
			}
		}
	}
	if len(before) == 0 {
		return end
	}
	var own []byte // the brackets the value opened
	for i := start; i < end; i++ {
		switch c := text[i]; c {
		case '(', '[':
			own = append(own, c)
		case ')', ']':
			if n := len(own); n > 0 {
				if own[n-1] == opener(c) {
					own = own[:n-1]
				}
			} else if before[len(before)-1] == opener(c) {
				return i
			}
		}
	}
	return end
}

// opener returns the bracket that c, ) or ], closes.
func opener(c byte) byte {
	if c == ')' {
		return '('
	}
	return '['
}

// pairName reports whether text[start:end], the name of a pair or a
// flag, says that its value is a secret: by its words, as SecretName
// does (secretWords). A key after a word of dataKeys is a database's
// key in prose as well: sort key: created_at (dataKeyWord).
func pairName(text string, start, end int) bool {
	words := nameWords(text[start:end])
	if len(words) == 1 && (words[0] == "key" || words[0] == "keys") && dataKeyWord(text, start) {
		return false
	}
	return secretWords(words)
}

// blanks are the characters \s matches in pairBare and flagRE: what may
// stand between a name and its value.
const blanks = " \t\n\f\r"

// dataKeyWord reports whether the name at start in text, key or keys,
// follows a word of dataKeys that is a word of prose: alone between
// blanks on its line (an opening bracket or quote before it maybe:
// "(sort key: x)"), and not the value of a pair (pass: sort key:x,
// pass:sort key:x) or of a flag that names a secret (--password sort
// key:x). Pairs decides on a name before it hides any value, and so
// must decide the same on what it gives back: a word that any of its
// passes may hide (0sort in pass0:0sort key:x, which is xxxxx the next
// time) is no such word, so that hiding it changes nothing.
func dataKeyWord(text string, start int) bool {
	before := strings.TrimRight(text[:start], " \t")
	if len(before) == start {
		return false // no blank between them: not a word of its own
	}
	i := strings.LastIndexAny(before, blanks) + 1
	if !dataKeys[strings.ToLower(strings.TrimLeft(before[i:], `([{"'`))] {
		return false
	}
	prev := strings.TrimRight(before[:i], blanks)
	if strings.HasSuffix(prev, ":") || strings.HasSuffix(prev, "=") {
		return false // the value of a pair
	}
	f := argFlag.FindStringSubmatch(prev[strings.LastIndexAny(prev, blanks)+1:])
	return f == nil || !secretWords(nameWords(f[1])) // else the value of a flag
}

// authValues hides the credential in each Authorization header's value
// in text (authHeader): after Bearer or Basic, the word after the
// scheme, which stays; so after another scheme known as one
// (authSchemes: GitHub's "token ghp_x", ApiKey, Negotiate, Digest);
// after a first word not known as a scheme, both words, since it is not
// told from a credential that is followed by a word; a lone word (a
// token without a scheme) whole. A list of auth-params counts as one
// word (Digest username="u", response="r": Digest xxxxx). A value that starts
// with xxxxx is left: Pairs hid it before. A word ends at a bracket that
// closes one before it (closes: map[Authorization:[Bearer x]]).
func authValues(text string) string {
	out := splicer{text: text}
	for _, m := range authHeader.FindAllStringSubmatchIndex(text, -1) {
		name, first, sp, second, end := text[m[2]:m[3]], text[m[4]:m[5]], "", "", m[1]
		if e := wordEnd(text, m[4], m[5]); e < m[5] {
			first, end = text[m[4]:e], e
		} else if m[8] >= 0 {
			sp, second, end = text[m[6]:m[7]], text[m[8]:m[9]], wordEnd(text, m[8], m[9])
			second = second[:end-m[8]]
		}
		out.replace(m[0], end, authValue(name, first, sp, second))
	}
	return out.String()
}

// wordEnd returns where a word of an Authorization value, text[start:end],
// ends: where closes says for a bare word, and at end for a list of
// auth-params, whose quoted values may hold brackets.
func wordEnd(text string, start, end int) int {
	if strings.ContainsAny(text[start:end], `",`) {
		return end
	}
	return closes(text, start, end)
}

// authSchemes are the authentication schemes (lower case) of an
// Authorization value that stay shown before the credential they name:
// those IANA registers, GitHub's token, and others in common use
// (ApiKey, NTLM, AWS's, Okta's SSWS). A scheme is a name, no secret.
var authSchemes = map[string]bool{
	"basic": true, "bearer": true, "concealed": true, "digest": true, "dpop": true, "gnap": true, "hoba": true,
	"mutual": true, "negotiate": true, "oauth": true, "privatetoken": true, "scram-sha-1": true, "scram-sha-256": true,
	"vapid": true, "token": true, "apikey": true, "ntlm": true, "aws4-hmac-sha256": true, "hawk": true, "ssws": true,
}

// authValue returns an Authorization header's name and value with the
// credential hidden, as authValues says, from its name, its first word,
// and the blanks and the word after it if any.
func authValue(name, first, sp, second string) string {
	scheme := authSchemes[strings.ToLower(first)]
	switch {
	case strings.HasPrefix(first, Masked), scheme && strings.HasPrefix(second, Masked), second == "" && scheme:
		// Hidden already (Pairs applied twice changes nothing more: a
		// bare auth-param's value ends at ], so Digest 0=] gave Digest
		// xxxxx], FuzzPairs), or a scheme alone.
		return name + first + sp + second
	case second == "":
		return name + Masked
	case scheme:
		return name + first + sp + Masked
	}
	return name + Masked + sp + Masked
}

// schemeWords hides the word after bearer or basic outside the header
// form, up to a bracket that closes one before it (closes), where it
// looks like a credential (credential).
func schemeWords(text string) string {
	out := splicer{text: text}
	for _, m := range schemeWord.FindAllStringSubmatchIndex(text, -1) {
		end := closes(text, m[4], m[5])
		if credential(text[m[4]:end]) {
			out.replace(m[4], end, Masked)
		}
	}
	return out.String()
}

var (
	// authCommand finds a Redis AUTH command where a command starts: at
	// the start of a line, or after a prompt (>, $, #), a quote, an
	// opening bracket, a separator (; | & :), as HELLO's option too
	// (HELLO 3 AUTH user pw). "BASIC AUTH disabled" has none of those.
	// Its first group is the character before it, if any; its second,
	// HELLO and its version, if any; its third, AUTH in any case
	// (redisAuth takes lower case at fewer places).
	authCommand = regexp.MustCompile("(?im)(?:^|([>$#\"'`(\\[;|&:]))[ \t]*(HELLO[ \t]+[0-9]+[ \t]+)?(AUTH)[ \t]+")
	// cliPrompt matches redis-cli's prompt at the end of the text before
	// a command: 127.0.0.1:6379>, cache:6379[2]>, [::1]:6379>, not
	// connected>.
	cliPrompt = regexp.MustCompile(`(?:^|\s)(?:(?:[\w.-]+|\[[0-9a-fA-F:.]+\]):[0-9]+(?:\[[0-9]+\])?|not connected)>$`)
	// authReply finds the end of the arguments of an echoed AUTH where a
	// Redis error follows them: AUTH app pw: ERR invalid password.
	authReply = regexp.MustCompile(`:[ \t]+(?:\(error\)[ \t]+)?-?(?:ERR|WRONGPASS|NOAUTH|NOPERM)\b`)
	// authMonitor finds an AUTH command as MONITOR quotes it, HELLO's
	// too, with its arguments to the end of its line: "AUTH" "app" "pw".
	// Its first group is HELLO and its version, if any; its second, the
	// arguments.
	authMonitor = regexp.MustCompile(`(?im)("hello"[ \t]+"[0-9]+"[ \t]+)?"auth"((?:[ \t]+"(?:[^"\\\n]|\\.)*")+)[ \t]*\r?$`)
	// migrateCommand finds a Redis MIGRATE command where authCommand
	// finds AUTH, and as MONITOR quotes it ("MIGRATE" "h" ...), and as
	// any word after a blank, = or a comma (cmd=MIGRATE h 6379 k 0 5
	// AUTH pw showed pw, an outside trial): its AUTH comes after five
	// arguments, which prose seldom gives.
	migrateCommand = regexp.MustCompile("(?im)(?:^|[\\s>$#\"'`(\\[;|&:=,{])[ \t]*MIGRATE[\"']?[ \t]+")
	// monitorArg finds an argument as MONITOR quotes it; its group is
	// what is inside the quotes.
	monitorArg = regexp.MustCompile(`"((?:[^"\\\n]|\\.)*)"`)
)

// redisAuth hides the password of each Redis AUTH command that text
// echoes, AUTH pw or AUTH user pw (the user stays), and of HELLO's
// AUTH user pw: where a Redis error follows it (AUTH app pw: ERR
// invalid password, WRONGPASS), where the password is quoted (AUTH
// "pw", AUTH 'pw': an argument, not a word of prose), or where it
// looks like one (credential) and ends the line or a quote; and as
// MONITOR quotes it ("AUTH" "app" "pw", "auth" "pw"). Prose keeps its
// words: "AUTH failed" has no Redis error after it and no credential.
// After redis-cli's prompt (cliPrompt) it is a command typed, and its
// password is hidden whatever it looks like (127.0.0.1:6379> AUTH
// foobared).
// More words than AUTH takes are a password with blanks in it typed
// without quotes, and go all (credentialRun), where one of them is
// quoted or looks like a credential; "AUTH disabled (bearer only)"
// keeps them, a word in brackets read as the aside it is.
//
// AUTH in lower or mixed case (Redis and redis-cli take auth pw) is a
// command only where a command is echoed: at the start of a line or
// after a prompt (127.0.0.1:6379> auth pw); and a Redis error after it
// does not make its word a password, as "auth failed: ERR x" is prose.
// After a quote or a colon it is prose ({"type": "auth"}, error: auth
// required); redis-cli auth pw is commandFlags'.
func redisAuth(text string) string {
	out := splicer{text: text}
	for _, m := range authCommand.FindAllStringSubmatchIndex(text, -1) {
		upper := text[m[6]:m[7]] == "AUTH"
		if m[0] < out.done || !upper && m[2] >= 0 && text[m[2]] != '>' {
			continue
		}
		args := text[m[1]:]
		if eol := strings.IndexAny(args, "\r\n"); eol >= 0 {
			args = args[:eol]
		}
		// After redis-cli's prompt, a word is an argument typed, as a
		// quoted one is, in any case.
		strong := m[2] >= 0 && cliPrompt.MatchString(text[strings.LastIndexByte(text[:m[2]], '\n')+1:m[3]])
		if r := authReply.FindStringIndex(args); r != nil {
			args, strong = args[:r[0]], strong || upper
		}
		words := commandWords(args, authArgs(args))
		vs := make([]string, len(words))
		for i, w := range words {
			vs[i] = args[w.start:w.end]
		}
		var pws []int
		if m[4] >= 0 {
			pws, _ = credentialRun(vs, 0, 2, true, helloOptions)
		} else {
			pws, _ = credentialRun(vs, 0, 1, true, nil)
		}
		if !strong && !slices.ContainsFunc(pws, func(i int) bool { return words[i].quoted || authCredential(vs[i], len(pws) > 1) }) {
			continue
		}
		for _, i := range pws {
			// A password with xxxxx in it was hidden by Pairs, whole or as
			// the value of a pair: AUTH :0 is AUTH's pair, AUTH :xxxxx.
			if vs[i] != "" && !strings.Contains(vs[i], Masked) {
				out.replace(m[1]+words[i].start, m[1]+words[i].end, Masked)
			}
		}
	}
	text = out.String()
	return authMonitor.ReplaceAllStringFunc(text, monitorAuth)
}

// redisMigrate hides the passwords of each Redis MIGRATE command that
// text echoes without redis-cli before it (whose commandFlags hides
// them): the words of its AUTH pw and AUTH2 user pw as Redis reads them
// (redisPasswords), a run of more as AUTH's (credentialRun). A key
// called auth stays: it is one of the five fixed arguments, or after
// KEYS. Unlike AUTH, MIGRATE is a command in any case wherever one
// starts (error: migrate h 6379 k 0 5000 auth pw): its AUTH comes after
// five arguments, which prose about migrating seldom gives, and a word
// of prose hidden is a smaller loss than a password shown.
func redisMigrate(text string) string {
	out := splicer{text: text}
	for _, m := range migrateCommand.FindAllStringSubmatchIndex(text, -1) {
		if m[0] < out.done {
			continue
		}
		args := text[m[1]:]
		if eol := strings.IndexAny(args, "\r\n"); eol >= 0 {
			args = args[:eol]
		}
		if r := authReply.FindStringIndex(args); r != nil {
			args = args[:r[0]]
		}
		words := commandWords(args, authArgs(args))
		vs := make([]string, len(words))
		for i, w := range words {
			vs[i] = args[w.start:w.end]
		}
		for _, i := range redisPasswords("MIGRATE", vs) {
			if vs[i] != "" && !strings.Contains(vs[i], Masked) {
				out.replace(m[1]+words[i].start, m[1]+words[i].end, Masked)
			}
		}
	}
	return out.String()
}

// authCredential reports whether v, an argument of an echoed AUTH, looks
// like a password (credential); one of a run of more (run), as it does
// without the brackets of an aside: "(bearer" is a word of prose.
func authCredential(v string, run bool) bool {
	if run {
		v = strings.TrimLeft(v, "([{")
	}
	return credential(v)
}

// monitorAuth returns m, an AUTH command as MONITOR quotes it
// (authMonitor), with its password hidden (credentialRun).
func monitorAuth(m string) string {
	sub := authMonitor.FindStringSubmatchIndex(m)
	quoted := monitorArg.FindAllStringSubmatchIndex(m[sub[4]:sub[5]], -1)
	vs := make([]string, len(quoted))
	for i, q := range quoted {
		vs[i] = m[sub[4]+q[2] : sub[4]+q[3]]
	}
	var pws []int
	if sub[2] >= 0 {
		pws, _ = credentialRun(vs, 0, 2, true, helloOptions)
	} else {
		pws, _ = credentialRun(vs, 0, 1, true, nil)
	}
	out := splicer{text: m}
	for _, i := range pws {
		if vs[i] != "" && vs[i] != Masked {
			out.replace(sub[4]+quoted[i][2], sub[4]+quoted[i][3], Masked)
		}
	}
	return out.String()
}

// commandWords returns words, the arguments of an echoed Redis command
// in args (authArgs), up to the end of the command: a word of : , ; | &
// alone, which is none of them, or one that ends with : , or ; (punctEnd,
// without them), or a quoted one that they follow, where the text around
// the command goes on (AUTH mode off; redis-cli ..., AUTH "pw": denied);
// or one that holds a pair's value hidden (pw=xxxxx), after it: the
// bracket that ended the words (authArgs) may have gone with that value,
// and Pairs must read the command the same the next time (FuzzPairs:
// AUTH "pw"=)0 0 read AUTH "pw"=xxxxx 0, then AUTH "xxxxx"=xxxxx xxxxx).
func commandWords(args string, words []authWord) []authWord {
	for i, w := range words {
		if w.quoted {
			if w.end+1 < len(args) && strings.ContainsRune(":,;", rune(args[w.end+1])) {
				return words[:i+1]
			}
			continue
		}
		v := args[w.start:w.end]
		if strings.Trim(v, ":,;|&") == "" {
			return words[:i]
		}
		if p := punctEnd(v, 0); p != v {
			words[i].end = w.start + len(p)
			return words[:i+1]
		}
		if strings.Contains(v, "="+Masked) || strings.Contains(v, ":"+Masked) {
			return words[:i+1]
		}
	}
	return words
}

// authWord is an argument of an echoed AUTH: where it is in its line,
// without the quotes around it if it is quoted.
type authWord struct {
	start, end int
	quoted     bool
}

// authArgs returns the arguments of an echoed AUTH in args, the rest of
// its line: words between blanks, or quoted ("pw", with \" in it, or
// 'pw') where a quote starts a word; one left open runs to the end. They
// end at a quote, a backquote or a bracket inside a bare word, which
// closes what the command is in (send "AUTH pw", (AUTH pw)).
func authArgs(args string) []authWord {
	var words []authWord
	for i := 0; i < len(args); {
		if args[i] == ' ' || args[i] == '\t' {
			i++
			continue
		}
		if q := args[i]; q == '"' || q == '\'' {
			end := i + 1
			for end < len(args) && args[end] != q {
				if q == '"' && args[end] == '\\' {
					end++
				}
				end++
			}
			end = min(end, len(args))
			words = append(words, authWord{i + 1, end, true})
			i = end + 1
			continue
		}
		end := i
		for end < len(args) && !strings.ContainsRune(" \t\"'`)]", rune(args[end])) {
			end++
		}
		if end > i {
			words = append(words, authWord{i, end, false})
		}
		if end < len(args) && args[end] != ' ' && args[end] != '\t' {
			break // the quote or bracket that closes the command's
		}
		i = end
	}
	return words
}
