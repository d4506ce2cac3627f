package web

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDevServe(t *testing.T) {
	addr := os.Getenv("SYNCD_WEB_DEV")
	if addr == "" {
		t.Skip()
	}
	now := time.Now().UnixMilli()
	js := func(w http.ResponseWriter, v any) { w.Header().Set("Content-Type", "application/json"); json.NewEncoder(w).Encode(v) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/summary", func(w http.ResponseWriter, r *http.Request) {
		var h []map[string]any
		for i := 0; i < 150; i++ {
			h = append(h, map[string]any{"t_ms": now - int64(150-i)*2000, "due": 300 + (i*37)%200, "in_flight": 20 + i%5, "syncs_ok": 40 + i%13, "syncs_failed": i % 3})
		}
		js(w, map[string]any{"now_ms": time.Now().UnixMilli(), "items": 1000, "due": 412, "in_flight": 24, "backing_off": 3, "quarantined": 2,
			"oldest_due_ms": 83000, "daemons": 3, "workers": 24, "target": map[string]any{"state": "closed", "since_ms": now - 600000, "permits_in_use": 4, "limit": 16},
			"writable": true, "history": h})
	})
	mux.HandleFunc("GET /api/v1/items", func(w http.ResponseWriter, r *http.Request) {
		var items []map[string]any
		for i := 0; i < 50; i++ {
			st := []string{"due", "in_flight", "backing_off", "quarantined"}[i%4]
			if q := r.URL.Query().Get("state"); q != "all" {
				st = q
			}
			e := ""
			if st == "quarantined" {
				e = "exit status 3: cannot sync poison-7: upstream said 500 Internal Server Error"
			}
			items = append(items, map[string]any{"id": fmt.Sprintf("cust-%04d", i), "state": st, "due_ms": now - 5000, "wait_ms": 80000 - i*1000,
				"last_sync_ms": now - 70000, "owner": "host-a:123/3", "fence": 12 + i, "attempts": i % 5, "last_error": e})
		}
		js(w, map[string]any{"items": items, "next_cursor": "abc", "partial": true})
	})
	mux.HandleFunc("GET /api/v1/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		js(w, map[string]any{"id": r.PathValue("id"), "state": "quarantined", "due_ms": now, "last_sync_ms": now - 90000, "owner": "", "fence": 17, "attempts": 5,
			"lease_left_ms": 0, "quarantined": true, "errors": []map[string]any{{"at_ms": now - 1000, "error": "exit status 3: cannot sync poison", "fence": 17}, {"at_ms": now - 3000, "error": "exit status 3: cannot sync poison", "fence": 16}}})
	})
	mux.HandleFunc("GET /api/v1/owners", func(w http.ResponseWriter, r *http.Request) {
		var d []map[string]any
		for i := 0; i < 3; i++ {
			d = append(d, map[string]any{"id": fmt.Sprintf("host-a:%d", 100+i), "host": "host-a", "pid": 100 + i, "version": "dev", "started_ms": now - 300000,
				"heartbeat_age_ms": 800 + i*100, "workers": 8, "in_flight": strings.Fields("cust-1 cust-2 cust-3 cust-4 cust-5 cust-6 cust-7 cust-8 cust-9"), "draining": i == 2})
		}
		js(w, map[string]any{"daemons": d})
	})
	mux.HandleFunc("POST /api/v1/items/requeue", func(w http.ResponseWriter, r *http.Request) { js(w, map[string]any{"requeued": 1, "unknown": []string{}}) })
	mux.Handle("/", Handler(Options{Version: "dev"}))
	ln, _ := net.Listen("tcp", addr)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	time.Sleep(120 * time.Second)
	srv.Close()
}
