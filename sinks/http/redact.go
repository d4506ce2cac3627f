package http

import (
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/syncd/syncd/internal/redact"
)

// What the sink shows of its secrets: nothing. Its errors are logged and
// stored in Redis, where `syncd status` shows them, and a target's
// response, echoing a header or a URL, is quoted in them. So:
//
//   - a URL in an error or a log has no userinfo, and the value of each
//     query parameter is xxxxx (redact.Display);
//   - every text the sink puts into an error, a response body or a
//     transport error, has each configured header value, the credentials
//     in it, and the URL's userinfo and query values replaced with
//     [redacted] (redactor), and every URL in it shown as above.
//
// Values shorter than minSecret are left alone: replacing "1" or "ok"
// everywhere would garble the text and hide nothing worth hiding.
const (
	redacted  = "[redacted]"
	minSecret = 4
)

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
// redact.Display shows it.
func (r *redactor) clean(text string) string {
	return redact.URLs(r.r.Replace(text), redact.Display)
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
		ue.URL = redact.URL(ue.URL, redact.Display)
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
