package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The helpers below talk RESP2 over a fresh connection per command. They
// are used for readiness and topology polling, where a go-redis client
// would leave pools and background dial goroutines behind each poll of a
// server that is still starting, killed or paused.

// replyError is an error reply from the server, such as "LOADING ...".
type replyError string

func (e replyError) Error() string { return string(e) }

// do sends one command to addr (after AUTH when password is set) and
// returns its reply: string, int64, nil or []any. The whole exchange
// must finish within timeout.
func do(addr, password string, timeout time.Duration, args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	if password != "" {
		if _, err := roundTrip(rw, "AUTH", password); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	return roundTrip(rw, args...)
}

// doString is do for commands whose reply is a status or bulk string.
func doString(addr, password string, timeout time.Duration, args ...string) (string, error) {
	v, err := do(addr, password, timeout, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: unexpected reply %#v", args[0], v)
	}
	return s, nil
}

// info returns one INFO section as a field map.
func info(addr, password string, timeout time.Duration, section string) (map[string]string, error) {
	return fields(doString(addr, password, timeout, "INFO", section))
}

// clusterInfo returns CLUSTER INFO as a field map.
func clusterInfo(addr, password string, timeout time.Duration) (map[string]string, error) {
	return fields(doString(addr, password, timeout, "CLUSTER", "INFO"))
}

// fields parses "key:value" lines, as INFO and CLUSTER INFO reply.
func fields(s string, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

func roundTrip(rw *bufio.ReadWriter, args ...string) (any, error) {
	fmt.Fprintf(rw, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(rw, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := rw.Flush(); err != nil {
		return nil, err
	}
	return readReply(rw.Reader)
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, replyError(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				if _, isReply := err.(replyError); !isReply {
					return nil, err
				}
				out[i] = err
			}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unexpected reply %q", line)
	}
}

// pairs turns a flat [k1 v1 k2 v2 ...] reply (SENTINEL MASTER) into a map.
func pairs(v any) map[string]string {
	a, _ := v.([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		val, _ := a[i+1].(string)
		m[k] = val
	}
	return m
}
