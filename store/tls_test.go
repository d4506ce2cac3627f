package store_test

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// A TLS configuration pointed at a plaintext Redis is refused at once,
// saying so. Before, the handshake waited for the dial timeout five times
// over and failed after 25 s with "context deadline exceeded".
func TestTLSAgainstPlaintextRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	start := time.Now()
	_, err := store.Open(t.Context(), store.Config{Addrs: []string{srv.Addr()}, DialTimeout: 3 * time.Second,
		TLS: &tls.Config{ServerName: "redis.test", RootCAs: x509.NewCertPool()}})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "answers in plaintext") || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("Open = %v; want an error naming %s and saying it answers in plaintext", err, srv.Addr())
	}
	if took > 2*time.Second {
		t.Errorf("refused after %v; want at once", took)
	}
}
