package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/cmd/syncd/internal/web"
)

// uiListenDefault is where syncd ui serves unless --listen says: the
// loopback interface only, since reads need no token.
const uiListenDefault = "127.0.0.1:8089"

// cmdUI serves the operator page at / and the JSON API under /api/ over
// the configured store, with no engine: for operators who want the page
// without running a daemon. It runs until SIGINT or SIGTERM.
func cmdUI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("ui", stderr)
	listen := f.fs.String("listen", uiListenDefault, "address to serve the page and the API on (host:port)")
	if err := f.parseNone(args); err != nil {
		return err
	}
	cfg, err := f.load()
	if err != nil {
		return err
	}
	log := newLogger(cfg, os.Stderr)
	logConfigWarnings(cfg, log)
	token, err := cfg.APIToken(nil, nil)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Without a token the page only reads: it writes nothing to Redis,
	// as status does (openReadStore). With one it adds and removes
	// items, and creates the deployment as items add does.
	open := openStore
	if token == "" {
		open = openReadStore
	}
	st, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	warnEmbedded(st, stderr)
	if !st.Deployed() {
		log.Warn().Str("redis", st.Addr()).Str("key_prefix", st.Keys().Prefix()).
			Msg("no deployment in redis under this key prefix yet: the page shows nothing until syncd run or syncd items add creates it (check redis.addrs, redis.db and redis.key_prefix)")
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return usageErr("--listen: %w", err)
	}
	// The history sampler gives the backlog chart its points; with no
	// engine here, there are no syncs to count.
	hist := api.NewHistory(st, nil)
	defer runHistory(ctx, hist)()
	mux := http.NewServeMux()
	mux.Handle("/api/", api.New(st, token, log, hist, apiOptions(cfg.Engine().Target)...))
	mux.Handle("/", web.Handler(web.Options{Version: version}))
	srv, capped := statusServer(ln, cfg.AllowedHosts(), mux, log)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(capped) }()
	url := "http://" + ln.Addr().String() + "/"
	log.Info().Str("addr", ln.Addr().String()).Bool("writable", token != "").Msg("serving the page at / and the API at /api/v1")
	fmt.Fprintf(stdout, "syncd ui: open %s (Ctrl-C stops)\n", url)
	if token == "" {
		fmt.Fprintln(stdout, "syncd ui: no API token configured (http.api_token_env or http.api_token_file): the page is read-only")
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
