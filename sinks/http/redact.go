package http

import (
	"encoding/base64"
	"errors"
	"net/url"
	"strings"

	"github.com/syncd/syncd/internal/redact"
)

// What the sink shows of its secrets: nothing. Its errors are logged and
// stored in Redis, where `syncd status` shows them, and a target's
// response, echoing a header or a URL, is quoted in them. So:
//
//   - a URL in an error or a log has no userinfo, and the value of each
//     query parameter but those of harmless names (page, sort, ...) is
//     xxxxx (redact.Display);
//   - every text the sink puts into an error, a response body or a
//     transport error, has each configured header value, the credentials
//     in it, and what a log hides of the URL (its userinfo, the query
//     values but those of harmless names, a webhook's token in its path:
//     redact.URLSecrets) replaced with [redacted] (redactor), and every
//     URL in it shown as above. So a value the logs show (sort=name) is
//     not hidden in a quoted body either.
//
// Values shorter than redact.MinSecret are left alone.

// redactor hides the secrets of one sink configuration in text.
type redactor struct{ *redact.Secrets }

// newRedactor collects the secrets of the configured URL and headers: the
// header values (but Host's) and the credentials in them, what URL hides
// of the URL (redact.URLSecrets) with its userinfo's parts, and their
// escaped forms.
func newRedactor(rawURL string, headers map[string]string) *redactor {
	var secrets []string
	for name, value := range headers {
		if strings.EqualFold(name, "Host") {
			continue
		}
		secrets = append(secrets, value)
		secrets = append(secrets, credentials(value)...)
	}
	if u, err := url.Parse(rawURL); err == nil {
		if u.User != nil {
			pw, _ := u.User.Password()
			// net/http sends the userinfo as a Basic Authorization header,
			// which a target may echo (an attacker's trial read it in the
			// API): its base64 form is a secret too.
			basic := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pw))
			secrets = append(secrets, u.User.Username(), pw, u.User.String(), basic)
		}
	}
	// Only what the logs hide too: a query value of a harmless name
	// (page=2, sort=name) shows in the URL the sink logs, and hiding it
	// in a quoted body would hide every word that happens to equal it.
	secrets = append(secrets, redact.URLSecrets(rawURL)...)
	return &redactor{redact.NewSecrets(secrets...)}
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
	if clean := r.Clean(msg); clean != msg {
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
