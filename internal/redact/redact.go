package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
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
// value of each query parameter whose name says it is a secret
// (secretParam) replaced with xxxxx; a query item without "=" may be a
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
// whose names say they are secrets (secretParam); the rest, and a
// fragment that holds no pairs, stays.
func fragment(frag string) string {
	if !strings.Contains(frag, "=") {
		return frag
	}
	items := strings.Split(frag, "&")
	for i, item := range items {
		if k, _, ok := strings.Cut(item, "="); ok && secretParam(k) {
			items[i] = k + "=" + Masked
		}
	}
	return strings.Join(items, "&")
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
// whose name says it is a secret (secretParam), and each item without
// "=" whole: it has no name to go by, and may be a token itself. The
// rest stays, so that ?page=2&sort=asc reads as it is.
func Query(raw string) string {
	if raw == "" {
		return ""
	}
	items := strings.Split(raw, "&")
	for i, item := range items {
		if k, _, ok := strings.Cut(item, "="); ok {
			if secretParam(k) {
				items[i] = k + "=" + Masked
			}
		} else if item != "" {
			items[i] = Masked
		}
	}
	return strings.Join(items, "&")
}

// secretKeyName is secretKey, the names whose values Pairs hides, as a
// whole name.
var secretKeyName = regexp.MustCompile(`(?i)^` + secretKey + `$`)

// secretParamParts are pieces of the names of secret query parameters
// that SecretName does not look for: session ids (PHPSESSID) and SAML
// messages (SAMLResponse).
var secretParamParts = []string{"sessid", "saml"}

// secretParamWords are names of secret query parameters too short to
// look for inside other words: Azure's sig, session ids, OAuth's code,
// one-time passwords, CAS tickets, SAML assertions.
var secretParamWords = []string{"sig", "sid", "pwd", "code", "jwt", "otp", "ticket", "cred", "creds", "hmac", "assertion"}

// secretParam reports whether a URL query parameter's name, escaped or
// not, says that its value is a secret: a name SecretName takes
// (access_token, api_key, X-Amz-Signature, X-Amz-Credential,
// X-Amz-Security-Token, client_secret, password, session), one whose
// value Pairs hides (pwd), one with one of secretParamParts in it, or
// one with one of secretParamWords as a word of its own (sig, auth_code,
// userSid; not zipcode, signal or side).
func secretParam(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	lower := strings.ToLower(name)
	if SecretName(name) || secretKeyName.MatchString(name) ||
		slices.ContainsFunc(secretParamParts, func(p string) bool { return strings.Contains(lower, p) }) {
		return true
	}
	return slices.ContainsFunc(words(name), func(w string) bool { return slices.Contains(secretParamWords, w) })
}

// words splits name into its words in lower case: at each character that
// is not a letter or a digit, and where a capital follows a small letter
// (userSid).
func words(name string) []string {
	var out []string
	start, prev := -1, rune(0)
	for i, r := range name {
		alnum := unicode.IsLetter(r) || unicode.IsDigit(r)
		if start >= 0 && (!alnum || unicode.IsUpper(r) && unicode.IsLower(prev)) {
			out = append(out, strings.ToLower(name[start:i]))
			start = -1
		}
		if alnum && start < 0 {
			start = i
		}
		prev = r
	}
	if start >= 0 {
		out = append(out, strings.ToLower(name[start:]))
	}
	return out
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
