package redact

import (
	"net/url"
	"regexp"
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
// token itself, and is replaced whole. A fragment of name=value pairs,
// as OAuth's implicit flow returns a token in (#access_token=...), has
// its secret values replaced too; any other fragment (#section-2)
// stays. It works on the text, so that it redacts what url.Parse
// refuses as well, and leaves the rest as it is. Applied twice, it
// changes nothing more.
func URL(raw string, ui Userinfo) string {
	raw, frag, hasFrag := strings.Cut(raw, "#")
	raw, query, _ := strings.Cut(raw, "?")
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		auth, path, hasPath := strings.Cut(rest, "/")
		raw = scheme + "://" + userinfo(auth, ui)
		if hasPath {
			raw += "/" + path
		}
	}
	if query != "" {
		raw += "?" + Query(query)
	}
	if hasFrag && ui != Display {
		raw += "#" + fragment(frag)
	}
	return raw
}

// fragment replaces, in a URL's fragment of name=value pairs, the values
// Query would (secretParam); the rest, and a fragment that holds no
// pairs, stays.
func fragment(frag string) string {
	if !strings.Contains(frag, "=") {
		return frag
	}
	return params(frag, false)
}

// userinfo returns the authority auth with its user information, up to
// its last "@" as url.Parse takes it, shown as ui says.
func userinfo(auth string, ui Userinfo) string {
	at := strings.LastIndexByte(auth, '@')
	if at < 0 {
		return auth
	}
	switch ui {
	case Display:
		return auth[at+1:]
	case Password:
		if colon := strings.IndexByte(auth[:at], ':'); colon >= 0 {
			return auth[:colon+1] + Masked + auth[at:]
		}
		return auth
	}
	return Masked + auth[at:]
}

// Query replaces with xxxxx the value of each parameter of a raw query
// but those whose names are known to be harmless (plainParams: page,
// sort, limit, q, ...), and each item without "=" whole: it has no name
// to go by, and may be a token itself. So ?page=2&sort=asc reads as it
// is, and a secret under a name no list foresaw (pw=, p=, sign=) is
// still hidden.
func Query(raw string) string {
	if raw == "" {
		return ""
	}
	return params(raw, true)
}

// params replaces the values of the secret parameters (secretParam) of
// raw, name=value pairs joined by "&", and, with bare, each item without
// "=" whole.
func params(raw string, bare bool) string {
	items := strings.Split(raw, "&")
	for i, item := range items {
		if k, _, ok := strings.Cut(item, "="); ok {
			if secretParam(k) {
				items[i] = k + "=" + Masked
			}
		} else if bare && item != "" {
			items[i] = Masked
		}
	}
	return strings.Join(items, "&")
}

// plainParams are query parameter names whose values are not secrets
// anywhere they are commonly used: paging, sorting, searching, formats
// and time ranges. Any other name's value is hidden: a list of secret
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

// URLs returns text with each URL in it shown as URL shows it.
func URLs(text string, ui Userinfo) string {
	return urlRE.ReplaceAllStringFunc(text, func(u string) string { return URL(u, ui) })
}
