package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/cmd/syncd/internal/web"
	"github.com/syncd/syncd/engine"
)

// cmdRun is the daemon. The first SIGTERM or SIGINT drains and hands
// claims back; a second one exits at once.
func cmdRun(args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("run", stderr)
	defer f.explain(&err)
	if err := f.parseNone(args); err != nil {
		return err
	}
	cfg, err := f.loadRunner()
	if err != nil {
		return err
	}
	log := newLogger(cfg, os.Stderr)
	logConfigWarnings(cfg, log)
	token, err := cfg.APIToken(nil, nil)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	// The store's files (password, TLS) too, before anything is served:
	// an outside trial saw a refused password file logged after
	// "serving /metrics...".
	if _, err := cfg.Store(nil, nil); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if err := checkSink(cfg); err != nil {
		return err
	}

	ctx, stop := stopOnSignal(log, "stopping: draining in-flight syncs, if any, and handing claims back (signal again to exit at once)")
	defer stop()

	// HTTP first: /healthz answers while Redis is still unreachable
	// (alive, not ready), /readyz says 503 until the engine claims,
	// /metrics has syncd_redis_up 0 and /api/ answers 503 meanwhile.
	ep := engine.NewEndpoints(version)
	apiH := &lateHandler{}
	if addr := cfg.Listen(); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return &exitError{code: exitUsage, err: cfg.At("http.listen", err)}
		}
		srv := serveHTTP(ln, cfg.AllowedHosts(), ep, apiH, log)
		defer func() {
			sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
			defer c()
			srv.Shutdown(sctx)
		}()
	}
	if token != "" && cfg.Listen() == "" {
		log.Warn().Msg("an API token is configured but http.listen is empty: the API is not served")
	}

	st, err := openStoreRetry(ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil {
			// Told to stop while it waited for Redis: a stop, not a
			// failure (nothing was claimed).
			log.Info().Err(err).Msg("stopped before redis was reached")
			return nil
		}
		return err
	}
	defer st.Close()
	e, done, err := tracedEngine(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	defer done()
	if cfg.Listen() != "" {
		hist := api.NewHistory(st, func() (int64, int64) { return e.Metrics().SyncsOK.Load(), e.Metrics().SyncsFailed.Load() })
		defer runHistory(ctx, hist)()
		apiH.set(api.New(st, token, log, hist, apiOptions(e.Config().Target)...))
		if token != "" {
			log.Info().Msg("serving the API under /api/v1: reads for anyone, actions (POST) with the bearer token")
		}
	}
	ep.Attach(e)
	return e.Run(ctx)
}

// serveHTTP serves ep's /metrics (Prometheus), /healthz (the process is
// alive) and /readyz (Redis reachable and claiming, every shard working),
// and api under /api/ (see package api), on ln for the hosts allowed
// (hostGuard), from before Redis is reached.
func serveHTTP(ln net.Listener, allowed []string, ep *engine.Endpoints, api http.Handler, log zerolog.Logger) *http.Server {
	mux := http.NewServeMux()
	ep.Register(mux) // GET /metrics, GET /healthz, GET /readyz
	mux.Handle("/api/", api)
	mux.Handle("/", web.Handler(web.Options{Version: version}))
	srv, capped := statusServer(ln, allowed, mux, log)
	refusedMetric(ep.Registry(), capped)
	go func() {
		if err := srv.Serve(capped); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Str("page", "http://"+ln.Addr().String()+"/").
		Msg("serving /metrics, /healthz, /readyz, the API under /api/v1 and the web page at /")
	return srv
}

// lateHandler is the API's handler, which exists once the store is
// open: until set, it answers 503 with an error in the API's JSON.
type lateHandler struct{ h atomic.Pointer[http.Handler] }

func (l *lateHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintln(w, `{"error":"starting: redis not reached yet"}`)
}
