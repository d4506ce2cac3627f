package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/tests/testutil"
)

const (
	// readyTimeout bounds how long a (re)started server may take to answer
	// PING with its dataset loaded.
	readyTimeout = 10 * time.Second
	// startTries is how many ports Start tries when another process takes
	// the chosen port before redis-server binds it; restartTries is how
	// often Restart retries the same port.
	startTries   = 5
	restartTries = 5
	// adminTimeout bounds one polling command (PING, INFO, CLUSTER NODES).
	adminTimeout = time.Second
	// pollInterval is the pause between polls while waiting on a server.
	pollInterval = 20 * time.Millisecond
	// tailLines is how much of a server's log a failure message shows.
	tailLines = 30
)

// missingServer is the failure message when redis-server is not installed.
const missingServer = "redis-server not found on PATH: install Debian's redis-server (make test does)"

// errAddrInUse marks a start that failed because the port was taken.
var errAddrInUse = errors.New("redistest: address already in use")

// Options configures one server. The zero value is a plain server without
// persistence (save "" and appendonly no).
type Options struct {
	// AOF turns on the append-only file (appendonly yes, appendfsync
	// everysec), so data written before a Kill survives a Restart.
	AOF bool
	// Password sets requirepass. Clients from Server.Client use it, and it
	// is also the masterauth a demoted master presents to its new master.
	Password string
	// Config holds extra redis.conf lines, such as
	// "maxmemory-policy allkeys-lru". They come last, so they override
	// the generated lines.
	Config []string
	// ReplicaOf starts the server as a replica of that server. Start
	// returns once the replication link is up.
	ReplicaOf *Server
	// Cluster enables cluster mode (cluster-enabled yes,
	// cluster-node-timeout 1000). StartCluster sets it; a cluster node's
	// port stays below 55000 so that its bus port (port+10000) is valid.
	Cluster bool
}

// Server is one redis-server (or sentinel) process on a loopback port,
// started by Start. It is killed and reaped in the test's cleanup. Its
// methods are safe for concurrent use.
type Server struct {
	bin      string
	args     []string // after bin: config file, and --sentinel for sentinels
	port     int
	dir      string
	logFile  string // redis's own log
	outFile  string // the process's stdout and stderr (config errors land here)
	password string
	cluster  bool
	sentinel bool

	mu     sync.Mutex
	proc   *testutil.Process // the current or last run; nil before the first launch
	paused bool
}

// Start starts a redis-server on a free loopback port with a data directory
// from t.TempDir, waits until it answers PING (and, for a replica, until
// its replication link is up), and registers a cleanup that kills it. A nil
// opt means the zero Options. Start fails the test with the server's log
// if the server does not come up.
func Start(t testing.TB, opt *Options) *Server {
	t.Helper()
	var o Options
	if opt != nil {
		o = *opt
	}
	return startServer(t, o)
}

// startServer is Start for any tb.
func startServer(t tb, o Options) *Server {
	t.Helper()
	s := start(t, o, nil)
	if o.ReplicaOf != nil {
		err := poll(readyTimeout, func() (bool, string) {
			m, err := info(s.Addr(), s.password, adminTimeout, "replication")
			if err != nil {
				return false, err.Error()
			}
			return m["master_link_status"] == "up", "master_link_status:" + m["master_link_status"]
		})
		if err != nil {
			t.Fatalf("redistest: replica %s of %s: %v\n%s", s.Addr(), o.ReplicaOf.Addr(), err, s.tail())
		}
	}
	return s
}

// start launches a server, retrying with a new port when another process
// took the chosen one. sentinelConf, when not nil, makes it a sentinel
// with those extra config lines.
func start(t tb, o Options, sentinelConf []string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(missingServer)
	}
	for attempt := 1; ; attempt++ {
		port, err := reservePort(o.Cluster)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		s := &Server{
			bin:      bin,
			port:     port,
			dir:      dir,
			logFile:  filepath.Join(dir, "redis.log"),
			outFile:  filepath.Join(dir, "stdout.log"),
			password: o.Password,
			cluster:  o.Cluster,
			sentinel: sentinelConf != nil,
		}
		conf := filepath.Join(dir, "redis.conf")
		s.args = []string{conf}
		if s.sentinel {
			s.args = append(s.args, "--sentinel")
		}
		if err := os.WriteFile(conf, []byte(s.config(o, sentinelConf)), 0o644); err != nil {
			releasePort(port, o.Cluster)
			t.Fatalf("redistest: write config: %v", err)
		}
		err = s.launch()
		if err == nil {
			t.Cleanup(func() {
				if err := s.stop(); err != nil {
					t.Error(err)
				}
				releasePort(s.port, s.cluster)
			})
			return s
		}
		releasePort(port, o.Cluster)
		if !errors.Is(err, errAddrInUse) || attempt == startTries {
			t.Fatalf("redistest: start %s: %v", s.Addr(), err)
		}
	}
}

// config renders the server's redis.conf.
func (s *Server) config(o Options, sentinelConf []string) string {
	var b strings.Builder
	line := func(args ...string) {
		for i, a := range args {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(quote(a))
		}
		b.WriteByte('\n')
	}
	line("port", strconv.Itoa(s.port))
	line("bind", "127.0.0.1")
	line("dir", s.dir)
	line("logfile", s.logFile)
	line("daemonize", "no")
	line("protected-mode", "no")
	if s.sentinel {
		for _, l := range sentinelConf {
			b.WriteString(l + "\n")
		}
		return b.String()
	}
	line("save", "")
	if o.AOF {
		line("appendonly", "yes")
		line("appendfsync", "everysec")
	} else {
		line("appendonly", "no")
	}
	// The default 5 s delay before a diskless full sync would make every
	// new replica wait for nothing.
	line("repl-diskless-sync-delay", "0")
	// Fault tests may want DEBUG SLEEP and friends.
	line("enable-debug-command", "local")
	if o.Password != "" {
		line("requirepass", o.Password)
	}
	masterAuth := o.Password
	if o.ReplicaOf != nil {
		line("replicaof", "127.0.0.1", strconv.Itoa(o.ReplicaOf.Port()))
		masterAuth = o.ReplicaOf.password
	}
	if masterAuth != "" {
		line("masterauth", masterAuth)
	}
	if o.Cluster {
		line("cluster-enabled", "yes")
		line("cluster-config-file", "nodes.conf")
		line("cluster-node-timeout", "1000")
	}
	for _, l := range o.Config {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// quote quotes a config value the way redis.conf parses it.
func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\r\n\"'\\") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

// launch starts the process and waits until it is ready. On failure the
// process is gone and the error carries the log tail.
func (s *Server) launch() error {
	p, err := s.spawn()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		if p.Exited() {
			return s.failed(fmt.Errorf("exited during startup (%v)", p.Err()))
		}
		if s.ready() {
			return nil
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("not ready after %v", readyTimeout)
			if stopErr := s.stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
			return s.failed(err)
		}
		select {
		case <-p.Done():
		case <-time.After(pollInterval):
		}
	}
}

// spawn starts the process, in a group of its own so that signals reach
// the server together with its fork()ed children, and dying with the test
// binary even if cleanup never runs (panic, go test -timeout).
func (s *Server) spawn() (*testutil.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.Exited() {
		return nil, fmt.Errorf("redistest: %s is already running", s.Addr())
	}
	out, err := os.OpenFile(s.outFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child holds its own copy
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	// An *os.File, unlike a buffer, needs no copying goroutine, and
	// cmd.Wait does not hang on a forked grandchild holding a pipe.
	cmd.Stdout, cmd.Stderr = out, out
	p, err := testutil.Spawn(cmd)
	if err != nil {
		return nil, fmt.Errorf("redistest: exec %s: %w", s.bin, err)
	}
	s.proc = p
	s.paused = false
	return p, nil
}

// ready reports whether the server answers PING and has loaded its data.
func (s *Server) ready() bool {
	pong, err := doString(s.Addr(), s.password, adminTimeout, "PING")
	if err != nil || pong != "PONG" {
		return false
	}
	if s.sentinel {
		return true
	}
	m, err := info(s.Addr(), s.password, adminTimeout, "persistence")
	return err == nil && m["loading"] == "0"
}

// failed decorates a start failure with the server's output, marking a
// port clash with errAddrInUse.
func (s *Server) failed(err error) error {
	out, _ := os.ReadFile(s.outFile)
	log := s.LogTail(tailLines)
	if strings.Contains(log, "Address already in use") || strings.Contains(string(out), "Address already in use") {
		err = fmt.Errorf("%w: %w", errAddrInUse, err)
	}
	return fmt.Errorf("%w\n--- %s (last %d lines)\n%s--- %s\n%s", err, s.logFile, tailLines, log, s.outFile, out)
}

// tail is the log tail for failure messages.
func (s *Server) tail() string {
	return fmt.Sprintf("--- %s (last %d lines)\n%s", s.logFile, tailLines, s.LogTail(tailLines))
}

// stop kills the current process, if any, and reaps it.
func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.Exited() {
		s.paused = false
		return nil
	}
	// Kill signals the whole group: redis may have forked a child for a
	// replication sync or an AOF rewrite.
	if err := p.Kill(); err != nil {
		return fmt.Errorf("redistest: %s: %w", s.Addr(), err)
	}
	s.paused = false
	return nil
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Pid returns the process id of the server's current or last run, for
// reading its CPU time from /proc/<pid>/stat.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// Port returns the server's port. It stays the same across Restart.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data directory, which also holds its
// redis.conf, its log and, with AOF, its append-only files. It stays the
// same across Restart.
func (s *Server) Dir() string { return s.dir }

// Client returns a client for the server, using Options.Password. It is
// closed in t's cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.password})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NamesScriptCommand reports whether the server names the command in
// its refusal of a command a script calls without the grant, as Redis
// 7.2 and later do ("ACL failure in script: User u has no permissions
// to run the 'del' command"); Redis 7.0 names none ("The user executing
// the script can't run this command or subcommand").
func (s *Server) NamesScriptCommand(t testing.TB) bool {
	t.Helper()
	info, err := s.Client(t).Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return !strings.Contains(info, "redis_version:7.0.") && !strings.Contains(info, "redis_version:6.")
}

// Kill sends SIGKILL to the server and waits until it has exited. Killing
// a server that is not running does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// Pause stops the server with SIGSTOP and waits until the kernel reports
// it stopped. Connections stay open and new ones are accepted by the
// kernel, but nothing is answered until Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.signal(true); err != nil {
		t.Fatal(err)
	}
}

// Resume continues a paused server with SIGCONT and waits until the kernel
// reports it running.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.signal(false); err != nil {
		t.Fatal(err)
	}
}

// signal pauses (stop) or resumes the server's process group.
func (s *Server) signal(stop bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.Exited() {
		return fmt.Errorf("redistest: %s: not running", s.Addr())
	}
	var err error
	if stop {
		err = p.Pause()
	} else {
		err = p.Resume()
	}
	if err != nil {
		return fmt.Errorf("redistest: %s: %w", s.Addr(), err)
	}
	s.paused = stop
	return nil
}

// Restart starts the server again on the same port and data directory,
// killing it first if it is running, and waits until it answers PING with
// its data loaded. With Options.AOF, acknowledged writes survive. It
// keeps the generated redis.conf, including any CONFIG REWRITE made by
// a sentinel or CONFIG SET.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	var err error
	for attempt := 1; attempt <= restartTries; attempt++ {
		// The port is reserved in this process, but another process may
		// have taken it while the server was down; it may free it again.
		if err = s.launch(); err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("redistest: restart %s: %v", s.Addr(), err)
	}
}

// Running reports whether the server process is alive (possibly paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.Exited()
}

// answering reports whether the server is alive and not paused.
func (s *Server) answering() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.Exited() && !s.paused
}

// LogTail returns the last n lines of the server's log file, or "" if it
// has none yet. The log spans every run of the server.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.logFile)
	if err != nil || n <= 0 {
		return ""
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// poll calls cond every pollInterval until it reports true or timeout
// passes; the error then carries cond's last description of the state.
func poll(timeout time.Duration, cond func() (ok bool, state string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v; last state: %s", timeout, state)
		}
		time.Sleep(pollInterval)
	}
}
