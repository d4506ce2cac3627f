package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

const testToken = "t0ken-that-must-never-be-logged"

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
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
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
	st := newStore(t)
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
	// Every POST route is behind the token.
	for _, path := range []string{"/api/v1/items/sync", "/api/v1/items/requeue", "/api/v1/items/release"} {
		if r := call(t, "POST", srv.URL+path, "Bearer wrong", `{"ids": ["a"]}`); r.code != http.StatusUnauthorized {
			t.Errorf("POST %s with a wrong token: %d, want 401", path, r.code)
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
	st := newStore(t)
	ctx := t.Context()
	st.Add(ctx, "a", "b/c d", "q", "k")
	for _, id := range []string{"a", "b/c d", "k"} {
		setDue(t, st, id, time.Hour, false)
	}
	setDue(t, st, "q", 0, true)
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
		{"one, ids in body", one("a"), `{"ids": ["k"]}`, 400, syncResponse{}, `unknown field "ids" (the fields are reason, auto_add`},
		// The query is as strict as the body (an outside trial: a second
		// reason, an upper-case name and a bulk route's query were
		// dropped without a word).
		{"one, reason twice in the query", one("a") + "?reason=x&reason=y", "", 400, syncResponse{}, "query: reason given 2 times"},
		{"one, query name in upper case", one("a") + "?AUTO_ADD=true", "", 400, syncResponse{}, `query: unknown parameter "AUTO_ADD" (the parameters are auto_add, reason`},
		{"one, reason in body and query", one("a") + "?reason=q", `{"reason": "b"}`, 400, syncResponse{}, "reason: given in the body and in the query"},
		// An empty reason is given all the same (the query's was taken).
		{"one, empty reason in body and query", one("a") + "?reason=q", `{"reason": ""}`, 400, syncResponse{}, "reason: given in the body and in the query"},
		{"one, reason a number", one("a"), `{"reason": 5}`, 400, syncResponse{}, "body: reason: expected a string, got a number"},
		{"one, auto_add in body and query", one("a") + "?auto_add=true", `{"auto_add": false}`, 400, syncResponse{}, "auto_add: given in the body and in the query"},
		{"bulk, a query", bulk + "?reason=q", `{"ids": ["k"]}`, 400, syncResponse{}, `query: "reason": this route takes no query parameters`},
		{"one, a bad escape in the query", one("a") + "?reason=%ZZ", "", 400, syncResponse{}, `query: invalid URL escape "%ZZ"`},
		{"one, a semicolon in the query", one("a") + "?reason=a;b", "", 400, syncResponse{}, "query: invalid semicolon separator in query"},
		{"bulk, a bad escape in the query", bulk + "?reason=%ZZ", `{"ids": ["k"]}`, 400, syncResponse{}, `query: invalid URL escape "%ZZ"`},
		// JSON's words, not Go's (it said "Go value of type api.syncRequest").
		{"bulk, a list for a body", bulk, `[{"ids": ["a"]}]`, 400, syncResponse{}, "body: expected an object, got a list"},
		{"bulk, ids a string", bulk, `{"ids": "a"}`, 400, syncResponse{}, "body: ids: expected a list of strings, got a string"},
		{"one, invalid id", one("bad%01"), "", 400, syncResponse{}, "control character"},
		{"bulk", bulk, `{"ids": ["k", "nope", "nope2"], "reason": "bulk"}`, 404, syncResponse{Triggered: 1, Unknown: []string{"nope", "nope2"}}, "nope, nope2"},
		{"bulk, no ids", bulk, `{"reason": "x"}`, 400, syncResponse{}, "no ids"},
		{"bulk, not JSON", bulk, `ids=a`, 400, syncResponse{}, "body:"},
		{"bulk, unknown field", bulk, `{"ids": ["a"], "force": true}`, 400, syncResponse{}, "unknown field"},
		{"bulk, key in upper case", bulk, `{"IDS": ["k"]}`, 400, syncResponse{}, `unknown field "IDS" (the fields are ids, reason, auto_add, in lower case)`},
		{"bulk, key given twice", bulk, `{"ids": ["k"], "reason": "x", "ids": ["a"]}`, 400, syncResponse{}, `field "ids" given twice`},
		{"bulk, two values", bulk, `{"ids": ["a"]} {}`, 400, syncResponse{}, "more than one"},
		{"bulk, bad reason", bulk, `{"ids": ["a"], "reason": "a\u0007b"}`, 400, syncResponse{}, "nothing triggered: reason: control or format character U+0007"},
		{"bulk, too many", bulk, `{"ids": [` + strings.Repeat(`"x",`, MaxIDs) + `"x"]}`, 400, syncResponse{}, "limit per call"},
		{"bulk, too big", bulk, `{"ids": ["` + strings.Repeat("x", MaxBody) + `"]}`, 413, syncResponse{}, "larger than"},
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
		if d := testutil.DueIn(t, st, id); d > 0 {
			t.Errorf("%s due in %v after its trigger", id, d)
		}
	}
	if unknown, _ := st.Unknown(ctx, "nope", "x", "bad\x01"); len(unknown) != 3 {
		t.Errorf("added some of nope, x, bad: unknown %q", unknown)
	}
	if note, ok, _ := st.LastTrigger(ctx, "b/c d"); !ok || note.Reason != "slash" {
		t.Errorf("LastTrigger(b/c d) = %+v, %v", note, ok)
	}
	if r := call(t, "GET", one("a"), auth, ""); r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q; want 405, POST", r.code, r.header.Get("Allow"))
	}
	if r := call(t, "DELETE", srv.URL+"/api/v1/summary", auth, ""); r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET" {
		t.Errorf("DELETE summary: %d, Allow %q; want 405, GET", r.code, r.header.Get("Allow"))
	}
	if r := call(t, "POST", srv.URL+"/api/v2/x", auth, ""); r.code != http.StatusNotFound || !strings.Contains(r.body.Error, "no such API route") {
		t.Errorf("POST /api/v2/x: %d %q; want 404, no such API route", r.code, r.body.Error)
	}
}

// Without a token every POST is refused with 403 saying how to turn the
// API on; reads work.
func TestAPIOffWithoutToken(t *testing.T) {
	st := newStore(t)
	st.Add(t.Context(), "a")
	srv, _ := apiServer(t, st, "")
	for _, path := range []string{"/api/v1/items/a/sync", "/api/v1/items/sync", "/api/v1/items/requeue", "/api/v1/items/release"} {
		r := call(t, "POST", srv.URL+path, "Bearer "+testToken, `{"ids": ["a"]}`)
		if r.code != http.StatusForbidden || r.body.Error != OffText {
			t.Errorf("POST %s: %d %q; want 403 %q", path, r.code, r.body.Error, OffText)
		}
	}
	var sum Summary
	if code := get(t, srv.URL+"/api/v1/summary", &sum); code != http.StatusOK || sum.Items != 1 || sum.Writable {
		t.Errorf("GET summary without a token: %d %+v", code, sum)
	}
}

func FuzzParseSyncRequest(f *testing.F) {
	for _, s := range []string{"", "{}", `{"ids": ["a", "b"], "reason": "r", "auto_add": true}`, `{"ids": null}`,
		`{"ids": ["a"]} {}`, `{"ids": [1]}`, `{"IDS": ["a"]}`, `{"ids": [], "ids": ["b"]}`, `[`, `{"reason": "\u0000"}`, fmt.Sprintf(`{"ids": [%s"x"]}`, strings.Repeat(`"x",`, MaxIDs))} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req syncRequest
		if err := decode(bytes.NewReader(body), &req); err != nil || len(req.IDs) > MaxIDs {
			return
		}
		// What was accepted names each field once, as written.
		var keys map[string]json.RawMessage
		if json.Unmarshal(body, &keys) == nil {
			for k := range keys {
				if k != "ids" && k != "reason" && k != "auto_add" {
					t.Fatalf("accepted key %q", k)
				}
			}
		}
		// What was accepted goes to the store's checks without a panic.
		_ = store.TriggerParams{IDs: req.IDs, Reason: req.Reason, Add: req.AutoAdd}.Validate()
	})
}

func TestCheckToken(t *testing.T) {
	tests := []struct {
		token, wantErr string
	}{
		{"s3cret-API-token-never-shown", ""},
		{strings.Repeat("x", MinTokenLen), ""},
		{strings.Repeat("x", MinTokenLen-1), "15 bytes long, the shortest accepted is 16"},
		{"s3cret token with spaces", "white space, a control character or a non-ASCII byte at byte 6"},
		{"s3cret-token-with-\x7f-del", "at byte 18"},
		{"s3cret-token-with-é-accent", "at byte 18"},
	}
	for _, tt := range tests {
		err := CheckToken(tt.token)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("CheckToken(%q) = %v, want nil", tt.token, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("CheckToken(%q) = %v, want %q", tt.token, err, tt.wantErr)
		case err != nil && strings.Contains(err.Error(), tt.token):
			t.Errorf("CheckToken(%q) quotes the token: %v", tt.token, err)
		}
	}
}

// A 503 tells anyone (reads need no token) that Redis is unavailable, not
// its address: an attacker's trial read the dial error whole. What the
// store says of its data is shown.
func TestRedisErrorHidesAddress(t *testing.T) {
	dial := fmt.Errorf("store: daemons: %w", &net.OpError{Op: "dial", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6379}, Err: syscall.ECONNREFUSED})
	if got := redisError(dial); strings.Contains(got, "10.1.2.3") || got != "redis: unavailable (the daemon's log has the details)" {
		t.Errorf("redisError(dial) = %q", got)
	}
	other := errors.New("store: shard 2: bad list query")
	if got := redisError(other); got != "redis: shard 2: bad list query" { // without "store:" (Plain)
		t.Errorf("redisError(other) = %q", got)
	}
}

// While Redis hangs (SIGSTOP), a read answers 503 within Timeout and
// says Redis gave no answer: it waited 10 s and said "unavailable".
func TestAPIRedisHung(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "hung", Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.Add(t.Context(), "a")
	api, _ := apiServer(t, st, testToken)
	srv.Pause(t)
	defer srv.Resume(t)
	for _, path := range []string{"/api/v1/summary", "/api/v1/items/a"} {
		start := time.Now()
		resp, err := http.Get(api.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		want := `{"error":"redis: no answer within 3s (the daemon's log has the details)"}`
		if resp.StatusCode != http.StatusServiceUnavailable || strings.TrimSpace(string(body)) != want || took > Timeout+time.Second {
			t.Errorf("GET %s with Redis paused: %d %s after %v; want 503 %s within %v", path, resp.StatusCode, body, took.Round(time.Millisecond), want, Timeout+time.Second)
		}
	}
}
