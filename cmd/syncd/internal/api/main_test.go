package api

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore opens a store on a fresh redis-server.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	srv := redistest.Start(t, nil)
	st, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "api", Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

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

// apiServer serves New over st under /api/, as serveHTTP mounts it,
// logging into the returned buffer.
func apiServer(t *testing.T, st *store.Store, token string, opts ...Option) (*httptest.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := zerolog.New(io.MultiWriter(logs, zerolog.NewTestWriter(t)))
	mux := http.NewServeMux()
	mux.Handle("/api/", New(st, token, log, nil, opts...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, logs
}

// setDue sets id's due time to now + offset, or quarantines it (inf).
func setDue(t *testing.T, st *store.Store, id string, offset time.Duration, inf bool) {
	t.Helper()
	now, err := st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	z := redis.Z{Score: float64(now + offset.Milliseconds()), Member: id}
	if inf {
		z.Score = math.Inf(1)
	}
	st.Client().ZAdd(t.Context(), st.Keys().Due(st.Keys().Shard(id)), z)
}
