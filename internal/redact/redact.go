package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Masked replaces a hidden value.
const Masked = "xxxxx"

// Userinfo says what to show of a URL's user information.
type Userinfo int

const (
	// Mask replaces the user information, name and password, with xxxxx:
	// https://xxxxx@host/path.
	Mask Userinfo = iota
	// Display drops the user information, and the fragment with it, as a
	// URL is shown in a log: https://host/path.
	Display
	// Password keeps the user name and replaces the password with xxxxx,
	// as url.URL.Redacted does: https://user:xxxxx@host/path.
	Password
)

// URL returns raw with its user information shown as ui says and the
// value of each query parameter but the harmless ones (secretParam)
// replaced with xxxxx; a query item without "=" may be a
// token itself, and is replaced whole. So is a query value or an escaped
// path segment that holds a URL or query of its own with a secret in it
// (nestedSecret: ?q=https%3A%2F%2Fx%3Ftoken%3Dt), and a webhook's token
// in the path (path). A fragment of name=value pairs,
// as OAuth's implicit flow returns a token in (#access_token=...), has
// its secret values replaced too; any other fragment (#section-2)
// stays. It works on the text, so that it redacts what url.Parse
// refuses as well, and leaves the rest as it is. Applied twice, it
// changes nothing more.
func URL(raw string, ui Userinfo) string {
	return settled(raw, ui, nil)
}

// settled is redactURL run again on what it gives until that stays as
// it is (a few passes, each hiding more): one pass can leave a text that
// a second reads otherwise, as when masking a user name's "[" made the
// rest of A://[@!:#@0 a password with a # (FuzzURLs).
func settled(raw string, ui Userinfo, h *hidden) string {
	out := redactURL(raw, ui, h)
	for range maxPasses - 1 {
		next := redactURL(out, ui, h)
		if next == out {
			break
		}
		out = next
	}
	return out
}

// maxPasses is how many times settled and urlUserinfos read a URL at
// most.
const maxPasses = 4

// URLSecrets returns the parts of raw that URL replaces with xxxxx (with
// Mask): its user information, the values of its query and fragment,
// the secrets of its path; each as it is in raw, and unescaped if that
// differs. They are what a text that echoes raw must not show: the
// values of harmless names (page=2, sort=name) are not among them.
func URLSecrets(raw string) []string {
	var h hidden
	settled(raw, Mask, &h)
	out := slices.Clone(h)
	for _, v := range h {
		for _, unescape := range []func(string) (string, error){url.QueryUnescape, url.PathUnescape} {
			if u, err := unescape(v); err == nil && !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	return out
}

// hidden collects what redactURL replaces, for URLSecrets; nil collects
// nothing.
type hidden []string

// mask returns xxxxx, and adds v to h.
func (h *hidden) mask(v string) string {
	if h != nil && v != "" && v != Masked {
		*h = append(*h, v)
	}
	return Masked
}

// redactURL is URL, which adds what it replaces to h.
func redactURL(raw string, ui Userinfo, h *hidden) string {
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		if at, end := specialUserinfo(rest); at >= 0 {
			// Its authority is what url.Parse would not take for one: redact
			// the user information here, and the rest as any URL.
			return redactURL(scheme+"://"+userinfo(rest[:end], ui, h)+rest[end:], ui, h)
		}
	}
	raw, frag, hasFrag := strings.Cut(raw, "#")
	raw, query, hasQuery := strings.Cut(raw, "?")
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		auth, p, hasPath := strings.Cut(rest, "/")
		raw = scheme + "://" + userinfo(auth, ui, h)
		if hasPath {
			raw += "/" + path(auth[strings.LastIndexByte(auth, '@')+1:], p, h)
		}
	}
	if query != "" || hasQuery && hasFrag && ui != Display {
		// An empty query before a fragment stays: dropped, "h?#x@y"
		// came back as "h#x@y", which a second pass read as a password
		// with a # in it (FuzzURLs).
		raw += "?" + params(query, true, h)
	}
	if hasFrag {
		frag = fragment(frag, h)
		if ui != Display {
			raw += "#" + frag
		}
	}
	return raw
}

// fragment replaces, in a URL's fragment of name=value pairs, the values
// Query would (secretParam); the rest, and a fragment that holds no
// pairs, stays.
func fragment(frag string, h *hidden) string {
	if !strings.Contains(frag, "=") {
		return frag
	}
	return params(frag, false, h)
}

// userinfo returns the authority auth with its user information, up to
// its last "@" as url.Parse takes it, shown as ui says.
func userinfo(auth string, ui Userinfo, h *hidden) string {
	at := strings.LastIndexByte(auth, '@')
	if at < 0 {
		return auth
	}
	switch ui {
	case Display:
		return auth[at+1:]
	case Password:
		if colon := strings.IndexByte(auth[:at], ':'); colon >= 0 {
			return auth[:colon+1] + h.mask(auth[colon+1:at]) + auth[at:]
		}
		return auth
	}
	return h.mask(auth[:at]) + auth[at:]
}

// specialUserinfo finds, in rest, a URL after its "://", user
// information whose password holds one of / ? # @ unescaped, as a person
// types it (redis://:pa#ss@cache:6379, redis://:p@ss/w0rd@cache:6379/0),
// which url.Parse and the rest of URL would end at its first / ? # or
// take up to its first @, so that the password would show, whole or in
// part, and the host not. It returns where the "@" that ends the user
// information and the host after it end, or -1, -1 when rest has no
// such user information.
//
// The user information runs to the last "@" in rest that a host, or
// nothing, follows (a name or [address], a port maybe, then the end or
// one of / ? #), across any / ? # before it: no rule tells a
// password's p@ss/w0rd from a host and a path, so what may be a
// password goes. rest has such user information when the part before
// its first / ? # is user information with a password (a ":" in it)
// and a host after it as url.Parse reads it, and another "@" that a
// host follows comes after (u:p@ss/w0rd@h; u:pw@h/x?to=a@b.com loses
// its host h and path to xxxxx@b.com, the price of never showing a
// password's end); or when that part is a user name without any of
// / ? # @ [ ], ":", and a password that is no port after a host
// (h:8080/ starts a path), and an "@" follows that a host follows. A
// URL without a password before its first / ? # is read as url.Parse
// reads it: https://h/a@b, https://h/x?to=a@b.com and https://u@h#a@b
// keep their @.
func specialUserinfo(rest string) (at, end int) {
	k := strings.IndexAny(rest, "/?#")
	if k < 0 {
		return -1, -1
	}
	if a := strings.LastIndexByte(rest[:k], '@'); a >= 0 && hostPort.MatchString(rest[a+1:k]) {
		// url.Parse's user information, and a host after it; unless that
		// is a password's, which holds an @ and then one of / ? #: an @
		// after it with a host after that ends the password instead
		// (redis://:p@ss/w0rd@h, redis://:p@ss#w0rd@h).
		if !strings.Contains(rest[:a], ":") {
			return -1, -1
		}
	} else {
		colon := strings.IndexByte(rest[:k], ':')
		if colon < 0 || strings.ContainsAny(rest[:colon], "[]") {
			// No user name holds a bracket unescaped (RFC 3986): [0:0]/0@[0]
			// is an IPv6 host and a path, which URL left of
			// A://0@[0:0]/0@[0] (FuzzURLs).
			return -1, -1
		}
		if port := rest[colon+1 : k]; colon > 0 && strings.Trim(port, "0123456789") == "" && (port != "" || rest[k] == '/') {
			// host:8080/path?mail=a@b; but no host is empty, and
			// :1234/5678@h is a password's, as redis://:pw@h has.
			return -1, -1
		}
	}
	return lastHostAt(rest, k)
}

// lastHostAt returns where the last "@" in rest from i that a host, or
// nothing, follows is (up to the end of rest or its next / ? #), and
// where that host ends; or -1, -1 when there is none. An "@" that
// anything else follows is a password's, or a path's or a query's
// (?to=a@b%20c).
func lastHostAt(rest string, i int) (at, end int) {
	at, end = -1, -1
	for {
		j := strings.IndexByte(rest[i:], '@')
		if j < 0 {
			return at, end
		}
		a, e := i+j, len(rest)
		if n := strings.IndexAny(rest[a+1:], "/?#"); n >= 0 {
			e = a + 1 + n
		}
		if e == a+1 || hostPort.MatchString(rest[a+1:e]) {
			at, end = a, e
		}
		i = a + 1
	}
}

// userinfoEnd returns where the "@" that ends the user information of
// rest, a URL after its "://", is, as redactURL reads it: where
// specialUserinfo says, or the last "@" before the first / ? #; -1 when
// it has none.
func userinfoEnd(rest string) int {
	if at, _ := specialUserinfo(rest); at >= 0 {
		return at
	}
	if k := strings.IndexAny(rest, "/?#"); k >= 0 {
		rest = rest[:k]
	}
	return strings.LastIndexByte(rest, '@')
}

// hostPort matches a URL's host and port: a name or an IPv4 address, or
// an IPv6 address in brackets, and a port maybe; or a list of them
// separated by commas, as MongoDB's and Redis Sentinel's URLs name
// their servers (mongodb://u:pw@h1:27017,h2:27017/db).
var hostPort = regexp.MustCompile(`^` + oneHost + `(?:,` + oneHost + `)*$`)

// oneHost is one host and port of hostPort.
const oneHost = `(?:[\w.-]+|\[[0-9a-fA-F:.]+\])(?::[0-9]*)?`

// Query replaces with xxxxx the value of each parameter of a raw query
// but those whose names are known to be harmless (plainParams: page,
// sort, limit, q, ...), and each item without "=" whole: it has no name
// to go by, and may be a token itself. So ?page=2&sort=asc reads as it
// is, and a secret under a name no list foresaw (pw=, p=, sign=) is
// still hidden. A harmless name's value that holds a query with a secret
// of its own, escaped or not, is hidden too (nestedSecret).
func Query(raw string) string {
	if raw == "" {
		return ""
	}
	return params(raw, true, nil)
}

// params replaces the values of the secret parameters (secretParam) of
// raw, name=value pairs joined by "&", and the values that hold a secret
// of their own (nestedSecret), and, with bare, each item without "="
// whole.
func params(raw string, bare bool, h *hidden) string {
	items := strings.Split(raw, "&")
	for i, item := range items {
		if k, v, ok := strings.Cut(item, "="); ok {
			if secretParam(k) || nestedSecret(v) {
				items[i] = k + "=" + h.mask(v)
			}
		} else if bare && item != "" {
			items[i] = h.mask(item)
		}
	}
	return strings.Join(items, "&")
}

// path replaces the secrets in p, a URL's path after the "/" that
// follows its authority, on host, with xxxxx: a webhook's token
// (hookSecret), a Telegram bot's token (/botxxxxx/sendMessage), and a
// segment that is an escaped URL or query with a secret (nestedSecret:
// /proxy/https%3A%2F%2Fx%2Fcb%3Ftoken%3Dt). Only escaped segments are
// looked at for that: a path holds a query of its own only escaped, and
// a segment such as id=42 reads as it is.
func path(host, p string, h *hidden) string {
	segs := strings.Split(p, "/")
	first, last := -1, -1 // the first and last segments that are not empty
	for i, seg := range segs {
		if seg != "" {
			last = i
			if first < 0 {
				first = i
			}
		}
	}
	// A host for hooks: hooks.slack.com/services/T0/B0/<token>,
	// hooks.zapier.com/hooks/catch/1/<key>/.
	hooksHost := strings.HasPrefix(strings.ToLower(host), "hooks.")
	hook := false // after a segment that names webhooks
	for i, seg := range segs {
		switch {
		case hooksHost && i == last && i != first,
			hook && hookSecret(seg),
			strings.Contains(seg, "%") && nestedSecret(seg):
			segs[i] = h.mask(seg)
		case telegramBot.MatchString(seg):
			segs[i] = "bot" + h.mask(seg[len("bot"):])
		}
		hook = hook || hookSegments[strings.ToLower(seg)]
	}
	return strings.Join(segs, "/")
}

// hookSegments name webhooks in a path; the segments after one may be a
// webhook's token (hookSecret): Discord's /api/webhooks/<id>/<token>,
// Mattermost's /hooks/<key>, Rocket.Chat's /hooks/<id>/<token>, Teams'
// /webhookb2/<ids>/IncomingWebhook/<key>/<id>.
var hookSegments = map[string]bool{"hooks": true, "webhooks": true, "webhook": true, "webhookb2": true}

// minHookSecret is the length from which a segment after one of
// hookSegments is a token: those are long and random (Discord's 68
// characters, Rocket.Chat's 48, Teams' 32, Mattermost's 26), and a
// hook's name or number is shorter.
const minHookSecret = 16

// hookSecret reports whether seg, a segment after one of hookSegments,
// is a token: at least minHookSecret bytes, and neither a number (a
// hook's ID: GitHub's /repos/o/r/hooks/123456789, Discord's webhook ID)
// nor words in lower case (/webhooks/syncd-production). Any other long
// segment stays: item IDs, UUIDs and commit hashes in a path are
// not secrets, and an operator needs them.
func hookSecret(seg string) bool {
	return len(seg) >= minHookSecret && strings.Trim(seg, "0123456789") != "" && !lowerWords.MatchString(seg)
}

var (
	// lowerWords matches words in lower case joined by - or _.
	lowerWords = regexp.MustCompile(`^[a-z]+(?:[-_][a-z]+)*$`)
	// telegramBot matches a path segment that holds a Telegram bot's
	// token: /bot123456:AAH.../sendMessage.
	telegramBot = regexp.MustCompile(`^bot[0-9]+:[\w-]+$`)
)

// maxUnescape is how many times nestedSecret unescapes a value: a URL
// in the query of a URL in a query is escaped twice.
const maxUnescape = 4

// nestedSecret reports whether v, a query value or a path segment, holds
// a URL or query of its own, escaped (once or more) or not, that shows a
// secret: a value Query would hide, or user information. So the OAuth
// redirect q=https%3A%2F%2Fx%2Fcb%3Faccess_token%3Dt is hidden under a
// name whose value shows (q=, page=), as filter=status%3Dactive is not.
func nestedSecret(v string) bool {
	for range maxUnescape {
		if strings.ContainsAny(v, "=?@") && innerSecret(v) {
			return true
		}
		u := unescape(v)
		if u == v {
			return false
		}
		v = u
	}
	return false
}

// innerSecret reports whether d, a URL or a query unescaped, shows a
// secret: user information, a value of a secret parameter (secretParam)
// in its query or fragment, or an item without "=" in a URL's query, as
// URL would hide them.
func innerSecret(d string) bool {
	if _, rest, ok := strings.Cut(d, "://"); ok {
		if at, _ := specialUserinfo(rest); at >= 0 {
			return true
		}
	}
	d, frag, _ := strings.Cut(d, "#")
	head, query, hasQuery := strings.Cut(d, "?")
	_, rest, isURL := strings.Cut(head, "://")
	if auth, _, _ := strings.Cut(rest, "/"); isURL && strings.Contains(auth, "@") {
		return true
	}
	if !hasQuery && !isURL {
		query = d // a query alone: a=b&c=d
	}
	for _, item := range strings.Split(query, "&") {
		if pairSecret(item) || isURL && item != "" && item != Masked && !strings.Contains(item, "=") {
			return true
		}
	}
	return slices.ContainsFunc(strings.Split(frag, "&"), pairSecret)
}

// pairSecret reports whether item is name=value with a value that Query
// would hide, and that is not hidden already.
func pairSecret(item string) bool {
	k, v, ok := strings.Cut(item, "=")
	return ok && v != "" && v != Masked && secretParam(k)
}

// unescape replaces each %XX in s with the byte it stands for, and
// leaves any other % as it is: url.QueryUnescape refuses a whole text
// for one %zz.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(n))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// plainParams are query parameter names whose values are not secrets
// anywhere they are commonly used: paging, sorting, searching, formats,
// time ranges and a database's connection options. Any other name's value is hidden: a list of secret
// names missed pw=, p= (Subsonic's password), sign= and bearer= (an
// outside trial), and a missed secret is worse than a hidden page size.
var plainParams = map[string]bool{
	"page": true, "per_page": true, "perpage": true, "page_size": true, "pagesize": true,
	"limit": true, "offset": true, "count": true, "size": true,
	"sort": true, "sort_by": true, "sortby": true, "order": true, "order_by": true, "orderby": true,
	"dir": true, "direction": true, "q": true, "query": true, "search": true, "filter": true,
	"fields": true, "include": true, "exclude": true, "expand": true, "embed": true,
	"format": true, "fmt": true, "lang": true, "locale": true, "tz": true, "timezone": true,
	"view": true, "mode": true, "type": true, "kind": true, "status": true, "version": true, "v": true,
	"start": true, "end": true, "from": true, "to": true, "since": true, "until": true,
	"before": true, "after": true, "debug": true, "verbose": true, "pretty": true,
	"expires_in": true, "token_type": true, "scope": true,
	// A database URL's connection options (PostgreSQL's libpq, Go's
	// MySQL driver): how to connect, no credential. sslmode=disable
	// read as sslmode=xxxxx, and hid what an error was about.
	"sslmode": true, "connect_timeout": true, "application_name": true, "charset": true, "parsetime": true, "timeout": true,
}

// secretParam reports whether the value of a URL query parameter named
// name, escaped or not, is hidden: unless the name, in any case, is one
// of plainParams.
func secretParam(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	return !plainParams[strings.ToLower(name)]
}

// urlRE finds URLs in free text: a scheme, "://", and what follows up to
// a space or a character no URL holds unescaped (", <, > and `), so that
// a URL in double quotes ends before the closing quote. A single quote
// does not end it: user information may hold one, and would show.
var urlRE = regexp.MustCompile("[a-zA-Z][a-zA-Z0-9+.-]*://[^\\s\"<>`]*")

// escapedURL finds escaped URLs in free text, as a form or a log quotes
// one: a scheme and "://" escaped once or more (https%3A%2F%2F, or
// https%253A%252F%252F), up to a space, a quote, or a character an
// escaped URL does not hold unescaped (&, #, <, >).
var escapedURL = regexp.MustCompile("[a-zA-Z][a-zA-Z0-9+.-]*%(?:25)*3[aA]%(?:25)*2[fF]%(?:25)*2[fF][^\\s\"'<>`&#]*")

// URLs returns text with each URL in it shown as URL shows it, and each
// escaped URL that holds a secret (nestedSecret) replaced with xxxxx
// whole: redirect_uri=https%3A%2F%2Fx%2Fcb%3Faccess_token%3Dt in a form
// body, which URL does not see as one.
func URLs(text string, ui Userinfo) string {
	text = urlRE.ReplaceAllStringFunc(text, func(u string) string { return URL(u, ui) })
	return escapedURL.ReplaceAllStringFunc(text, func(u string) string {
		if nestedSecret(u) {
			return Masked
		}
		return u
	})
}
