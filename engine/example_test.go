package engine_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// A program with a sink of its own serves /metrics, /healthz and /readyz
// in one line: http.ListenAndServe(":9090", engine.Handler(e)).
func ExampleHandler() {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{}) // embedded; set Addrs for Redis
	if err != nil {
		panic(err)
	}
	defer st.Close()
	e, err := engine.New(st, sinks.Func(func(ctx context.Context, it sinks.Item) error { return nil }), engine.Config{})
	if err != nil {
		panic(err)
	}
	defer e.Stop(ctx)

	srv := httptest.NewServer(engine.Handler(e)) // http.ListenAndServe(addr, engine.Handler(e))
	defer srv.Close()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s %d %s", path, resp.StatusCode, body)
	}
	// Output:
	// /healthz 200 ok
	// /readyz 503 not ready: redis unreachable or not claiming yet
}
