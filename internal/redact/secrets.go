package redact

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
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
	rest, cut := strings.CutPrefix(tail, "…")
	if !cut {
		return s.Clean(tail)
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
	return s.Clean("…" + rest)
}

// secretKey matches a name that says its value is a secret: token,
// secret, password, passwd, pwd, passphrase, credential, api_key (and
// access_, private_), a word key, auth and authorization (not author, nor
// idempotency_key), signature and a word sig, a word pass, session, a
// word sid, and cookie (Cookie: and Set-Cookie: headers).
const secretKey = `[\w.-]*(?:token|secret|passw(?:or)?d|passphrase|pwd|credential|(?:api|access|private)[_-]?key|\bkey|\bauth(?:orization)?\b|signature|\bsig\b|\bpass\b|session|\bsid\b|cookie)[\w.-]*`

var (
	// A name, a quote maybe, = or :, then the value: in double quotes, in
	// single quotes, or bare (as in a query string, a command line, JSON
	// or YAML).
	pairDQ   = regexp.MustCompile(`(?i)(` + secretKey + `["']?\s*[:=]\s*")([^"]*)`)
	pairSQ   = regexp.MustCompile(`(?i)(` + secretKey + `["']?\s*[:=]\s*')([^']*)`)
	pairBare = regexp.MustCompile(`(?i)(` + secretKey + `["']?\s*[:=]\s*)([^\s&;,'"\[\]{}<>][^\s&;,'"\]{}<>]*)`)
	// A flag and its value: --password value, also at the start of the
	// text.
	flagRE = regexp.MustCompile(`(?i)((?:^|\s)--?` + secretKey + `\s+)([^\s\-'"\[][^\s'"]*)`)
	// A Bearer or Basic credential in header form, as the value of a name
	// that says it is one (secretKey, or any name with authorization in
	// it; not WWW-Authenticate, whose Bearer realm="x" is a challenge):
	// Authorization: Bearer x, -H 'Authorization: Basic x',
	// "authorization": "Bearer x", {"Authorization":["Bearer x"]},
	// map[Authorization:[Bearer x]], HTTP_AUTHORIZATION=Bearer x,
	// token=Bearer x.
	schemeHeader = regexp.MustCompile(`(?i)((?:` + secretKey + `|[\w.-]*authorization[\w.-]*)["']?\s*[:=][\s\["']*(?:bearer|basic)\s+)[^\s,;'"\[]+`)
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
// command or a Go map ends. authParams is a list of them, separated by
// commas.
const (
	authParam  = `[\w!#$%&*+.^|~-]+[ \t]*=[ \t]*(?:"(?:[^"\\\n]|\\.)*"|\\"(?:[^"\\\n]|\\[^"])*\\"|[^\s,"'\]\\]*)`
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
// ghp_16C7e42F292c" and "Basic admin:hunter2" lose theirs.
func credential(word string) bool {
	return len(word) >= MinSecret && (len(word) >= maxProseWord || !proseWord.MatchString(word))
}

// Pairs hides the credentials that text names as such: the values of
// token=, secret=, password=, api_key= (and the like) pairs, quoted or
// not, with = or : (password: x, "token":"x"), of such flags
// (--password x), the short password flags of the commands that have
// one (mysql -phunter2, sshpass -p x, redis-cli -a x: commandFlags), and
// bearer and basic credentials, each replaced with xxxxx. Applied twice,
// it changes nothing more.
//
// A Bearer or Basic credential in header form, the value of a name such
// as Authorization (schemeHeader), is hidden whatever it looks like; so
// is any other value of a name with authorization in it, scheme and all
// (authValue: Authorization: xxxxx xxxxx for "token ghp_x"). The
// word after bearer or basic elsewhere is hidden only when it looks like
// a credential (see credential), so that prose such as "basic auth
// failed" stays readable.
func Pairs(text string) string {
	text = commandFlags(text)
	text = authHeader.ReplaceAllStringFunc(text, authValue)
	text = schemeHeader.ReplaceAllString(text, "${1}"+Masked)
	text = schemeWord.ReplaceAllStringFunc(text, func(m string) string {
		sub := schemeWord.FindStringSubmatch(m)
		if !credential(sub[2]) {
			return m
		}
		return sub[1] + Masked
	})
	keep := func(re *regexp.Regexp) func(string) string {
		return func(m string) string {
			sub := re.FindStringSubmatch(m)
			switch strings.ToLower(sub[2]) {
			case "", "bearer", "basic", Masked: // the scheme stays; so does an empty value
				return m
			}
			return sub[1] + Masked
		}
	}
	for _, re := range []*regexp.Regexp{pairDQ, pairSQ, pairBare, flagRE} {
		text = re.ReplaceAllStringFunc(text, keep(re))
	}
	return text
}

// authValue hides the credential in an Authorization header's value
// (authHeader's match m): after Bearer or Basic, the word after the
// scheme, which stays; after another scheme (GitHub's "token ghp_x",
// ApiKey, Negotiate, Digest), both words, since a scheme is not told
// from a credential that is followed by a word; a lone word (a token
// without a scheme) whole. A list of auth-params counts as one word
// (Digest username="u", response="r": xxxxx xxxxx). A value that starts
// with xxxxx is left: Pairs hid it before.
func authValue(m string) string {
	sub := authHeader.FindStringSubmatch(m)
	name, first, sp, second := sub[1], sub[2], sub[3], sub[4]
	scheme := strings.EqualFold(first, "bearer") || strings.EqualFold(first, "basic")
	switch {
	case first == Masked, second == "" && scheme:
		// Hidden already (Pairs applied twice changes nothing more), or
		// a scheme alone.
		return m
	case second == "":
		return name + Masked
	case scheme:
		return name + first + sp + Masked
	}
	return name + Masked + sp + Masked
}

// Tail hides the secrets in the end of a command's stderr that an error
// quotes: s's values, credentials named as such (Pairs) and URLs'
// secrets (Clean). A tail that was cut (it starts with "…") also loses
// its first word, which may be the rest of a credential whose name was
// cut off.
func Tail(tail string, s *Secrets) string {
	if rest, cut := strings.CutPrefix(s.CleanTail(tail), "…"); cut {
		i := strings.IndexAny(rest, " \t\n\r&;,'\"")
		if i < 0 {
			return "…"
		}
		return "…" + Pairs(rest[i:])
	}
	return Pairs(s.Clean(tail))
}

// SecretName reports whether an environment variable's or a field's name
// says that its value is a secret (API_TOKEN, DB_PASSWORD, AWS_SECRET_KEY,
// apiKey). It goes by the name's words (nameWords), not by what it
// contains: AUTHOR, KEYWORD, MONKEY and PASSENGER_COUNT are not secrets,
// DB_PWD and X-Api-Key are. A word is a secret when it is one of
// secretWords, or ends with one of secretEnds (DBPASSWORD, ACCESSTOKEN,
// MYAPIKEY). PWD alone is the shell's working directory, not a password.
func SecretName(name string) bool {
	if name == "PWD" {
		return false
	}
	return slices.ContainsFunc(nameWords(name), func(w string) bool {
		return secretWords[w] || slices.ContainsFunc(secretEnds, func(end string) bool { return strings.HasSuffix(w, end) })
	})
}

// secretWords are the words of a name that say its value is a secret.
var secretWords = map[string]bool{
	"password": true, "passwd": true, "pwd": true, "pw": true, "pass": true, "passphrase": true,
	"secret": true, "secrets": true, "token": true, "tokens": true, "bearer": true, "jwt": true,
	"key": true, "keys": true, "apikey": true, "auth": true, "authorization": true,
	"credential": true, "credentials": true, "creds": true, "private": true,
	"signature": true, "sig": true, "session": true, "cookie": true, "cookies": true, "dsn": true,
}

// secretEnds are the ends of a word that make it a secret's name when
// the name does not separate its words (ROOTPASSWORD, CLIENTSECRET):
// only those no common word ends with (not key: MONKEY; not pass: BYPASS).
var secretEnds = []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "credentials"}

// nameWords splits a name into its words, in lower case: at '_', '-',
// '.' and any other character that is neither a letter nor a digit,
// where letters meet digits, and at camelCase boundaries (apiKey: api,
// key; APIKey: api, key; OAuthToken: o, auth, token).
func nameWords(name string) []string {
	var words []string
	rs := []rune(name)
	start := 0
	kind := func(r rune) int {
		switch {
		case unicode.IsUpper(r):
			return 'A'
		case unicode.IsLetter(r):
			return 'a'
		case unicode.IsDigit(r):
			return '0'
		}
		return 0
	}
	for i := 0; i <= len(rs); i++ {
		split := i == len(rs) || kind(rs[i]) == 0
		if !split && i > start {
			prev, cur := kind(rs[i-1]), kind(rs[i])
			next := 0
			if i+1 < len(rs) {
				next = kind(rs[i+1])
			}
			split = (prev == '0') != (cur == '0') || // a letter meets a digit
				prev == 'a' && cur == 'A' || // apiKey
				prev == 'A' && cur == 'A' && next == 'a' // APIKey
		}
		if !split {
			continue
		}
		if i > start {
			words = append(words, strings.ToLower(string(rs[start:i])))
		}
		start = i
		if i < len(rs) && kind(rs[i]) == 0 {
			start = i + 1
		}
	}
	return words
}
