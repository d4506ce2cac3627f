package topology

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

// testPKI is a CA with a server and a client certificate, as PEM files.
type testPKI struct {
	dir                           string
	caFile, certFile, keyFile     string // server
	clientCertFile, clientKeyFile string
	roots                         *x509.CertPool
	client                        tls.Certificate
	otherRoots                    *x509.CertPool // a CA that signed nothing here
	serverName                    string
	caCert                        *x509.Certificate
	caKey                         *ecdsa.PrivateKey
	writePEM                      func(name, typ string, der []byte) string
}

// newPKI generates a CA, a server certificate for 127.0.0.1 and the name
// redis.test, and a client certificate, all signed by the CA.
func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: testutil.PrivateDir(t), serverName: "redis.test"}
	p.writePEM = func(name, typ string, der []byte) string {
		path := filepath.Join(p.dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var err error
	p.caCert, p.caKey, err = newCA("syncd test CA")
	if err != nil {
		t.Fatal(err)
	}
	p.caFile = p.writePEM("ca.pem", "CERTIFICATE", p.caCert.Raw)
	p.roots = x509.NewCertPool()
	p.roots.AddCert(p.caCert)
	other, _, err := newCA("unrelated CA")
	if err != nil {
		t.Fatal(err)
	}
	p.otherRoots = x509.NewCertPool()
	p.otherRoots.AddCert(other)

	leaf := func(name string, cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (string, string, tls.Certificate) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile := p.writePEM(name+".pem", "CERTIFICATE", der)
		keyFile := p.writePEM(name+"-key.pem", "EC PRIVATE KEY", kder)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return certFile, keyFile, pair
	}
	p.certFile, p.keyFile, _ = leaf("server", "redis", x509.ExtKeyUsageServerAuth, []string{p.serverName}, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.clientCertFile, p.clientKeyFile, p.client = leaf("client", "syncd", x509.ExtKeyUsageClientAuth, nil, nil)
	return p
}

func newCA(cn string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// tlsConfig is what a syncd deployment would configure.
func (p *testPKI) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.roots, ServerName: p.serverName, Certificates: []tls.Certificate{p.client}}
}

// startTLSRedis starts a redis-server that listens only with TLS (port 0,
// tls-port) and requires client certificates. redistest cannot start it:
// it checks readiness over plaintext. It returns the address; the server
// is killed in t's cleanup.
func startTLSRedis(t *testing.T, p *testPKI) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found on PATH: install Debian's redis-server (make test does)")
	}
attempts:
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		dir := t.TempDir()
		conf := strings.Join([]string{
			"port 0",
			"tls-port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"dir " + dir,
			"logfile " + filepath.Join(dir, "redis.log"),
			`save ""`,
			"appendonly no",
			"tls-cert-file " + p.certFile,
			"tls-key-file " + p.keyFile,
			"tls-ca-cert-file " + p.caFile,
			"tls-auth-clients yes",
		}, "\n") + "\n"
		confFile := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		proc := testutil.Start(t, exec.Command(bin, confFile))
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		deadline := time.Now().Add(10 * time.Second)
		for {
			select {
			case <-proc.Done():
				log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
				if strings.Contains(string(log), "Address already in use") && attempt < 5 {
					continue attempts // another process took the port
				}
				t.Fatalf("redis-server with TLS exited:\n%s", log)
			default:
			}
			if tlsPing(addr, p) == nil {
				return addr
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
				t.Fatalf("redis-server with TLS not ready on %s after 10s:\n%s", addr, log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// tlsPing sends PING over TLS with a fresh connection, so no go-redis
// pool is left behind while the server starts.
func tlsPing(addr string, p *testPKI) error {
	d := &net.Dialer{Timeout: time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, p.tlsConfig())
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 7)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", buf[:n])
	}
	return nil
}

// syncd over TLS: every operation works with the CA, server name and a
// client certificate; plaintext, an unknown CA, a wrong server name and
// a missing client certificate are refused; skipping verification is
// refused by the configuration before anything is dialled.
func TestTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	addr := startTLSRedis(t, p)
	ctx := t.Context()

	t.Run("every operation over TLS", func(t *testing.T) {
		t.Parallel()
		cfg := store.Config{Addrs: []string{addr}, TLS: p.tlsConfig(), KeyPrefix: "tls", Shards: 4}
		if err := exercise(ctx, cfg, exerciseOpts{}); err != nil {
			t.Fatal(err)
		}
	})

	refused := []struct {
		name string
		tls  func() *tls.Config
		want string // in the error
	}{
		{"plaintext", func() *tls.Config { return nil }, ""},
		{"unknown CA", func() *tls.Config { c := p.tlsConfig(); c.RootCAs = p.otherRoots; return c }, "certificate signed by unknown authority"},
		{"wrong server name", func() *tls.Config { c := p.tlsConfig(); c.ServerName = "other.test"; return c }, "other.test"},
		{"no client certificate", func() *tls.Config { c := p.tlsConfig(); c.Certificates = nil; return c }, ""},
	}
	for _, tt := range refused {
		t.Run(tt.name+" refused", func(t *testing.T) {
			t.Parallel()
			cfg := store.Config{Addrs: []string{addr}, TLS: tt.tls(), KeyPrefix: "tls", DialTimeout: time.Second, ReadTimeout: time.Second}
			start := time.Now()
			st, err := store.Open(ctx, cfg)
			if err == nil {
				st.Close()
				t.Fatal("store.Open succeeded")
			}
			if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %s and %q", err, addr, tt.want)
			}
			t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}

	t.Run("InsecureSkipVerify refused", func(t *testing.T) {
		t.Parallel()
		c := p.tlsConfig()
		c.InsecureSkipVerify = true
		cfg := store.Config{Addrs: []string{addr}, TLS: c}
		var ce *store.ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != "tls" {
			t.Errorf("Validate with InsecureSkipVerify = %v, want a ConfigError on tls", err)
		}
		if st, err := store.Open(ctx, cfg); !errors.As(err, &ce) {
			if st != nil {
				st.Close()
			}
			t.Errorf("Open with InsecureSkipVerify = %v, want a ConfigError", err)
		}
	})

	t.Run("binary", func(t *testing.T) {
		t.Parallel()
		base := fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: tlsbin
  shards: 4
  tls:
    enabled: true
    ca_file: %s
    cert_file: %s
    key_file: %s
    server_name: %s
`, addr, p.caFile, p.clientCertFile, p.clientKeyFile, p.serverName)
		cfg := testutil.WriteFile(t, "config.yaml", base)
		if r := runSyncd(t, nil, "items", "add", "-c", cfg, "a", "b"); r.Code != 0 {
			t.Fatalf("items add over TLS:\n%s", r)
		}
		if r := runSyncd(t, nil, "status", "-c", cfg); r.Code != 0 || !strings.Contains(r.Stdout, "2 items") {
			t.Errorf("status over TLS:\n%s", r)
		}
		insecure := testutil.WriteFile(t, "config.yaml", base+"    insecure_skip_verify: true\n")
		r := runSyncd(t, nil, "validate", "-c", insecure)
		if r.Code != 2 || !strings.Contains(r.Stderr, "insecure_skip_verify") {
			t.Errorf("validate with insecure_skip_verify: true:\n%s", r)
		}
		t.Logf("validate with insecure_skip_verify: %s", strings.TrimSpace(r.Stderr))
	})

	// A plaintext client on the TLS port gets its connection reset (or
	// closed) by the server, quickly.
	t.Run("plaintext go-redis client", func(t *testing.T) {
		t.Parallel()
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		defer c.Close()
		start := time.Now()
		err := c.Ping(context.Background()).Err()
		if err == nil {
			t.Fatal("plaintext PING answered on the TLS port")
		}
		t.Logf("plaintext PING: %v after %v", err, time.Since(start).Round(time.Millisecond))
	})
}
