package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/syncd/syncd/store"
)

// idsRequest is the body of requeue and release.
type idsRequest struct {
	IDs []string `json:"ids"`
}

// readIDs reads a body of 1..MaxIDs valid IDs, answering 400 or 413
// itself.
func readIDs(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	var req idsRequest
	if !decodeBody(w, r, &req) {
		return nil, false
	}
	if len(req.IDs) == 0 || len(req.IDs) > MaxIDs {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`body: %d ids; give 1..%d ({"ids": ["a", "b"]})`, len(req.IDs), MaxIDs))
		return nil, false
	}
	for _, id := range req.IDs {
		if err := store.ValidateID(id); err != nil {
			writeError(w, http.StatusBadRequest, "nothing done: "+Plain(err, ""))
			return nil, false
		}
	}
	return req.IDs, true
}

// requeue is POST /api/v1/items/requeue: make items due now and forget
// their failures (brings quarantined items back).
func (a *api) requeue(w http.ResponseWriter, r *http.Request) {
	ids, ok := readIDs(w, r)
	if !ok {
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	unknown, err := a.st.Unknown(ctx, ids...)
	if err != nil {
		a.storeFailed(w, err)
		return
	}
	n, err := a.st.Requeue(ctx, ids...)
	if err != nil {
		a.storeFailed(w, err)
		return
	}
	a.log.Info().Int("requeued", n).Int("unknown", len(unknown)).Str("first", Shown(ids[0], 64)).Msg("requeued")
	out := struct {
		Requeued int      `json:"requeued"`
		Unknown  []string `json:"unknown"`
		Error    string   `json:"error,omitempty"`
	}{Requeued: n, Unknown: nonNil(unknown)}
	code, msg := unknownIDs(unknown)
	out.Error = msg
	writeJSON(w, code, out)
}

// unknownIDs is the status and error of a write that found unknown IDs
// among its own: 404 naming them, as the trigger routes answer and as
// the CLI exits 1, whether or not some IDs were known (those are acted
// on all the same, and counted in the body). It was 200, so a script
// could not tell a requeue or release of nothing but typos from one
// that did what it asked (an outside trial).
func unknownIDs(unknown []string) (int, string) {
	if len(unknown) == 0 {
		return http.StatusOK, ""
	}
	n := len(unknown)
	return http.StatusNotFound, fmt.Sprintf("%s (not in the item set; syncd items add adds %s): %s", Count(n, "unknown id"), them(n), IDList(unknown))
}

// release is POST /api/v1/items/release: force release each item's
// claim and raise its fence (store.ForceRelease).
func (a *api) release(w http.ResponseWriter, r *http.Request) {
	ids, ok := readIDs(w, r)
	if !ok {
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	out := struct {
		Released int               `json:"released"`
		NotHeld  []string          `json:"not_held"`
		Unknown  []string          `json:"unknown"`
		Failed   map[string]string `json:"failed,omitempty"`
		Error    string            `json:"error,omitempty"`
	}{NotHeld: []string{}, Unknown: []string{}}
	for _, id := range ids {
		held, fence, err := a.st.ForceRelease(ctx, id)
		switch {
		case errors.Is(err, store.ErrUnknownItem):
			out.Unknown = append(out.Unknown, id)
		case errors.Is(err, store.ErrFenceLimit):
			if out.Failed == nil {
				out.Failed = map[string]string{}
			}
			out.Failed[id] = Plain(err, "")
		case err != nil:
			a.storeFailed(w, err)
			return
		case held:
			out.Released++
			a.log.Info().Str("id", Shown(id, 64)).Uint64("fence", fence).Msg("force released")
		default:
			out.NotHeld = append(out.NotHeld, id)
		}
	}
	code, msg := unknownIDs(out.Unknown)
	out.Error = msg
	writeJSON(w, code, out)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

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

// readSync reads a trigger body, answering 400 or 413 itself: the
// shape only (at most MaxIDs IDs); the store checks IDs and the reason.
func readSync(w http.ResponseWriter, r *http.Request) (syncRequest, bool) {
	var req syncRequest
	if !decodeBody(w, r, &req) {
		return req, false
	}
	if len(req.IDs) > MaxIDs {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("body: %d ids, the limit per call is %d", len(req.IDs), MaxIDs))
		return req, false
	}
	return req, true
}

// syncOneRequest is the optional JSON body of POST
// /api/v1/items/{id}/sync, which takes its ID from the path. Its fields
// are pointers so that a value given, even "" or false, is told from
// one left out: either may be in the query instead, not in both.
type syncOneRequest struct {
	Reason  *string `json:"reason"`
	AutoAdd *bool   `json:"auto_add"`
}

// syncOne is POST /api/v1/items/{id}/sync: trigger one item. The body
// ({"reason": ..., "auto_add": ...}) is optional; ?auto_add=true and
// ?reason= work too, each given once, and not also in the body.
func (a *api) syncOne(w http.ResponseWriter, r *http.Request) {
	var one syncOneRequest
	if !decodeBody(w, r, &one, "auto_add", "reason") {
		return
	}
	req := syncRequest{IDs: []string{r.PathValue("id")}}
	q := r.URL.Query()
	for _, name := range []string{"reason", "auto_add"} {
		inBody := name == "reason" && one.Reason != nil || name == "auto_add" && one.AutoAdd != nil
		if q.Has(name) && inBody {
			// The body's used to win without a word (an outside trial),
			// and then the query's over a body's "reason": "".
			writeError(w, http.StatusBadRequest, name+": given in the body and in the query; give it once")
			return
		}
	}
	switch {
	case one.AutoAdd != nil:
		req.AutoAdd = *one.AutoAdd
	case q.Has("auto_add"):
		b, err := strconv.ParseBool(q.Get("auto_add"))
		if err != nil {
			writeError(w, http.StatusBadRequest, "auto_add: "+Shown(q.Get("auto_add"), 64)+" is not true or false")
			return
		}
		req.AutoAdd = b
	}
	switch {
	case one.Reason != nil:
		req.Reason = *one.Reason
	case q.Has("reason"):
		req.Reason = q.Get("reason")
	}
	a.trigger(w, r, req)
}

// syncMany is POST /api/v1/items/sync: trigger the body's ids.
func (a *api) syncMany(w http.ResponseWriter, r *http.Request) {
	req, ok := readSync(w, r)
	if !ok {
		return
	}
	if len(req.IDs) == 0 {
		writeError(w, http.StatusBadRequest, `body: no ids ({"ids": ["a", "b"], "reason": "...", "auto_add": false})`)
		return
	}
	a.trigger(w, r, req)
}

// trigger triggers req's IDs and answers: 200 when every one was
// triggered, 404 naming the unknown ones, 409 naming quarantined ones
// (the others are triggered all the same), 400 when an ID or the reason
// is refused (nothing is triggered), 503 when Redis failed.
func (a *api) trigger(w http.ResponseWriter, r *http.Request, req syncRequest) {
	p := store.TriggerParams{IDs: req.IDs, Reason: req.Reason, Add: req.AutoAdd}
	if err := p.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "nothing triggered: "+Plain(err, "trigger"))
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	res, err := a.st.Trigger(ctx, p)
	out := syncResponse{Triggered: res.Triggered(), Unknown: nonNil(res.Unknown), InFlight: res.InFlight, Added: res.Added,
		Quarantined: res.Quarantined}
	if res.Triggered() > 0 {
		a.log.Info().Int("triggered", res.Triggered()).Int("in_flight", len(res.InFlight)).Int("added", len(res.Added)).
			Int("unknown", len(res.Unknown)).Int("quarantined", len(res.Quarantined)).Str("reason", req.Reason).
			Str("first", Shown(firstTriggered(res), 64)).Msg("triggered")
	}
	code := http.StatusOK
	switch {
	case err != nil:
		a.log.Error().Err(err).Msg("trigger")
		code, out.Error = http.StatusServiceUnavailable, redisError(err)
	case len(res.Unknown) > 0:
		code, out.Error = http.StatusNotFound, TriggerTrouble(res, "auto_add").Error()
	case len(res.Quarantined) > 0:
		code, out.Error = http.StatusConflict, TriggerTrouble(res, "auto_add").Error()
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
