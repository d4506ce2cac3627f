package redact

import (
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

// URL returns raw with its user information shown as ui says and each
// query value replaced with xxxxx; a query item without "=" may be a
// token itself, and is replaced whole. It works on the text, so that it
// redacts what url.Parse refuses as well, and leaves the rest as it is.
// Applied twice, it changes nothing more.
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
		raw += "#" + frag
	}
	return raw
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

// Query replaces each value of a raw query with xxxxx, and each item
// without "=" whole.
func Query(raw string) string {
	if raw == "" {
		return ""
	}
	items := strings.Split(raw, "&")
	for i, item := range items {
		if k, _, ok := strings.Cut(item, "="); ok {
			items[i] = k + "=" + Masked
		} else if item != "" {
			items[i] = Masked
		}
	}
	return strings.Join(items, "&")
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
