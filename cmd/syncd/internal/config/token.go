package config

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"unicode"
)

// MinAPITokenLen is the shortest API token accepted, in bytes: a shorter
// one could be guessed.
const MinAPITokenLen = 16

// APIToken returns the bearer token of the HTTP API, read from the
// environment variable named by http.api_token_env or the file named by
// http.api_token_file through env and readFile (nil means os.LookupEnv and
// os.ReadFile), as Store reads the Redis password. It returns "" when
// neither is set: the API is off. Both set, a variable unset or empty, an
// unreadable or empty file, or a token shorter than MinAPITokenLen or
// holding white space or control characters (it could not be sent in an
// Authorization header as it is) is an error; one trailing newline is
// trimmed from a token file. Errors never quote the token.
func (f *File) APIToken(env func(string) (string, bool), readFile func(string) ([]byte, error)) (string, error) {
	if env == nil {
		env = os.LookupEnv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	h := f.s.HTTP
	field, token := "", ""
	switch {
	case h.APITokenEnv != "" && h.APITokenFile != "":
		return "", fail(f.errorAt(nil, "http.api_token_file", nil, "only one of http.api_token_env and http.api_token_file may be set"))
	case h.APITokenEnv != "":
		field = "http.api_token_env"
		v, ok := env(h.APITokenEnv)
		switch {
		case !ok:
			return "", fail(f.errorAt(nil, field, nil, fmt.Sprintf("environment variable %s is not set", h.APITokenEnv)))
		case v == "":
			return "", fail(f.errorAt(nil, field, nil, fmt.Sprintf("environment variable %s is empty", h.APITokenEnv)))
		}
		token = v
	case h.APITokenFile != "":
		field = "http.api_token_file"
		b, err := readFile(h.APITokenFile)
		if err != nil {
			return "", fail(f.errorAt(err, field, nil, fmt.Sprintf("%s: %s", h.APITokenFile, fsReason(err))))
		}
		b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
		if len(b) == 0 {
			return "", fail(f.errorAt(nil, field, nil, fmt.Sprintf("%s is empty", h.APITokenFile)))
		}
		token = string(b)
	default:
		return "", nil
	}
	if len(token) < MinAPITokenLen {
		return "", fail(f.errorAt(nil, field, nil, fmt.Sprintf("the token is %d bytes long, the shortest accepted is %d", len(token), MinAPITokenLen)))
	}
	if i := strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r > unicode.MaxASCII }); i >= 0 {
		return "", fail(f.errorAt(nil, field, nil, fmt.Sprintf("the token has white space, a control character or a non-ASCII byte at byte %d", i)))
	}
	return token, nil
}
