package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// Server is a redis-server this program started on a free loopback port,
// without persistence. It is Linux-only: its CPU time is read from /proc.
type Server struct {
	addr  string
	dir   string
	cmd   *exec.Cmd
	done  chan struct{}
	admin *redis.Client
}

// StartServer starts redis-server on a free loopback port and waits until
// it answers PING. The server dies with this process (PDEATHSIG), so an
// interrupted run leaves nothing behind.
func StartServer(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("bench: redis-server not found on PATH (make deps installs it)")
	}
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s, err := launch(ctx, bin, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// FreePort asks the kernel for an unused loopback port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func launch(ctx context.Context, bin string, port int) (*Server, error) {
	dir, err := os.MkdirTemp("", "benchall-redis-")
	if err != nil {
		return nil, err
	}
	conf := strings.Join([]string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"protected-mode no",
		"daemonize no",
		"dir " + dir,
		"logfile " + filepath.Join(dir, "redis.log"),
		`save ""`,
		"appendonly no",
		"maxmemory-policy noeviction",
	}, "\n") + "\n"
	confPath := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, confPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: start redis-server: %w", err)
	}
	s := &Server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	s.admin = redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 2})
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			s.Close()
			return nil, fmt.Errorf("bench: redis-server on port %d exited: %s", port, tail(string(log), 5))
		default:
		}
		if err := s.admin.Ping(ctx).Err(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("bench: redis-server on port %d did not answer: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Addr is host:port.
func (s *Server) Addr() string { return s.addr }

// StoreConfig is how a store reaches the server.
func (s *Server) StoreConfig() store.Config { return store.Config{Addrs: []string{s.addr}} }

// Port is the server's port.
func (s *Server) Port() string { _, p, _ := net.SplitHostPort(s.addr); return p }

// Close kills the server and removes its directory.
func (s *Server) Close() error {
	s.admin.Close()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	return os.RemoveAll(s.dir)
}

// Info returns one INFO section as a map.
func (s *Server) Info(ctx context.Context, section string) (map[string]string, error) {
	return redisInfo(ctx, s.admin, section)
}

// redisInfo returns one INFO section of rdb's server as a map.
func redisInfo(ctx context.Context, rdb *redis.Client, section string) (map[string]string, error) {
	text, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("bench: INFO %s: %w", section, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// UsedMemory is INFO memory used_memory, in bytes.
func (s *Server) UsedMemory(ctx context.Context) (int64, error) {
	m, err := s.Info(ctx, "memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(m["used_memory"], 10, 64)
}

// CmdStat is one line of INFO commandstats.
type CmdStat struct {
	Calls int64
	Usec  int64
}

// CommandStats returns INFO commandstats by command name. Commands that
// scripts run are counted too (and their time is also inside the
// EVALSHA's usec).
func (s *Server) CommandStats(ctx context.Context) (map[string]CmdStat, error) {
	return commandStats(ctx, s.admin)
}

// commandStats is INFO commandstats of rdb's server by command name.
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]CmdStat, error) {
	m, err := redisInfo(ctx, rdb, "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]CmdStat{}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var st CmdStat
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			switch fk {
			case "calls":
				st.Calls, _ = strconv.ParseInt(fv, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(fv, 10, 64)
			}
		}
		out[name] = st
	}
	return out, nil
}

// ResetStats is CONFIG RESETSTAT.
func (s *Server) ResetStats(ctx context.Context) error {
	return s.admin.ConfigResetStat(ctx).Err()
}

// FlushAll empties the server, synchronously.
func (s *Server) FlushAll(ctx context.Context) error {
	return s.admin.Do(ctx, "flushall", "sync").Err()
}

// Client returns the admin client (pool of 2).
func (s *Server) Client() *redis.Client { return s.admin }

// CPU returns the server's user+system CPU time so far, from /proc. The
// kernel counts in clock ticks (100 Hz on Linux), so it is exact to 10ms.
func (s *Server) CPU() time.Duration { return procCPU(s.cmd.Process.Pid) }

// CPUs is CPU as a list of one, for measurement windows.
func (s *Server) CPUs() []time.Duration { return []time.Duration{s.CPU()} }

func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may contain spaces; fields restart after ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostCPU is the machine's CPU time from /proc/stat: busy (user, nice,
// system, irq, softirq), idle (idle, iowait) and steal (taken by the
// hypervisor for other guests). Inside a container these are the whole
// VM's, so they show load from other processes too.
type hostCPU struct{ busy, idle, steal time.Duration }

func readHostCPU() hostCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return hostCPU{}
	}
	v := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * 10 * time.Millisecond
	}
	return hostCPU{busy: v(1) + v(2) + v(3) + v(6) + v(7), idle: v(4) + v(5), steal: v(8)}
}
