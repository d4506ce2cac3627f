package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/store"
)

// The API's bounds: a body of at most apiMaxBody bytes, at most
// apiMaxIDs IDs per call, and apiTimeout for the store's work.
const (
	apiMaxBody = 1 << 20
	apiMaxIDs  = 1000
	apiTimeout = 10 * time.Second
)

// apiOffText is the answer under /api/ while no token is configured.
const apiOffText = "the API is off: set http.api_token_env or http.api_token_file to turn it on"

// syncRequest is the JSON body of the trigger routes. The bulk form
// (POST /api/v1/items/sync) needs IDs; the single form (POST
// /api/v1/items/{id}/sync) takes its ID from the path, and a body is
// optional there.
type syncRequest struct {
	IDs     []string `json:"ids"`
	Reason  string   `json:"reason"`
	AutoAdd bool     `json:"auto_add"`
}

// syncResponse is the JSON answer of the trigger routes.
type syncResponse struct {
	Triggered   int      `json:"triggered"`
	Unknown     []string `json:"unknown"`
	InFlight    []string `json:"in_flight,omitempty"`
	Added       []string `json:"added,omitempty"`
	Quarantined []string `json:"quarantined,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// parseSyncRequest reads a trigger body: one JSON object with no unknown
// fields and nothing after it, at most apiMaxIDs IDs; an empty body is the
// zero request. It checks the shape only: the store checks IDs and the
// reason.
func parseSyncRequest(body io.Reader) (syncRequest, error) {
	var req syncRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	switch err := dec.Decode(&req); {
	case errors.Is(err, io.EOF):
		return syncRequest{}, nil
	case err != nil:
		return syncRequest{}, fmt.Errorf("body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return syncRequest{}, errors.New("body: more than one JSON value")
	}
	if len(req.IDs) > apiMaxIDs {
		return syncRequest{}, fmt.Errorf("body: %d ids, the limit per call is %d", len(req.IDs), apiMaxIDs)
	}
	return req, nil
}

// api serves the trigger routes to holders of the bearer token.
type api struct {
	st    *store.Store
	token [sha256.Size]byte // SHA-256 of the token, compared in constant time
	log   zerolog.Logger
}

// newAPI returns the handler of /api/: the trigger routes behind the
// bearer token, or, when token is "", a 404 on every route saying the API
// is off.
func newAPI(st *store.Store, token string, log zerolog.Logger) http.Handler {
	if token == "" {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusNotFound, syncResponse{Error: apiOffText})
		})
	}
	a := &api{st: st, token: sha256.Sum256([]byte(token)), log: log.With().Str("component", "api").Logger()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/items/{id}/sync", a.syncOne)
	mux.HandleFunc("POST /api/v1/items/sync", a.syncMany)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		post := r.Clone(r.Context())
		post.Method = http.MethodPost
		if _, pattern := mux.Handler(post); pattern != "/api/" {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, syncResponse{Error: "use POST"})
			return
		}
		writeJSON(w, http.StatusNotFound, syncResponse{Error: "no such API route: POST /api/v1/items/{id}/sync or POST /api/v1/items/sync"})
	})
	return a.authorize(mux)
}

// authorize lets through requests that carry the token as a bearer
// credential, and answers 401 to every other, before reading anything
// else. Nothing about a refused request is logged: not the header, not
// that it came. The comparison is of SHA-256 sums in constant time, so
// neither the token's bytes nor its length show in the timing.
func (a *api) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, cred, _ := strings.Cut(h, " ")
		sum := sha256.Sum256([]byte(cred))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 || !strings.EqualFold(scheme, "Bearer") {
			challenge := `Bearer realm="syncd"`
			if h != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeJSON(w, http.StatusUnauthorized, syncResponse{Error: "missing or wrong bearer token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// syncOne is POST /api/v1/items/{id}/sync: trigger one item. The body
// ({"reason": ..., "auto_add": ...}) is optional; ?auto_add=true and
// ?reason= work too.
func (a *api) syncOne(w http.ResponseWriter, r *http.Request) {
	req, ok := a.request(w, r)
	if !ok {
		return
	}
	if len(req.IDs) > 0 {
		writeJSON(w, http.StatusBadRequest, syncResponse{Error: "ids belongs to POST /api/v1/items/sync; this route takes its id from the path"})
		return
	}
	q := r.URL.Query()
	if v := q.Get("auto_add"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, syncResponse{Error: "auto_add: " + shown(v, 64) + " is not true or false"})
			return
		}
		req.AutoAdd = req.AutoAdd || b
	}
	if v := q.Get("reason"); v != "" && req.Reason == "" {
		req.Reason = v
	}
	req.IDs = []string{r.PathValue("id")}
	a.trigger(w, r, req)
}

// syncMany is POST /api/v1/items/sync: trigger the body's ids.
func (a *api) syncMany(w http.ResponseWriter, r *http.Request) {
	req, ok := a.request(w, r)
	if !ok {
		return
	}
	if len(req.IDs) == 0 {
		writeJSON(w, http.StatusBadRequest, syncResponse{Error: `body: no ids ({"ids": ["a", "b"], "reason": "...", "auto_add": false})`})
		return
	}
	a.trigger(w, r, req)
}

// request reads the body of a trigger call, answering 400 or 413 itself.
func (a *api) request(w http.ResponseWriter, r *http.Request) (syncRequest, bool) {
	req, err := parseSyncRequest(http.MaxBytesReader(w, r.Body, apiMaxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeJSON(w, http.StatusRequestEntityTooLarge, syncResponse{Error: fmt.Sprintf("body: larger than %d bytes", apiMaxBody)})
		return req, false
	case err != nil:
		writeJSON(w, http.StatusBadRequest, syncResponse{Error: err.Error()})
		return req, false
	}
	return req, true
}

// trigger triggers req's IDs and answers: 200 when every one was
// triggered, 404 naming the unknown ones, 409 naming quarantined ones
// (the others are triggered all the same), 400 when an ID or the reason
// is refused (nothing is triggered), 503 when Redis failed.
func (a *api) trigger(w http.ResponseWriter, r *http.Request, req syncRequest) {
	p := store.TriggerParams{IDs: req.IDs, Reason: req.Reason, Add: req.AutoAdd}
	if err := p.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, syncResponse{Error: "nothing triggered: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	res, err := a.st.Trigger(ctx, p)
	out := syncResponse{Triggered: res.Triggered(), Unknown: res.Unknown, InFlight: res.InFlight, Added: res.Added,
		Quarantined: res.Quarantined}
	if out.Unknown == nil {
		out.Unknown = []string{}
	}
	if res.Triggered() > 0 {
		a.log.Info().Int("triggered", res.Triggered()).Int("in_flight", len(res.InFlight)).Int("added", len(res.Added)).
			Int("unknown", len(res.Unknown)).Int("quarantined", len(res.Quarantined)).Str("reason", req.Reason).
			Str("first", shown(firstTriggered(res), 64)).Msg("triggered")
	}
	code := http.StatusOK
	switch {
	case err != nil:
		a.log.Error().Err(err).Msg("trigger")
		code, out.Error = http.StatusServiceUnavailable, "redis: "+err.Error()
	case len(res.Unknown) > 0:
		code, out.Error = http.StatusNotFound, triggerTrouble(res, "auto_add").Error()
	case len(res.Quarantined) > 0:
		code, out.Error = http.StatusConflict, triggerTrouble(res, "auto_add").Error()
	}
	writeJSON(w, code, out)
}

// firstTriggered is an ID the trigger took, for the log line.
func firstTriggered(res store.TriggerResult) string {
	for _, l := range [][]string{res.Due, res.InFlight, res.Added} {
		if len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
