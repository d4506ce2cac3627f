package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/store"
)

// The API's bounds: a body of at most MaxBody bytes, at most MaxIDs IDs
// per call, and Timeout for the store's work. A read of 1M items takes
// milliseconds (BENCHMARKS.md); while Redis hangs, a call answers 503
// "no answer within 3s" after Timeout, where it waited 10 s and said
// "unavailable" (an outside trial), and the page's 2 s refresh showed
// nothing of it for 10 s.
const (
	MaxBody = 1 << 20
	MaxIDs  = 1000
	Timeout = 3 * time.Second
)

// OffText is the answer to a POST while no token is configured.
const OffText = "the API is off: set http.api_token_env or http.api_token_file to turn it on"

// MinTokenLen is the shortest bearer token accepted, in bytes: a shorter
// one could be guessed.
const MinTokenLen = 16

// CheckToken says why token cannot be the bearer token: shorter than
// MinTokenLen, or with white space, a control character or a non-ASCII
// byte, which no Authorization header could carry. The error never
// quotes the token.
func CheckToken(token string) error {
	if len(token) < MinTokenLen {
		return fmt.Errorf("the token is %d bytes long, the shortest accepted is %d", len(token), MinTokenLen)
	}
	if i := strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r > unicode.MaxASCII }); i >= 0 {
		return fmt.Errorf("the token has white space, a control character or a non-ASCII byte at byte %d", i)
	}
	return nil
}

// errorBody is every error answer: {"error": "text"}.
type errorBody struct {
	Error string `json:"error"`
}

// api serves the routes.
type api struct {
	st       *store.Store
	token    [sha256.Size]byte // SHA-256 of the token, compared in constant time
	writable bool
	log      zerolog.Logger
	hist     *History
	target   *int // the target's max_in_flight when a target is configured
}

// Option configures New.
type Option func(*api)

// WithTarget says a target is configured, with limit its max_in_flight
// (0: none): /api/v1/target and the summary then show its state.
func WithTarget(limit int) Option { return func(a *api) { a.target = &limit } }

// New returns the handler of /api/: reads for anyone, writes for holders
// of token, which CheckToken accepts ("" turns writes off: they get 403 saying how to turn them
// on). hist, when not nil, gives the summary its history.
func New(st *store.Store, token string, log zerolog.Logger, hist *History, opts ...Option) http.Handler {
	a := &api{st: st, token: sha256.Sum256([]byte(token)), writable: token != "", hist: hist,
		log: log.With().Str("component", "api").Logger()}
	for _, o := range opts {
		o(a)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/summary", a.summary)
	mux.HandleFunc("GET /api/v1/items", a.items)
	mux.HandleFunc("GET /api/v1/items/{id}", a.item)
	mux.HandleFunc("GET /api/v1/owners", a.owners)
	mux.HandleFunc("GET /api/v1/target", a.targetState)
	mux.Handle("POST /api/v1/items/requeue", a.write(a.requeue))
	mux.Handle("POST /api/v1/items/release", a.write(a.release))
	mux.Handle("POST /api/v1/items/sync", a.write(a.syncMany))
	mux.Handle("POST /api/v1/items/{id}/sync", a.write(a.syncOne))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			other := r.Clone(r.Context())
			other.Method = m
			if _, pattern := mux.Handler(other); pattern != "/api/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, "use "+strings.Join(allow, " or "))
			return
		}
		writeError(w, http.StatusNotFound, "no such API route (see /api/v1/summary, /api/v1/items, /api/v1/owners)")
	})
	return mux
}

// write guards a POST route: 403 while no token is configured, 401 for a
// wrong or missing bearer token (nothing about a refused request is
// logged: not the header, not that it came; the comparison is of SHA-256
// sums in constant time), then against CSRF: 415 unless the body is
// declared application/json (a form cannot send that across origins
// without a preflight), 403 when an Origin header names another host.
func (a *api) write(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.writable {
			writeError(w, http.StatusForbidden, OffText)
			return
		}
		h := r.Header.Get("Authorization")
		scheme, cred, _ := strings.Cut(h, " ")
		sum := sha256.Sum256([]byte(cred))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 || !strings.EqualFold(scheme, "Bearer") {
			challenge := `Bearer realm="syncd"`
			if h != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, "the body must be sent as Content-Type: application/json")
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			if u, err := url.Parse(o); err != nil || !strings.EqualFold(u.Host, r.Host) {
				writeError(w, http.StatusForbidden, "cross-origin request refused: Origin "+Shown(o, 100)+" is not "+Shown(r.Host, 100))
				return
			}
		}
		next(w, r)
	})
}

// decodeBody reads one JSON object into v, with no unknown fields and
// nothing after it; an empty body leaves v as it is. The query may hold
// the parameters named in query, each once, and nothing else: one that
// is misspelt or given twice would otherwise be dropped or half read
// (an outside trial: ?AUTO_ADD=true ignored, ?reason=x&reason=y took
// x). It answers 400 or 413 itself and reports whether it read a good
// body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, query ...string) bool {
	params, ok := queryOnce(w, r)
	if !ok {
		return false
	}
	for name := range params {
		switch {
		case !slices.Contains(query, name) && len(query) == 0:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("query: %q: this route takes no query parameters, only a JSON body", Shown(name, 100)))
			return false
		case !slices.Contains(query, name):
			writeError(w, http.StatusBadRequest, fmt.Sprintf("query: unknown parameter %q (the parameters are %s, in lower case)", Shown(name, 100), strings.Join(query, ", ")))
			return false
		}
	}
	err := decode(http.MaxBytesReader(w, r.Body, MaxBody), v)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", MaxBody))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// queryOnce returns r's query parameters, each given once, or answers
// 400 itself: one given twice would be half read (Get takes the first),
// and URL.Query drops a pair it cannot parse (reason=%ZZ, a ';'), which
// left the reason out without a word (outside trials). The actions
// (decodeBody) and the reads that take parameters check with it.
func queryOnce(w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	params, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "query: "+Shown(err.Error(), 200))
		return nil, false
	}
	for name, vals := range params {
		if len(vals) > 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("query: %s given %d times", Shown(name, 100), len(vals)))
			return nil, false
		}
	}
	return params, true
}

// decode is decodeBody's reading of body into v (a pointer to a struct
// of json-tagged fields), where every key must be a field's name as
// written, once: encoding/json matches keys case-insensitively and takes
// the last of a key given twice, so {"IDS": ...} was taken, and a proxy
// that reads the first "ids" would see other IDs than syncd does.
func decode(body io.Reader, v any) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if err := exactKeys(data, v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var te *json.UnmarshalTypeError
	switch err := dec.Decode(v); {
	case errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &te):
		return typeError(te)
	case err != nil:
		return fmt.Errorf("body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("body: more than one JSON value")
	}
	return nil
}

// typeError says what a JSON value of the wrong kind should have been,
// in JSON's words: encoding/json names Go's types ("Go value of type
// api.syncRequest", "Go struct field syncRequest.ids of type []string").
func typeError(te *json.UnmarshalTypeError) error {
	want := map[reflect.Kind]string{reflect.Slice: "a list of strings", reflect.String: "a string", reflect.Bool: "true or false",
		reflect.Struct: "an object"}[te.Type.Kind()]
	if want == "" {
		want = "another kind of value"
	}
	if te.Field == "" {
		return fmt.Errorf("body: expected %s, got %s", want, jsonKind(te.Value))
	}
	return fmt.Errorf("body: %s: expected %s, got %s", te.Field, want, jsonKind(te.Value))
}

// jsonKind is a JSON value's kind as encoding/json's Value names it
// ("array", "number", "string", "bool", "object", "number 1.5").
func jsonKind(v string) string {
	kind, _, _ := strings.Cut(v, " ")
	if k, ok := map[string]string{"array": "a list", "object": "an object", "string": "a string", "number": "a number",
		"bool": "true or false"}[kind]; ok {
		return k
	}
	return v
}

// exactKeys checks the keys of the JSON object in data against v's
// fields (see decode). What is not an object, or not valid JSON, is left
// to the decoder to report.
func exactKeys(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var names []string
	for f := range reflect.TypeOf(v).Elem().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return nil
		}
		switch {
		case !slices.Contains(names, key):
			return fmt.Errorf("unknown field %q (the fields are %s, in lower case)", Shown(key, 100), strings.Join(names, ", "))
		case seen[key]:
			return fmt.Errorf("field %q given twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return nil
}

// storeCtx bounds the store's work for one request.
func storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), Timeout)
}

// storeFailed answers a store error: 400 for a refused query or cursor
// or an invalid ID, 404 for an unknown item, 503 otherwise (Redis). Its
// text is Plain, as the CLI's: "store:" says nothing to a client.
func (a *api) storeFailed(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrBadQuery), errors.Is(err, store.ErrBadCursor), errors.Is(err, store.ErrInvalidID):
		writeError(w, http.StatusBadRequest, Plain(err, ""))
	case errors.Is(err, store.ErrUnknownItem):
		writeError(w, http.StatusNotFound, Plain(err, ""))
	default:
		a.log.Warn().Err(err).Msg("api read")
		writeError(w, http.StatusServiceUnavailable, redisError(err))
	}
}

// redisError is what a 503 says of err to a client, who may be anyone
// (reads need no token): Redis's address and network errors stay in the
// daemon's log (an attacker's trial read "dial tcp 127.0.0.1:16392:
// connect: connection refused"); what the store says of its data
// (damaged keys, refusals) is shown.
func redisError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("redis: no answer within %v (the daemon's log has the details)", Timeout)
	}
	if store.IsUnavailable(err) {
		return "redis: unavailable (the daemon's log has the details)"
	}
	return "redis: " + Plain(err, "")
}

func writeError(w http.ResponseWriter, code int, text string) {
	writeJSON(w, code, errorBody{Error: text})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
