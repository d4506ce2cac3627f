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
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/cmd/syncd/internal/web"
	"github.com/syncd/syncd/engine"
)

// cmdRun is the daemon. The first SIGTERM or SIGINT drains and hands
// claims back; a second one exits at once.
func cmdRun(args []string, stdout, stderr io.Writer) error {
	f := newFlags("run", stderr)
	if _, err := f.parse(args); err != nil {
		return err
	}
	cfg, err := f.load()
	if err != nil {
		return err
	}
	log := newLogger(cfg, os.Stderr)
	token, err := cfg.APIToken(nil, nil)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		s := <-sigs
		log.Info().Str("signal", s.String()).Msg("stopping: draining in-flight syncs and handing claims back (signal again to exit at once)")
		cancel()
		s = <-sigs
		log.Warn().Str("signal", s.String()).Msg("second signal: exiting at once; claims expire after their ttl")
		os.Exit(exitFailed)
	}()

	st, err := openStoreRetry(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	e, sink, err := buildEngine(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	defer sink.Close()
	if addr := cfg.Listen(); addr != "" {
		hist := api.NewHistory(st, func() (int64, int64) { return e.Metrics().SyncsOK.Load(), e.Metrics().SyncsFailed.Load() })
		hctx, hstop := context.WithCancel(ctx)
		hdone := make(chan struct{})
		go func() { defer close(hdone); hist.Run(hctx) }()
		defer func() { hstop(); <-hdone }()
		var opts []api.Option
		if tc := e.Config().Target; !tc.Breaker.Disabled || tc.MaxInFlight > 0 || tc.Rate != (engine.Rate{}) {
			opts = append(opts, api.WithTarget(tc.MaxInFlight))
		}
		srv, err := serveHTTP(addr, e, api.New(st, token, log, hist, opts...), log)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		if token != "" {
			log.Info().Msg("serving the API under /api/v1: reads for anyone, actions (POST) with the bearer token")
		}
		defer func() {
			sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
			defer c()
			srv.Shutdown(sctx)
		}()
	}
	if token != "" && cfg.Listen() == "" {
		log.Warn().Msg("an API token is configured but http.listen is empty: the API is not served")
	}
	return e.Run(ctx)
}

// serveHTTP serves /metrics (Prometheus), /healthz (the process is alive)
// and /readyz (Redis reachable and claiming, every shard working), and
// api under /api/ (see package api).
func serveHTTP(addr string, e *engine.Engine, api http.Handler, log zerolog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		e.Metrics().WritePrometheus(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		code, text := readyz(e.Ready(), e.Damaged())
		if code != http.StatusOK {
			http.Error(w, text, code)
			return
		}
		fmt.Fprintln(w, text)
	})
	mux.Handle("/api/", api)
	mux.Handle("/", web.Handler(web.Options{Version: version}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: stdLogger(log)}
	go func() {
		if err := srv.Serve(&capListener{Listener: ln, max: maxConns}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz and /readyz")
	return srv, nil
}

// readyz is the answer to /readyz: 200 "ready" while the engine claims
// and every shard works; 503 while Redis is unreachable or the engine is
// not claiming yet, and 503 "degraded", naming each damaged shard and
// its error, while a shard's damaged key keeps its items waiting (every
// other shard syncs on).
func readyz(ready bool, damaged []error) (int, string) {
	if !ready {
		return http.StatusServiceUnavailable, "not ready: redis unreachable or not claiming yet"
	}
	if len(damaged) == 0 {
		return http.StatusOK, "ready"
	}
	lines := make([]string, len(damaged))
	for i, err := range damaged {
		lines[i] = "degraded: " + shown(err.Error(), 500)
	}
	return http.StatusServiceUnavailable, strings.Join(lines, "\n")
}
