package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/store"
)

const testToken = "t0ken-that-must-never-be-logged"

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// apiServer serves newAPI over st under /api/, as serveHTTP mounts it,
// logging into the returned buffer.
func apiServer(t *testing.T, st *store.Store, token string) (*httptest.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := zerolog.New(io.MultiWriter(logs, zerolog.NewTestWriter(t)))
	mux := http.NewServeMux()
	mux.Handle("/api/", newAPI(st, token, log))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, logs
}

type apiReply struct {
	code   int
	header http.Header
	body   syncResponse
}

// call sends a POST (or method) with auth as the Authorization header.
func call(t *testing.T, method, url, auth, body string) apiReply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out syncResponse
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d, body %q is not JSON: %v", method, url, resp.StatusCode, b, err)
	}
	return apiReply{resp.StatusCode, resp.Header, out}
}

// A wrong or missing token gets 401 with a Bearer challenge, and nothing
// is logged about it; the token never appears in the log.
func TestAPIRefusesWrongTokenSilently(t *testing.T) {
	_, st := adminConfig(t, "apiauth")
	st.Add(t.Context(), "a")
	srv, logs := apiServer(t, st, testToken)
	url := srv.URL + "/api/v1/items/a/sync"
	for _, auth := range []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer wrong",
		"Bearer " + strings.Repeat("x", len(testToken)),
		"Bearer " + testToken + "x",
		"Bearer " + testToken[:len(testToken)-1],
		"Basic " + testToken,
		testToken,
		"Bearer  " + testToken,
	} {
		r := call(t, "POST", url, auth, `{"reason": "x"}`)
		if r.code != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %d, WWW-Authenticate %q; want 401 and a Bearer challenge", auth, r.code, r.header.Get("WWW-Authenticate"))
		}
	}
	// Other routes and methods are behind the token too.
	for _, path := range []string{"/api/v1/items/sync", "/api/nothing"} {
		if r := call(t, "GET", srv.URL+path, "Bearer wrong", ""); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, r.code)
		}
	}
	if logs.String() != "" {
		t.Errorf("refused requests were logged:\n%s", logs)
	}
	if r := call(t, "POST", url, "bearer "+testToken, `{"reason": "with the token"}`); r.code != http.StatusOK {
		t.Errorf("the right token (scheme in lower case): %d %+v", r.code, r.body)
	}
	if strings.Contains(logs.String(), testToken) || !strings.Contains(logs.String(), `"with the token"`) {
		t.Errorf("log:\n%s\nwant the trigger with its reason and never the token", logs)
	}
}

// The trigger routes: a due-later item is due now; unknown IDs get 404
// naming them (auto_add adds them); quarantined ones 409; bad bodies 400
// or 413, and nothing is triggered.
func TestAPITriggers(t *testing.T) {
	_, st := adminConfig(t, "api")
	ctx := t.Context()
	st.Add(ctx, "a", "b/c d", "q", "k")
	for _, id := range []string{"a", "b/c d", "k"} {
		st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard(id)), redisZ(t, st, time.Hour, id))
	}
	st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard("q")), redisInf("q"))
	srv, _ := apiServer(t, st, testToken)
	auth := "Bearer " + testToken
	one := func(id string) string { return srv.URL + "/api/v1/items/" + id + "/sync" }
	bulk := srv.URL + "/api/v1/items/sync"

	tests := []struct {
		name, url, body string
		code            int
		want            syncResponse
		errHas          string
	}{
		{"one, no body", one("a"), "", 200, syncResponse{Triggered: 1, Unknown: []string{}}, ""},
		{"one, escaped id", one("b%2Fc%20d"), `{"reason": "slash"}`, 200, syncResponse{Triggered: 1, Unknown: []string{}}, ""},
		{"one, unknown", one("nope"), "", 404, syncResponse{Unknown: []string{"nope"}}, "nope"},
		{"one, auto_add query", one("new1"), "", 0, syncResponse{}, ""}, // replaced below
		{"one, auto_add body", one("new2"), `{"auto_add": true, "reason": "r"}`, 200, syncResponse{Triggered: 1, Unknown: []string{}, Added: []string{"new2"}}, ""},
		{"one, quarantined", one("q"), "", 409, syncResponse{Unknown: []string{}, Quarantined: []string{"q"}}, "syncd requeue"},
		{"one, ids in body", one("a"), `{"ids": ["k"]}`, 400, syncResponse{}, "ids belongs to"},
		{"one, invalid id", one("bad%01"), "", 400, syncResponse{}, "control character"},
		{"bulk", bulk, `{"ids": ["k", "nope", "nope2"], "reason": "bulk"}`, 404, syncResponse{Triggered: 1, Unknown: []string{"nope", "nope2"}}, "nope, nope2"},
		{"bulk, no ids", bulk, `{"reason": "x"}`, 400, syncResponse{}, "no ids"},
		{"bulk, not JSON", bulk, `ids=a`, 400, syncResponse{}, "body:"},
		{"bulk, unknown field", bulk, `{"ids": ["a"], "force": true}`, 400, syncResponse{}, "unknown field"},
		{"bulk, two values", bulk, `{"ids": ["a"]} {}`, 400, syncResponse{}, "more than one"},
		{"bulk, bad reason", bulk, `{"ids": ["a"], "reason": "a\u0007b"}`, 400, syncResponse{}, "nothing triggered"},
		{"bulk, too many", bulk, `{"ids": [` + strings.Repeat(`"x",`, apiMaxIDs) + `"x"]}`, 400, syncResponse{}, "limit per call"},
		{"bulk, too big", bulk, `{"ids": ["` + strings.Repeat("x", apiMaxBody) + `"]}`, 413, syncResponse{}, "larger than"},
	}
	tests[3] = struct {
		name, url, body string
		code            int
		want            syncResponse
		errHas          string
	}{"one, auto_add query", one("new1") + "?auto_add=true&reason=q", "", 200, syncResponse{Triggered: 1, Unknown: []string{}, Added: []string{"new1"}}, ""}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, "POST", tt.url, auth, tt.body)
			if r.code != tt.code || !strings.Contains(r.body.Error, tt.errHas) {
				t.Errorf("%d %q; want %d with %q", r.code, r.body.Error, tt.code, tt.errHas)
			}
			if tt.code == 200 || tt.code == 404 && tt.want.Unknown != nil || tt.code == 409 {
				got := r.body
				got.Error = ""
				if diff := cmp.Diff(got, tt.want); diff != "" {
					t.Errorf("body (-got +want):\n%s", diff)
				}
			}
		})
	}
	for _, id := range []string{"a", "b/c d", "k", "new1", "new2"} {
		if d := dueIn(t, st, id); d > 0 {
			t.Errorf("%s due in %v after its trigger", id, d)
		}
	}
	if in := itemSet(t, st, "nope", "x", "bad\x01"); in != nil {
		t.Errorf("added %q", in)
	}
	if note, ok, _ := st.LastTrigger(ctx, "b/c d"); !ok || note.Reason != "slash" {
		t.Errorf("LastTrigger(b/c d) = %+v, %v", note, ok)
	}
	if r := call(t, "GET", one("a"), auth, ""); r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q; want 405, POST", r.code, r.header.Get("Allow"))
	}
	if r := call(t, "POST", srv.URL+"/api/v2/x", auth, ""); r.code != http.StatusNotFound || !strings.Contains(r.body.Error, "no such API route") {
		t.Errorf("POST /api/v2/x: %d %q; want 404, no such API route", r.code, r.body.Error)
	}
}

// Without a token the API is not mounted: every route answers 404 saying
// how to turn it on.
func TestAPIOffWithoutToken(t *testing.T) {
	_, st := adminConfig(t, "apioff")
	st.Add(t.Context(), "a")
	srv, _ := apiServer(t, st, "")
	for _, path := range []string{"/api/v1/items/a/sync", "/api/v1/items/sync"} {
		r := call(t, "POST", srv.URL+path, "Bearer "+testToken, `{"ids": ["a"]}`)
		if r.code != http.StatusNotFound || r.body.Error != apiOffText {
			t.Errorf("POST %s: %d %q; want 404 %q", path, r.code, r.body.Error, apiOffText)
		}
	}
}

func FuzzParseSyncRequest(f *testing.F) {
	for _, s := range []string{"", "{}", `{"ids": ["a", "b"], "reason": "r", "auto_add": true}`, `{"ids": null}`,
		`{"ids": ["a"]} {}`, `{"ids": [1]}`, `[`, `{"reason": "\u0000"}`, fmt.Sprintf(`{"ids": [%s"x"]}`, strings.Repeat(`"x",`, apiMaxIDs))} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseSyncRequest(bytes.NewReader(body))
		if err != nil {
			if req.IDs != nil || req.Reason != "" || req.AutoAdd {
				t.Errorf("an error with a request: %+v", req)
			}
			return
		}
		if len(req.IDs) > apiMaxIDs {
			t.Errorf("%d ids accepted", len(req.IDs))
		}
		// What was accepted goes to the store's checks without a panic.
		_ = store.TriggerParams{IDs: req.IDs, Reason: req.Reason, Add: req.AutoAdd}.Validate()
	})
}
