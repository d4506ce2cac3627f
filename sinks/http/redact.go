package http

import (
	"encoding/base64"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// What the sink shows of its secrets: nothing. Its errors are logged and
// stored in Redis, where `syncd status` shows them, and a target's
// response, echoing a header or a URL, is quoted in them. So:
//
//   - a URL in an error or a log has no userinfo, and the value of each
//     query parameter is xxxxx (displayURL);
//   - every text the sink puts into an error, a response body or a
//     transport error, has each configured header value, the credentials
//     in it, and the URL's userinfo and query values replaced with
//     [redacted] (redactor), and every URL in it shown as above.
//
// Values shorter than minSecret are left alone: replacing "1" or "ok"
// everywhere would garble the text and hide nothing worth hiding.
const (
	masked    = "xxxxx"
	redacted  = "[redacted]"
	minSecret = 4
)

// displayURL returns raw without userinfo and fragment, each query value
// replaced with xxxxx. A query item without "=" may be a token itself, and
// is replaced whole.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return displayUnparsed(raw)
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	u.ForceQuery = false
	u.RawQuery = maskQuery(u.RawQuery)
	return u.String()
}

// displayUnparsed does what displayURL does, on text that is not a URL
// url.Parse accepts.
func displayUnparsed(raw string) string {
	raw, _, _ = strings.Cut(raw, "#")
	return redactUnparsed(raw, func(auth string) string {
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			return auth[at+1:]
		}
		return auth
	})
}

// redactUnparsed redacts text that url.Parse refuses: its authority goes
// through auth, and each query value is masked.
func redactUnparsed(raw string, auth func(string) string) string {
	raw, query, hasQuery := strings.Cut(raw, "?")
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		a, path, hasPath := strings.Cut(rest, "/")
		raw = scheme + "://" + auth(a)
		if hasPath {
			raw += "/" + path
		}
	}
	if hasQuery && query != "" {
		raw += "?" + maskQuery(query)
	}
	return raw
}

// configURL returns raw as a configuration error may quote it: like
// url.URL.Redacted, the user name kept and the password xxxxx, and query
// values xxxxx.
func configURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// As displayUnparsed, but keep the user name.
		return redactUnparsed(raw, func(auth string) string {
			at := strings.LastIndexByte(auth, '@')
			if colon := strings.IndexByte(auth, ':'); at >= 0 && colon >= 0 && colon < at {
				return auth[:colon+1] + masked + auth[at:]
			}
			return auth
		})
	}
	u.RawQuery = maskQuery(u.RawQuery)
	return u.Redacted()
}

// maskQuery replaces each value of a raw query with xxxxx.
func maskQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		if k, _, ok := strings.Cut(p, "="); ok {
			parts[i] = k + "=" + masked
		} else if p != "" {
			parts[i] = masked
		}
	}
	return strings.Join(parts, "&")
}

// urlPattern finds URLs in free text, such as the error of a transport or
// a Location header net/http could not parse.
var urlPattern = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>\x60]+`)

// redactor hides the secrets of one sink configuration in text.
type redactor struct {
	secrets []string // longest first, so that a secret inside another goes with it
	r       *strings.Replacer
}

// newRedactor collects the secrets of the configured URL and headers: the
// header values (but Host's) and the credentials in them, the URL's
// userinfo and query values, and their escaped forms.
func newRedactor(rawURL string, headers map[string]string) *redactor {
	var secrets []string
	add := func(vs ...string) {
		for _, v := range vs {
			v = strings.TrimSpace(v)
			if len(v) >= minSecret {
				secrets = append(secrets, v, url.QueryEscape(v), url.PathEscape(v))
			}
		}
	}
	for name, value := range headers {
		if strings.EqualFold(name, "Host") {
			continue
		}
		add(value)
		add(credentials(value)...)
	}
	if u, err := url.Parse(rawURL); err == nil {
		if u.User != nil {
			pw, _ := u.User.Password()
			add(u.User.Username(), pw, u.User.String())
		}
		for _, vs := range u.Query() {
			add(vs...)
		}
		for _, item := range strings.Split(u.RawQuery, "&") {
			if _, v, ok := strings.Cut(item, "="); ok {
				add(v)
			} else {
				add(item)
			}
		}
	}
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	secrets = slices.Compact(secrets)
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, redacted)
	}
	return &redactor{secrets: secrets, r: strings.NewReplacer(pairs...)}
}

// credentials returns the parts of a header value that are secrets on
// their own: the credentials after an auth scheme ("Bearer t0ken"), the
// decoded user:password of Basic, and the values of cookies.
func credentials(value string) []string {
	var out []string
	if scheme, cred, ok := strings.Cut(strings.TrimSpace(value), " "); ok {
		out = append(out, cred)
		if strings.EqualFold(scheme, "Basic") {
			if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
				user, pw, _ := strings.Cut(string(dec), ":")
				out = append(out, string(dec), user, pw)
			}
		}
	}
	for _, c := range strings.Split(value, ";") {
		if _, v, ok := strings.Cut(c, "="); ok {
			out = append(out, v)
		}
	}
	return out
}

// longest returns the length of the longest secret.
func (r *redactor) longest() int {
	if len(r.secrets) == 0 {
		return 0
	}
	return len(r.secrets[0])
}

// clean returns text with every secret replaced and every URL shown as
// displayURL shows it.
func (r *redactor) clean(text string) string {
	text = r.r.Replace(text)
	return urlPattern.ReplaceAllStringFunc(text, displayURL)
}

// extend returns end moved forward past any secret in b that starts
// before end and ends after it, so that cutting b at end does not leave a
// piece of a secret that clean cannot recognise.
func (r *redactor) extend(b []byte, end int) int {
	for changed := true; changed; {
		changed = false
		for _, s := range r.secrets {
			for i := max(0, end-len(s)+1); i < end; i++ {
				if i+len(s) > end && i+len(s) <= len(b) && string(b[i:i+len(s)]) == s {
					end = i + len(s)
					changed = true
					break
				}
			}
		}
	}
	return end
}

// cleanError returns err with its text cleaned. The URL of a *url.Error in
// it is replaced in place; if the text still changes, the result is an
// error with the clean text that unwraps to err, so errors.Is and
// errors.As see what they saw before.
func (r *redactor) cleanError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = displayURL(ue.URL)
	}
	msg := err.Error()
	if clean := r.clean(msg); clean != msg {
		return &cleanError{msg: clean, err: err}
	}
	return err
}

type cleanError struct {
	msg string
	err error
}

func (e *cleanError) Error() string { return e.msg }
func (e *cleanError) Unwrap() error { return e.err }
