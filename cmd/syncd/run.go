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

	"github.com/rs/zerolog"

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
		srv, err := serveHTTP(addr, e, log)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		defer func() {
			sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
			defer c()
			srv.Shutdown(sctx)
		}()
	}
	return e.Run(ctx)
}

// serveHTTP serves /metrics (Prometheus), /healthz (the process is alive)
// and /readyz (Redis reachable and claiming).
func serveHTTP(addr string, e *engine.Engine, log zerolog.Logger) (*http.Server, error) {
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
		if !e.Ready() {
			http.Error(w, "not ready: redis unreachable or not claiming yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
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
