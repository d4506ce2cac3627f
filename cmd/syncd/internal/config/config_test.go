package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
	filesink "github.com/syncd/syncd/sinks/file"
	httpsink "github.com/syncd/syncd/sinks/http"
	logsink "github.com/syncd/syncd/sinks/log"
	"github.com/syncd/syncd/store"
)

// errLines returns the lines of err's text, nil for a nil error.
func errLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func mustParse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return f
}

// yamlText turns a test's YAML written with tabs for readability into
// YAML, where indentation must be spaces.
func yamlText(s string) string {
	return strings.ReplaceAll(strings.TrimPrefix(s, "\n"), "\t", "  ")
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		// Unknown keys, at every level.
		{"unknown top-level key", `
redz: {}
`, []string{"c.yaml:1: redz: unknown key (did you mean redis?)"}},
		{"unknown redis key", `
redis:
	shardz: 3
`, []string{"c.yaml:2: redis.shardz: unknown key (did you mean shards?)"}},
		{"unknown redis.tls key", `
redis:
	tls:
		enabled: true
		ca: x
`, []string{"c.yaml:4: redis.tls.ca: unknown key"}},
		{"unknown ownership key", `
ownership:
	lease: 3s
`, []string{"c.yaml:2: ownership.lease: unknown key"}},
		{"unknown engine key", `
engine:
	worker: 3
`, []string{"c.yaml:2: engine.worker: unknown key (did you mean workers?)"}},
		{"unknown items key", `
items:
	id: [a]
`, []string{"c.yaml:2: items.id: unknown key (did you mean ids?)"}},
		{"unknown sink key", `
sink:
	kind: log
`, []string{"c.yaml:2: sink.kind: unknown key"}},
		{"unknown sink.exec key", `
sink:
	type: exec
	exec:
		command: [sh]
		args: [x]
`, []string{"c.yaml:5: sink.exec.args: unknown key"}},
		{"unknown sink.http key", `
sink:
	type: http
	http:
		url: http://x
		method: PUT
`, []string{"c.yaml:5: sink.http.method: unknown key"}},
		{"unknown sink.file key", `
sink:
	type: file
	file:
		path: /tmp/x
		mode: 0644
`, []string{"c.yaml:5: sink.file.mode: unknown key"}},
		{"unknown sink.log key", `
sink:
	log:
		delay: 1s
		fail: 3
`, []string{"c.yaml:4: sink.log.fail: unknown key"}},
		{"unknown http key", `
http:
	addr: ":9090"
`, []string{"c.yaml:2: http.addr: unknown key"}},
		{"unknown log key", `
log:
	lvl: debug
`, []string{"c.yaml:2: log.lvl: unknown key (did you mean level?)"}},

		// Durations.
		{"bad durations", `
redis:
	dial_timeout: true
ownership:
	ttl: 3x
engine:
	interval: 10
	poll: ""
`, []string{
			`c.yaml:2: redis.dial_timeout: "true" is not a duration (examples: 30s, 500ms, 2m)`,
			`c.yaml:4: ownership.ttl: "3x" is not a duration (examples: 30s, 500ms, 2m)`,
			`c.yaml:6: engine.interval: "10" is not a duration (examples: 30s, 500ms, 2m)`,
			`c.yaml:7: engine.poll: "" is not a duration (examples: 30s, 500ms, 2m)`,
		}},

		// Types.
		{"wrong types", `
redis:
	addrs: localhost:6379
	master_name: [a, b]
	cluster: "true"
	db: 1.5
	shards: "16"
	tls: on
ownership:
	ttl: {s: 1}
items:
	ids:
		- a
		- {b: c}
		-
sink:
	http: [x]
log: info
`, []string{
			"c.yaml:2: redis.addrs: expected a list of strings, got a string",
			"c.yaml:3: redis.master_name: expected a string, got a list",
			`c.yaml:4: redis.cluster: expected true or false, got "true"`,
			`c.yaml:5: redis.db: expected a whole number, got "1.5"`,
			`c.yaml:6: redis.shards: expected a whole number, got "16"`,
			"c.yaml:7: redis.tls: expected a section (a mapping of keys), got a string",
			"c.yaml:9: ownership.ttl: expected a duration such as 30s, got a mapping",
			"c.yaml:13: items.ids[1]: expected a string, got a mapping",
			"c.yaml:14: items.ids[2]: expected a string, got nothing",
			"c.yaml:16: sink.http: expected a section (a mapping of keys), got a list",
			"c.yaml:17: log: expected a section (a mapping of keys), got a string",
		}},
		{"top level not a mapping", `
- redis
`, []string{"c.yaml:1: the top level must be a mapping of sections (redis:, engine:, ...), got a list"}},
		{"duplicate keys", `
redis:
	db: 1
	db: 2
sink:
	http:
		headers:
			X-A: 1
			X-A: 2
`, []string{
			"c.yaml:3: redis.db: duplicate key (first at line 2)",
			"c.yaml:5: sink.http: set, but sink.type is left out: the default sink, log, runs and ignores it; add sink.type: http",
			"c.yaml:8: sink.http.headers.X-A: duplicate key (first at line 7)",
		}},
		{"merge key", `
base: &b
	db: 1
redis:
	<<: *b
`, []string{
			"c.yaml:1: base: unknown key",
			"c.yaml:4: redis.<<: merge keys are not supported",
		}},

		// YAML itself.
		{"malformed", `
redis:
	addrs: [a
`, []string{"c.yaml:2: malformed YAML: did not find expected ',' or ']'"}},
		{"two documents", `
redis: {}
---
engine: {}
`, []string{"c.yaml:2: a second YAML document: the file must hold one"}},

		// Values, checked by the libraries.
		{"store values", `
redis:
	addrs: ["a", "b:1", ":2"]
	cluster: true
	master_name: mymaster
	db: 3
	shards: 2000
	key_prefix: "my{prefix}"
	read_timeout: -1s
	write_timeout: -1s
	pool_size: -3
`, []string{
			`c.yaml:2: redis.addrs[0]: "a" is not host:port`,
			`c.yaml:2: redis.addrs[2]: ":2" is not host:port`,
			"c.yaml:4: redis.master_name: cannot be combined with cluster",
			"c.yaml:5: redis.db: a Cluster has only database 0",
			"c.yaml:6: redis.shards: 2000 is outside 1..1024",
			`c.yaml:7: redis.key_prefix: "my{prefix}" must not contain braces, glob characters or spaces`,
			"c.yaml:8: redis.read_timeout: must not be negative",
			"c.yaml:9: redis.write_timeout: must not be negative",
			"c.yaml:10: redis.pool_size: must not be negative",
		}},
		{"cluster without addresses", `
redis:
	cluster: true
`, []string{"c.yaml:2: redis.addrs: cluster and master_name need addresses"}},
		{"tls insecure refused", `
redis:
	addrs: ["r:6379"]
	tls:
		enabled: true
		insecure_skip_verify: true
`, []string{"c.yaml:5: redis.tls.insecure_skip_verify: skipping certificate verification is not supported"}},
		{"tls insecure refused even when off", `
redis:
	tls:
		insecure_skip_verify: True
`, []string{"c.yaml:3: redis.tls.insecure_skip_verify: skipping certificate verification is not supported"}},
		{"tls keys need enabled", `
redis:
	tls:
		ca_file: ca.pem
		server_name: r
`, []string{
			"c.yaml:3: redis.tls.ca_file: set but redis.tls.enabled is false",
			"c.yaml:4: redis.tls.server_name: set but redis.tls.enabled is false",
		}},
		{"tls cert without key", `
redis:
	tls:
		enabled: true
		cert_file: c.pem
`, []string{"c.yaml:4: redis.tls.key_file: required with redis.tls.cert_file"}},
		{"two password sources", `
redis:
	addrs: ["r:6379"]
	password_env: PW
	password_file: /run/pw
	sentinel_password_env: SPW
`, []string{
			"c.yaml:4: redis.password_file: only one of redis.password_env and redis.password_file may be set",
			"c.yaml:5: redis.sentinel_password_env: set but redis.master_name is empty: there are no Sentinels",
		}},
		{"ownership values", `
ownership:
	heartbeat: 1m
	settle: 40s
	replica_timeout: -1s
	min_replicas: 1
	owner: a/b
`, []string{
			"c.yaml:2: ownership.heartbeat: 1m0s must be positive and below ttl - margin (26.998s)",
			"c.yaml:3: ownership.settle: 40s must not be negative and must be below ttl - margin (26.998s)",
			"c.yaml:4: ownership.replica_timeout: -1s must be positive and below ttl - margin (26.998s)",
			"c.yaml:5: ownership.min_replicas: needs redis.addrs: the embedded store has no replicas",
			`c.yaml:6: ownership.owner: host and run must not contain '/' or control characters`,
		}},
		{"ownership ttl stops the timing checks", `
ownership:
	ttl: 5ms
	heartbeat: 1m
`, []string{"c.yaml:2: ownership.ttl: 5ms is below 10ms"}},
		{"ownership cross-field rule with default ttl", `
ownership:
	margin: 20s
`, []string{"c.yaml:2: ownership.margin: 20s must be positive and below ttl/2 (15s)"}},
		{"engine values", `
engine:
	workers: -1
	batch: 5000
	max_attempts: -2
	interval: 1us
	backoff_min: 2m
	backoff_max: 1m
	drain_timeout: -1s
	poll: 10us
`, []string{
			"c.yaml:2: engine.workers: -1 is outside 1..10000",
			"c.yaml:3: engine.batch: 5000 is outside 1..1000",
			"c.yaml:4: engine.max_attempts: -2 is below 1",
			"c.yaml:5: engine.interval: 1µs is below 1ms",
			"c.yaml:7: engine.backoff_max: 1m0s is below backoff_min (2m0s)",
			"c.yaml:8: engine.drain_timeout: -1s is negative",
			"c.yaml:9: engine.poll: 10µs is below 1ms",
		}},
		{"a default that breaks a rule is reported at its section", `
engine:
	backoff_min: 10m
`, []string{"c.yaml:1: engine.backoff_max: 5m0s is below backoff_min (10m0s)"}},
		{"item ids", `
items:
	ids:
		- ok
		- ""
		- "bad\x01id"
`, []string{
			`c.yaml:4: items.ids[1]: invalid item id "": empty`,
			`c.yaml:5: items.ids[2]: invalid item id "bad\x01id": control character U+0001 at byte 3`,
		}},

		// Sinks.
		{"unknown sink type", `
sink:
	type: kafka
`, []string{`c.yaml:2: sink.type: expected one of log (the default), exec, http or file, got "kafka"`}},
		// What was given, what is allowed and the default, and no more:
		// under "sink.type: [file]" an outside trial also read "sink.file:
		// set but sink.type is log (the default)".
		{"sink type a list, with its section", `
sink:
	type: [file]
	file:
		path: /tmp/x
`, []string{`c.yaml:2: sink.type: expected one of log (the default), exec, http or file, got a list`}},
		{"sink type a mapping", `
sink:
	type: {exec: true}
`, []string{`c.yaml:2: sink.type: expected one of log (the default), exec, http or file, got a mapping`}},
		{"sink type empty, with a section", `
sink:
	type: ""
	file:
		path: /tmp/x
`, []string{`c.yaml:2: sink.type: expected one of log (the default), exec, http or file, got ""`}},
		{"no sink type, two sections", `
sink:
	file:
		path: /tmp/x
	http:
		url: http://x
`, []string{
			"c.yaml:2: sink.file: set, but sink.type is left out: the default sink, log, runs and ignores it; add sink.type: http or file, the one to run, and remove the other sections",
			"c.yaml:4: sink.http: set, but sink.type is left out: the default sink, log, runs and ignores it; add sink.type: http or file, the one to run, and remove the other sections",
		}},
		{"log format a list", `
log:
	format: [json]
`, []string{`c.yaml:2: log.format: expected one of auto (the default), json or console, got a list`}},
		{"sink sub-section of another type", `
sink:
	type: exec
	exec:
		command: [/bin/true]
	http:
		url: http://x
	log: {}
`, []string{
			"c.yaml:5: sink.http: set, but sink.type is exec, which ignores it",
			"c.yaml:7: sink.log: set, but sink.type is exec, which ignores it",
		}},
		{"exec needs command", `
sink:
	type: exec
`, []string{"c.yaml:2: sink.exec.command: required when sink.type is exec"}},
		{"http needs url", `
sink:
	type: http
	http:
		timeout: 1s
`, []string{"c.yaml:3: sink.http.url: required when sink.type is http"}},
		{"file needs path", `
sink:
	type: file
`, []string{"c.yaml:2: sink.file.path: required when sink.type is file"}},
		{"exec values", `
sink:
	type: exec
	exec:
		command: [/bin/true]
		env: ["A=1", "NOVALUE", "SYNCD_ID=x"]
		timeout: -1s
		grace: -2s
`, []string{
			`c.yaml:5: sink.exec.env[1]: "NOVALUE" is not KEY=value`,
			"c.yaml:5: sink.exec.env[2]: SYNCD_ID is set by the sink",
			"c.yaml:6: sink.exec.timeout: must not be negative, got -1s",
			"c.yaml:7: sink.exec.grace: must not be negative, got -2s",
		}},
		{"http values", `
sink:
	type: http
	http:
		url: ftp://x
		headers:
			Content-Type: text/plain
			"bad name": x
		timeout: -1s
`, []string{
			`c.yaml:4: sink.http.url: scheme must be http or https, got "ftp"`,
			"c.yaml:6: sink.http.headers.Content-Type: Content-Type is set by the sink",
			`c.yaml:7: sink.http.headers.bad name: invalid header name "bad name"`,
			"c.yaml:8: sink.http.timeout: must not be negative, got -1s",
		}},
		{"http redirects", `
sink:
	type: http
	http:
		url: http://x
		redirects: sideways
`, []string{`c.yaml:5: sink.http.redirects: must be same-origin, none or any, got "sideways"`}},
		{"http url password not shown", `
sink:
	type: http
	http:
		url: "http://user:hunter2@host/%zz"
`, []string{`c.yaml:4: sink.http.url: parse "http://xxxxx@host/%zz": invalid URL escape "%zz"`}},
		{"log sink values", `
sink:
	log:
		delay: -1s
		fail_every: -1
`, []string{
			"c.yaml:3: sink.log.delay: must not be negative, got -1s",
			"c.yaml:4: sink.log.fail_every: must not be negative, got -1",
		}},

		// http and log.
		{"http.listen", `
http:
	listen: localhost
`, []string{`c.yaml:2: http.listen: "localhost" is not host:port (example: 127.0.0.1:9090)`}},
		{"http.listen port", `
http:
	listen: "127.0.0.1:99999"
`, []string{`c.yaml:2: http.listen: port "99999" is not a number from 0 to 65535`}},
		{"http.allowed_hosts", `
http:
	listen: 0.0.0.0:9090
	allowed_hosts:
		- syncd.example.com
		- ""
		- https://syncd.example.com
		- syncd.example.com:9090
		- "*.com"
		- a.*.example.com
`, []string{
			"c.yaml:5: http.allowed_hosts[1]: must not be empty: give a host name or IP address (example: syncd.example.com)",
			`c.yaml:6: http.allowed_hosts[2]: "https://syncd.example.com" has a scheme: give the host alone (example: syncd.example.com)`,
			`c.yaml:7: http.allowed_hosts[3]: "syncd.example.com:9090" has a port: give "syncd.example.com" alone; the port of a request's Host is not compared`,
			`c.yaml:8: http.allowed_hosts[4]: "*.com" matches every name under com, a top-level domain or public suffix: give a domain of your own (example: *.example.com)`,
			`c.yaml:9: http.allowed_hosts[5]: "a.*.example.com" is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`,
		}},
		{"log values", `
log:
	level: verbose
	format: text
`, []string{
			`c.yaml:2: log.level: expected one of debug, info (the default), warn or error, got "verbose"`,
			`c.yaml:3: log.format: expected one of auto (the default), json or console, got "text"`,
		}},

		// An explicit value out of range is an error, also a zero: only a
		// key left out takes the default.
		{"explicit zeros", `
redis:
	key_prefix: ""
	shards: 0
	dial_timeout: 0s
	db: 0
ownership:
	ttl: 0s
	settle: 0s
engine:
	workers: 0
sink:
	type: ""
log:
	level: ""
`, []string{
			`c.yaml:2: redis.key_prefix: "" is not allowed: leave the key out for the default ("syncd")`,
			"c.yaml:3: redis.shards: 0 is not allowed: leave the key out for the default (16)",
			"c.yaml:4: redis.dial_timeout: 0s is not allowed: leave the key out for the default (5s)",
			"c.yaml:7: ownership.ttl: 0s is not allowed: leave the key out for the default (30s)",
			"c.yaml:10: engine.workers: 0 is not allowed: leave the key out for the default (4)",
			`c.yaml:12: sink.type: expected one of log (the default), exec, http or file, got ""`,
			`c.yaml:14: log.level: expected one of debug, info (the default), warn or error, got ""`,
		}},
		// A number or a duration set to nothing is no value, whatever
		// its default: `shards:` alone took the default, 16, and the
		// shard-count mismatch then said redis.shards was not set, at
		// redis:'s line. A string, a list, a boolean or a section set to
		// nothing is its zero (TestParseValid).
		{"numbers set to nothing", `
redis:
	addrs: ["r:6379"]
	shards:
	db: ~
	pool_size: null
	read_timeout:
ownership:
	ttl:
	min_replicas:
engine:
	workers:
	backoff_max:
target:
	burst:
	breaker:
		failures:
items:
	max_removal:
sink:
	log:
		fail_every:
`, []string{
			"c.yaml:3: redis.shards: expected a whole number, got nothing: give one, or leave the key out for the default (16)",
			"c.yaml:4: redis.db: expected a whole number, got nothing: give one, or leave the key out for the default (0)",
			"c.yaml:5: redis.pool_size: expected a whole number, got nothing: give one, or leave the key out for the default (0)",
			"c.yaml:6: redis.read_timeout: expected a duration such as 30s, got nothing: give one, or leave the key out for the default (3s)",
			"c.yaml:8: ownership.ttl: expected a duration such as 30s, got nothing: give one, or leave the key out for the default (30s)",
			"c.yaml:9: ownership.min_replicas: expected a whole number, got nothing: give one, or leave the key out for the default (0)",
			"c.yaml:11: engine.workers: expected a whole number, got nothing: give one, or leave the key out for the default (4)",
			"c.yaml:12: engine.backoff_max: expected a duration such as 30s, got nothing: give one, or leave the key out for the default (5m)",
			"c.yaml:14: target.burst: expected a whole number, got nothing: give one, or leave the key out for the default (0)", // no rate: no burst
			"c.yaml:16: target.breaker.failures: expected a whole number, got nothing: give one, or leave the key out for the default (5)",
			"c.yaml:18: items.max_removal: expected a whole number, got nothing: give one, or leave the key out for the default (10)",
			"c.yaml:21: sink.log.fail_every: expected a whole number, got nothing: give one, or leave the key out for the default (0)",
		}},
		{"inline password", `
redis:
	addrs: ["r:6379"]
	password: hunter2
	sentinel_password: hunter3
`, []string{
			"c.yaml:3: redis.password: passwords are not written in the configuration file: name an environment variable with password_env or a file with password_file",
			"c.yaml:4: redis.sentinel_password: passwords are not written in the configuration file: name an environment variable with sentinel_password_env",
		}},
		{"exec grace not below the default margin", `
ownership:
	ttl: 10s
	heartbeat: 3x
sink:
	type: exec
	exec:
		command: [sh]
		grace: 2s
`, []string{`c.yaml:3: ownership.heartbeat: "3x" is not a duration (examples: 30s, 500ms, 2m)`,
			"c.yaml:8: sink.exec.grace: 2s must be below ownership.margin (1.002s): a command is sent SIGTERM when " +
				"its lease's trust window closes and SIGKILL grace later, and must be dead before the claim can expire, " +
				"margin later, and another worker take the item"}},
		{"exec grace not below the margin set", `
ownership:
	margin: 2s
sink:
	type: exec
	exec:
		command: [sh]
		grace: 2s
`, []string{"c.yaml:7: sink.exec.grace: 2s must be below ownership.margin (2s): a command is sent SIGTERM when " +
			"its lease's trust window closes and SIGKILL grace later, and must be dead before the claim can expire, " +
			"margin later, and another worker take the item"}},

		{"exec grace not compared with a bad margin", `
ownership:
	margin: 20s
sink:
	type: exec
	exec:
		command: [sh]
		grace: 25s
`, []string{"c.yaml:2: ownership.margin: 20s must be positive and below ttl/2 (15s)"}},

		// Every problem at once, in line order, and no spurious ones for
		// values that did not decode.
		{"all errors reported", `
redis:
	shardz: 3
	addrs: 6379
ownership:
	ttl: 3x
	min_replicas: 2
engine:
	workers: 0
	batch: -1
sink:
	type: file
log:
	level: loud
`, []string{
			"c.yaml:2: redis.shardz: unknown key (did you mean shards?)",
			"c.yaml:3: redis.addrs: expected a list of strings, got a whole number",
			`c.yaml:5: ownership.ttl: "3x" is not a duration (examples: 30s, 500ms, 2m)`,
			"c.yaml:8: engine.workers: 0 is not allowed: leave the key out for the default (4)",
			"c.yaml:9: engine.batch: -1 is outside 1..1000",
			"c.yaml:11: sink.file.path: required when sink.type is file",
			`c.yaml:13: log.level: expected one of debug, info (the default), warn or error, got "loud"`,
		}},
		{"bad target", `
target:
	rate: 20/d
	burst: 0
	max_in_flight: -1
	breaker:
		failures: 1
		probe_interval: 1ms
`, []string{
			`c.yaml:2: target.rate: "20/d": the unit must be s, m or h`,
			"c.yaml:4: target.max_in_flight: -1 is outside 0..1000000",
			"c.yaml:6: target.breaker.failures: 1 is below 2: one item failing alone must never open the breaker",
			"c.yaml:7: target.breaker.probe_interval: 1ms is below 10ms",
		}},
		// Numbers too large say so, with the limit: they said "must be a
		// whole number of at least 1" and "is not a duration" (an
		// outside trial).
		{"too large", `
target:
	rate: "99999999999999999999/s"
ownership:
	ttl: 99999999999h
engine:
	workers: 99999999999999999999
`, []string{
			`c.yaml:2: target.rate: "99999999999999999999/s" is too large (at most 1000000/s)`,
			`c.yaml:4: ownership.ttl: "99999999999h" is too large (at most 2562047h)`,
			"c.yaml:6: engine.workers: 99999999999999999999 is too large (at most 9223372036854775807)",
		}},
		{"two api tokens", `
http:
	api_token_env: SYNCD_TOKEN
	api_token_file: /etc/syncd/token
`, []string{"c.yaml:3: http.api_token_file: only one of http.api_token_env and http.api_token_file may be set"}},
		{"explicit zero burst", `
target:
	rate: 20/s
	burst: 0
	breaker:
		failures: 0
`, []string{
			"c.yaml:3: target.burst: 0 is not allowed: leave the key out for the default (20)",
			"c.yaml:5: target.breaker.failures: 0 is not allowed: leave the key out for the default (5)",
		}},
		{"bad exit codes", `
sink:
	type: exec
	exec:
		command: [/bin/true]
		exit_codes:
			75: later
			x: target
			300: stale
`, []string{
			`c.yaml:6: sink.exec.exit_codes.75: "later" is not a failure class: want item, target (or unavailable), permanent or stale`,
			`c.yaml:7: sink.exec.exit_codes.x: "x" is not an exit status: want a number from 1 to 255`,
			"c.yaml:8: sink.exec.exit_codes.300: status 300: must be 1 to 255",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("c.yaml", []byte(yamlText(tt.src)))
			if diff := cmp.Diff(errLines(err), tt.want); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
			if f != nil {
				t.Errorf("Parse returned a File with errors")
			}
			var errs *Errors
			if !errors.As(err, &errs) || len(errs.List) != len(tt.want) {
				t.Fatalf("error is not an *Errors of %d: %#v", len(tt.want), err)
			}
			for _, fe := range errs.List {
				if fe.File != "c.yaml" || fe.Msg == "" {
					t.Errorf("incomplete FieldError %+v", fe)
				}
			}
		})
	}
}

// The library's own error comes through for errors.As.
func TestParseErrorsWrapLibraryErrors(t *testing.T) {
	_, err := Parse("c.yaml", []byte("engine:\n  workers: -1\nownership:\n  margin: 1h\n"))
	var ee *engine.ConfigError
	var oe *ownership.ConfigError
	if !errors.As(err, &ee) || ee.Field != "workers" || !errors.As(err, &oe) || oe.Field != "margin" {
		t.Fatalf("got %v; want an *engine.ConfigError for workers and an *ownership.ConfigError for margin", err)
	}
	var errs *Errors
	if !errors.As(err, &errs) || len(errs.List) != 2 {
		t.Fatalf("got %#v; want an *Errors of 2", err)
	}
	if fe := errs.List[1]; fe.Field != "ownership.margin" || fe.Line != 4 || !errors.As(fe, &oe) {
		t.Fatalf("second FieldError %+v; want ownership.margin at line 4 wrapping the library's error", fe)
	}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name string
		src  string
	}{
		{"empty", ""},
		{"comments only", "# nothing\n\n# here\n"},
		{"empty document", "---\n"},
		{"null top level", "~\n"},
		{"null sections and keys", "redis:\n  addrs:\n  cluster:\nownership:\n  owner: ~\nsink:\n  http:\n"},
		{"empty sections", "redis: {}\nengine: {}\n"},
		{"zero values that are the defaults", "redis:\n  db: 0\n  pool_size: 0\nownership:\n  settle: 0s\n  min_replicas: 0\nhttp:\n  listen: \"\"\n"},
		{"aliases", "x: &d 30s\n"[len("x: &d 30s\n"):] + "ownership:\n  ttl: &t 20s\n  replica_timeout: 1s\nengine:\n  drain_timeout: *t\n"},
		{"exec grace below the margin", "ownership:\n  ttl: 10s\n  margin: 4s\nsink:\n  type: exec\n  exec:\n    command: [sh]\n    grace: 3900ms\n"},
		{"numbers as strings", "items:\n  ids: [1001, 1002, true]\nownership:\n  owner: 42\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, tt.src)
		})
	}
}

func TestDefaults(t *testing.T) {
	f := mustParse(t, "")
	st, err := f.Store(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Embedded() || st.Password != "" || st.TLS != nil {
		t.Errorf("Store() = %+v; want the embedded store", st)
	}
	if diff := cmp.Diff(f.Engine(), engine.Config{}, cmpopts.IgnoreUnexported(zerolog.Logger{})); diff != "" {
		t.Errorf("Engine() (-got +want):\n%s", diff)
	}
	if got := f.Sink(); got.Type != SinkLog {
		t.Errorf("Sink().Type = %q; want %q", got.Type, SinkLog)
	}
	if f.Listen() != "" || f.LogLevel() != zerolog.InfoLevel || f.LogFormat() != FormatAuto {
		t.Errorf("Listen, LogLevel, LogFormat = %q, %v, %q", f.Listen(), f.LogLevel(), f.LogFormat())
	}
	items, err := f.Items(nil)
	if err != nil || len(items) != 0 {
		t.Errorf("Items() = %q, %v; want none", items, err)
	}
}

const fullConfig = `
redis:
	addrs: ["r1:6379", "r2:6379"]
	master_name: mymaster
	username: syncd
	password_env: REDIS_PW
	sentinel_password_env: SENTINEL_PW
	db: 2
	key_prefix: app
	shards: 32
	refuse_eviction: true
	dial_timeout: 1s
	read_timeout: 2s
	write_timeout: 3s
	pool_size: 7
	auto_pipeline: false
ownership:
	ttl: 20s
	heartbeat: 5s
	settle: 100ms
	margin: 1s
	min_replicas: 1
	replica_timeout: 500ms
	owner: host-a
engine:
	workers: 8
	interval: 2m
	batch: 16
	max_attempts: 3
	backoff_min: 2s
	backoff_max: 1m
	drain_timeout: 10s
	poll: 100ms
sink:
	type: http
	http:
		url: https://user:hunter2@target.example.com/hook?token=t0k3n&page=2
		headers:
			Authorization: Bearer s3cr3t
			X-Api-Key: k3y
			X-Team: billing
			User-Agent: syncd-test
		timeout: 5s
http:
	listen: ":9090"
	allowed_hosts: [syncd.example.com, "*.syncd.example.com", 10.0.0.5]
log:
	level: debug
	format: json
`

func TestConversions(t *testing.T) {
	f := mustParse(t, yamlText(fullConfig))
	env := func(name string) (string, bool) {
		return map[string]string{"REDIS_PW": "pw-from-env", "SENTINEL_PW": "sentinel-pw"}[name], true
	}
	st, err := f.Store(env, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStore := store.Config{
		Addrs:            []string{"r1:6379", "r2:6379"},
		MasterName:       "mymaster",
		Username:         "syncd",
		Password:         "pw-from-env",
		SentinelPassword: "sentinel-pw",
		DB:               2,
		KeyPrefix:        "app",
		Shards:           32,
		RefuseEviction:   true,
		DialTimeout:      time.Second,
		ReadTimeout:      2 * time.Second,
		WriteTimeout:     3 * time.Second,
		PoolSize:         7,
	}
	ignoreLogger := cmpopts.IgnoreUnexported(zerolog.Logger{})
	if diff := cmp.Diff(st, wantStore, ignoreLogger); diff != "" {
		t.Errorf("Store() (-got +want):\n%s", diff)
	}
	// redis.auto_pipeline unset is the store's default, not false.
	if st, err := mustParse(t, "").Store(env, nil); err != nil || st.AutoPipeline != store.AutoPipelineDefault {
		t.Errorf("auto_pipeline unset: %v, %v; want %v", st.AutoPipeline, err, store.AutoPipelineDefault)
	}
	wantOwnership := ownership.Config{
		TTL:            20 * time.Second,
		Heartbeat:      5 * time.Second,
		Settle:         100 * time.Millisecond,
		Margin:         time.Second,
		MinReplicas:    1,
		ReplicaTimeout: 500 * time.Millisecond,
		Owner:          store.Owner{Host: "host-a"},
	}
	if diff := cmp.Diff(f.Ownership(), wantOwnership, ignoreLogger); diff != "" {
		t.Errorf("Ownership() (-got +want):\n%s", diff)
	}
	wantEngine := engine.Config{
		Workers:      8,
		Interval:     2 * time.Minute,
		Batch:        16,
		MaxAttempts:  3,
		BackoffMin:   2 * time.Second,
		BackoffMax:   time.Minute,
		DrainTimeout: 10 * time.Second,
		Poll:         100 * time.Millisecond,
		Ownership:    wantOwnership,
	}
	if diff := cmp.Diff(f.Engine(), wantEngine, ignoreLogger); diff != "" {
		t.Errorf("Engine() (-got +want):\n%s", diff)
	}
	wantSink := SinkConfig{Type: SinkHTTP, HTTP: httpsink.Config{
		URL:     "https://user:hunter2@target.example.com/hook?token=t0k3n&page=2",
		Headers: map[string]string{"Authorization": "Bearer s3cr3t", "X-Api-Key": "k3y", "X-Team": "billing", "User-Agent": "syncd-test"},
		Timeout: 5 * time.Second,
	}}
	if diff := cmp.Diff(f.Sink(), wantSink, cmpopts.IgnoreUnexported(SinkConfig{}), cmpopts.IgnoreFields(SinkConfig{}, "File")); diff != "" {
		t.Errorf("Sink() (-got +want):\n%s", diff)
	}
	if f.Listen() != ":9090" || f.LogLevel() != zerolog.DebugLevel || f.LogFormat() != FormatJSON {
		t.Errorf("Listen, LogLevel, LogFormat = %q, %v, %q", f.Listen(), f.LogLevel(), f.LogFormat())
	}
	for _, err := range []error{st.Validate(), f.Engine().Validate(), f.Sink().HTTP.Validate()} {
		if err != nil {
			t.Errorf("converted config does not validate: %v", err)
		}
	}
}

// Every key of a section that configures a library reaches the field of
// the same name and type in the library's Config (copyFields), but for
// the keys this package resolves itself: a field renamed in a library
// must not silently drop a key.
func TestSchemaNamesLibraryFields(t *testing.T) {
	own := []string{"PasswordEnv", "PasswordFile", "SentinelPasswordEnv", "TLS", "Owner", "ExitCodes", "Rate", "Breaker"}
	for _, pair := range [][2]any{
		{redisSection{}, store.Config{}}, {ownershipSection{}, ownership.Config{}}, {engineSection{}, engine.Config{}},
		{execSinkSection{}, execsink.Config{}}, {httpSinkSection{}, httpsink.Config{}},
		{fileSinkSection{}, filesink.Config{}}, {logSinkSection{}, logsink.Config{}},
		{targetSection{}, engine.TargetConfig{}}, {breakerSection{}, engine.BreakerConfig{}},
	} {
		st, lt := reflect.TypeOf(pair[0]), reflect.TypeOf(pair[1])
		for i := range st.NumField() {
			f := st.Field(i)
			if lf, ok := lt.FieldByName(f.Name); !slices.Contains(own, f.Name) && (!ok || lf.Type != f.Type) {
				t.Errorf("%s.%s has no field of its name and type in %s", st.Name(), f.Name, lt)
			}
		}
	}
}

// fakeFiles is a readFile over a map.
func fakeFiles(files map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		data, ok := files[name]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		return []byte(data), nil
	}
}

func fakeEnv(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestStorePassword(t *testing.T) {
	const secret = "p@ss-W0rd-never-shown"
	tests := []struct {
		name    string
		src     string
		env     map[string]string
		files   map[string]string
		want    string
		wantErr []string
	}{
		{"from env", "redis:\n  password_env: REDIS_PW\n", map[string]string{"REDIS_PW": secret}, nil, secret, nil},
		{"from file", "redis:\n  password_file: /run/pw\n", nil, map[string]string{"/run/pw": secret + "\n"}, secret, nil},
		{"from file with CRLF", "redis:\n  password_file: /run/pw\n", nil, map[string]string{"/run/pw": secret + "\r\n"}, secret, nil},
		{"from file without newline", "redis:\n  password_file: /run/pw\n", nil, map[string]string{"/run/pw": secret}, secret, nil},
		{"none", "redis: {}\n", nil, nil, "", nil},
		{"env unset", "redis:\n  password_env: REDIS_PW\n", nil, nil, "",
			[]string{"c.yaml:2: redis.password_env: environment variable REDIS_PW is not set"}},
		{"env empty", "redis:\n  password_env: REDIS_PW\n", map[string]string{"REDIS_PW": ""}, nil, "",
			[]string{"c.yaml:2: redis.password_env: environment variable REDIS_PW is empty"}},
		{"file missing", "redis:\n  password_file: /run/pw\n", nil, nil, "",
			[]string{"c.yaml:2: redis.password_file: /run/pw: file does not exist"}},
		{"file empty", "redis:\n  password_file: /run/pw\n", nil, map[string]string{"/run/pw": "\n"}, "",
			[]string{"c.yaml:2: redis.password_file: /run/pw is empty"}},
		{"sentinel env unset", "redis:\n  addrs: [\"s:26379\"]\n  master_name: m\n  password_file: /run/pw\n  sentinel_password_env: SPW\n",
			nil, map[string]string{"/run/pw": secret}, "",
			[]string{"c.yaml:5: redis.sentinel_password_env: environment variable SPW is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustParse(t, tt.src)
			st, err := f.Store(fakeEnv(tt.env), fakeFiles(tt.files))
			if diff := cmp.Diff(errLines(err), tt.wantErr); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
			if st.Password != tt.want {
				t.Errorf("Password = %q; want %q", st.Password, tt.want)
			}
			red, rerr := f.Redacted()
			if rerr != nil {
				t.Fatal(rerr)
			}
			for _, s := range []string{string(red), st.Redacted().Password, errString(err)} {
				if strings.Contains(s, secret) {
					t.Errorf("password shown in %q", s)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// testCert returns a self-signed certificate and its key, in PEM.
func testCert(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redis.test"},
		DNSNames:              []string{"redis.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

func TestStoreTLS(t *testing.T) {
	cert, key := testCert(t)
	otherCert, _ := testCert(t)
	const src = `
redis:
	addrs: ["redis.test:6380"]
	tls:
		enabled: true
		ca_file: ca.pem
		cert_file: cert.pem
		key_file: key.pem
		server_name: redis.test
`
	f := mustParse(t, yamlText(src))

	st, err := f.Store(nil, fakeFiles(map[string]string{"ca.pem": cert, "cert.pem": cert, "key.pem": key}))
	if err != nil {
		t.Fatal(err)
	}
	if st.TLS == nil || st.TLS.RootCAs == nil || len(st.TLS.Certificates) != 1 || st.TLS.ServerName != "redis.test" || st.TLS.InsecureSkipVerify {
		t.Fatalf("TLS = %+v", st.TLS)
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"files missing", nil, []string{
			"c.yaml:5: redis.tls.ca_file: ca.pem: file does not exist",
			"c.yaml:6: redis.tls.cert_file: cert.pem: file does not exist",
			"c.yaml:7: redis.tls.key_file: key.pem: file does not exist",
		}},
		{"not PEM", map[string]string{"ca.pem": "hello", "cert.pem": cert, "key.pem": key}, []string{
			"c.yaml:5: redis.tls.ca_file: ca.pem: no PEM certificate found",
		}},
		{"key does not match", map[string]string{"ca.pem": cert, "cert.pem": otherCert, "key.pem": key}, []string{
			"c.yaml:6: redis.tls.cert_file: cert.pem with key key.pem: tls: private key does not match public key",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.Store(nil, fakeFiles(tt.files))
			if diff := cmp.Diff(errLines(err), tt.want); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
		})
	}
}

func TestItems(t *testing.T) {
	const src = `
items:
	ids: [a, b]
	file: items.txt
`
	f := mustParse(t, yamlText(src))
	tests := []struct {
		name    string
		file    string
		want    []string
		wantErr []string
	}{
		{"lines", "# header\nc\n\n  d  \r\n#e\na\nc\nf # not a comment\n",
			[]string{"a", "b", "c", "d", "f # not a comment"}, nil},
		{"empty file", "", []string{"a", "b"}, nil},
		// The rules of syncd items --file (package idlines): before, a
		// byte order mark made line 1 an invalid id.
		{"byte order mark and CRLF", "\ufeffc\r\nd\r\nc\r\n", []string{"a", "b", "c", "d"}, nil},
		{"not UTF-8", "c\nk\xf6rv\n", nil, []string{`items.txt:2: invalid item id "k\xf6rv": not valid UTF-8`}},
		{"UTF-16", "\xff\xfec\x00\n\x00", nil, []string{
			"items.txt:1: UTF-16 text (it starts with a UTF-16 byte order mark): save the file as UTF-8"}},
		{"a line over 1 MiB", "c\n" + strings.Repeat("x", 2<<20) + "\nd\n", nil, []string{
			"items.txt:2: line of 2097152 bytes, longer than any item id"}},
		{"bad lines", "c\n# ok\n\x01bad\nd\n" + strings.Repeat("x", store.MaxIDLen+1) + "\n", nil, []string{
			`items.txt:3: invalid item id "\x01bad": control character U+0001 at byte 0`,
			`items.txt:5: invalid item id "` + strings.Repeat("x", 64) + `...": 513 bytes long, the limit is 512`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.Items(fakeFiles(map[string]string{"items.txt": tt.file}))
			if diff := cmp.Diff(errLines(err), tt.wantErr); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("items (-got +want):\n%s", diff)
			}
		})
	}

	t.Run("file missing", func(t *testing.T) {
		_, err := f.Items(fakeFiles(nil))
		want := []string{"c.yaml:3: items.file: items.txt: file does not exist"}
		if diff := cmp.Diff(errLines(err), want); diff != "" {
			t.Errorf("errors (-got +want):\n%s", diff)
		}
	})

	t.Run("many bad lines", func(t *testing.T) {
		_, err := f.Items(fakeFiles(map[string]string{"items.txt": strings.Repeat("\x01\n", 50)}))
		lines := errLines(err)
		if len(lines) != yamlstrict.MaxErrors+1 || lines[len(lines)-1] != "items.txt: and 30 more invalid lines" {
			t.Errorf("got %d lines, last %q", len(lines), lines[len(lines)-1])
		}
	})
}

func TestRedacted(t *testing.T) {
	f := mustParse(t, yamlText(fullConfig))
	red, err := f.Redacted()
	if err != nil {
		t.Fatal(err)
	}
	out := string(red)
	for _, secret := range []string{"hunter2", "s3cr3t", "k3y", "t0k3n"} {
		if strings.Contains(out, secret) {
			t.Errorf("Redacted shows %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{
		"Authorization: '[redacted]'",
		"X-Api-Key: '[redacted]'",
		"X-Team: '[redacted]'",
		"User-Agent: syncd-test",
		"url: https://xxxxx@target.example.com/hook?token=xxxxx&page=2",
		"password_env: REDIS_PW",
		"ttl: 20s",
		"interval: 2m",
		"key_prefix: app",
		"type: http",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Redacted lacks %q:\n%s", want, out)
		}
	}
	g, err := Parse("redacted.yaml", red)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"sink.exec", "sink.file", "sink.log"} {
		if g.isSet(other) {
			t.Errorf("Redacted shows %s, of another sink type:\n%s", other, out)
		}
	}
}

func TestRedactedDefaults(t *testing.T) {
	f := mustParse(t, "sink:\n  type: exec\n  exec:\n    command: [sh]\n    env: [API_TOKEN=abc, MODE=fast]\n")
	red, err := f.Redacted()
	if err != nil {
		t.Fatal(err)
	}
	out := string(red)
	for _, want := range []string{
		"addrs: [] # empty: the embedded in-process store",
		"key_prefix: syncd",
		"shards: 16",
		"dial_timeout: 5s",
		"ttl: 30s",
		"heartbeat: 10s",
		"margin: 3.002s",
		"replica_timeout: 3s",
		"workers: 4",
		"interval: 1m",
		"backoff_max: 5m",
		"poll: 250ms",
		"grace: 1.501s",
		"- API_TOKEN=[redacted]",
		"- MODE=fast",
		"level: info",
		"format: auto",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Redacted lacks %q:\n%s", want, out)
		}
	}
}

// Redacted output is a configuration file itself, and Redacted of it is
// the same.
func TestRedactedRoundTrip(t *testing.T) {
	for _, src := range []string{"", yamlText(fullConfig), readCheckedIn(t)} {
		f := mustParse(t, src)
		red, err := f.Redacted()
		if err != nil {
			t.Fatal(err)
		}
		g, err := Parse("redacted.yaml", red)
		if err != nil {
			t.Fatalf("Redacted output does not parse:\n%v\n%s", err, red)
		}
		red2, err := g.Redacted()
		if err != nil {
			t.Fatal(err)
		}
		red2 = []byte(strings.Replace(string(red2), "redacted.yaml", "c.yaml", 1))
		if diff := cmp.Diff(string(red2), string(red)); diff != "" {
			t.Errorf("Redacted of Redacted (-got +want):\n%s", diff)
		}
	}
}

func TestBuildSink(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		src     string
		wantErr []string
	}{
		{"log", "sink:\n  log:\n    delay: 1ms\n", nil},
		{"exec", "sink:\n  type: exec\n  exec:\n    command: [sh, -c, 'exit 0']\n", nil},
		{"http", "sink:\n  type: http\n  http:\n    url: http://127.0.0.1:1/hook\n", nil},
		{"file", "sink:\n  type: file\n  file:\n    path: " + filepath.Join(dir, "syncs.jsonl") + "\n", nil},
		{"exec command missing", "sink:\n  type: exec\n  exec:\n    command: [syncd-no-such-command-x]\n",
			[]string{`c.yaml:4: sink.exec.command: "syncd-no-such-command-x": executable file not found in $PATH`}},
		{"exec dir missing", "sink:\n  type: exec\n  exec:\n    command: [sh]\n    dir: " + filepath.Join(dir, "nope") + "\n",
			[]string{"c.yaml:5: sink.exec.dir: stat " + filepath.Join(dir, "nope") + ": no such file or directory"}},
		{"file dir missing", "sink:\n  type: file\n  file:\n    path: " + filepath.Join(dir, "nope", "x") + "\n",
			[]string{"c.yaml:4: sink.file.path: parent directory of \"" + filepath.Join(dir, "nope", "x") + "\": stat " + filepath.Join(dir, "nope") + ": no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustParse(t, tt.src)
			s, err := f.BuildSink(zerolog.New(zerolog.NewTestWriter(t)))
			if diff := cmp.Diff(errLines(err), tt.wantErr); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
			if (s == nil) != (err != nil) {
				t.Fatalf("BuildSink = %v, %v", s, err)
			}
			if s != nil {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// The sink configurations match what New takes, with nothing filled in
// here that the sink defaults itself, but for the exec sink's grace: this
// package keeps it below the lease margin.
func TestSinkConfig(t *testing.T) {
	f := mustParse(t, yamlText(`
sink:
	type: exec
	exec:
		command: [/bin/sync, --all]
		env: [A=1]
		dir: /tmp
		timeout: 1m
`))
	want := SinkConfig{Type: SinkExec, Exec: execsink.Config{
		Command: []string{"/bin/sync", "--all"},
		Env:     []string{"A=1"},
		Dir:     "/tmp",
		Timeout: time.Minute,
		Grace:   1501 * time.Millisecond, // half the default margin, 3.002s
	}}
	if diff := cmp.Diff(f.Sink(), want, cmpopts.IgnoreFields(SinkConfig{}, "File")); diff != "" {
		t.Errorf("Sink() (-got +want):\n%s", diff)
	}
}

// The default grace is the exec sink's unless half the margin is less;
// a grace that is set is kept.
func TestSinkExecGrace(t *testing.T) {
	tests := []struct {
		ownership, grace string
		want             time.Duration
	}{
		{"{}", "", 1501 * time.Millisecond},
		{"{ttl: 2m}", "", execsink.GraceDefault},
		{"{ttl: 1s}", "", 51 * time.Millisecond},
		{"{ttl: 1s, margin: 400ms}", "", 200 * time.Millisecond},
		{"{}", "grace: 3s", 3 * time.Second},
	}
	for _, tt := range tests {
		src := "ownership: " + tt.ownership + "\nsink:\n  type: exec\n  exec:\n    command: [sh]\n    " + tt.grace + "\n"
		if got := mustParse(t, src).Sink().Exec.Grace; got != tt.want {
			t.Errorf("%q: grace %v; want %v", src, got, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "syncd.yaml")
	if err := os.WriteFile(path, []byte("engine:\n  workers: 0x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want []string
	}{
		{path, []string{path + `:2: engine.workers: expected a whole number, got "0x"`}},
		{filepath.Join(dir, "missing.yaml"), []string{filepath.Join(dir, "missing.yaml") + ": no such file or directory"}},
		{dir, []string{dir + ": is a directory"}},
	}
	for _, tt := range tests {
		_, err := Load(tt.path)
		if diff := cmp.Diff(errLines(err), tt.want); diff != "" {
			t.Errorf("Load(%q) errors (-got +want):\n%s", tt.path, diff)
		}
	}
}

// A file with problems still gives what loaded (LoadPartial), and the
// checks that read files report theirs on it, skipping the fields with a
// problem, so that syncd validate reports every problem in one run (an
// outside trial: the missing token file came out only after the typo
// beside it was fixed).
func TestLoadPartial(t *testing.T) {
	dir := privateDir(t)
	path, ca, tok := filepath.Join(dir, "c.yaml"), filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tok")
	src := yamlText(`
engine:
	workerz: 3
redis:
	password_file: [pw]
	tls:
		enabled: true
		ca_file: ` + ca + `
sink:
	type: exec
	exec:
		command: [/nonexistent/prog]
		grace: 1h
http:
	api_token_file: ` + tok + `
`)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	loadErrs := []string{
		path + ":2: engine.workerz: unknown key (did you mean workers?)",
		path + ":4: redis.password_file: expected a string, got a list",
		path + ":12: sink.exec.grace: 1h must be below ownership.margin",
	}
	if f, err := Load(path); f != nil || len(errLines(err)) != len(loadErrs) {
		t.Fatalf("Load = %v, %v; want no File and the problems", f, err)
	}
	f, err := LoadPartial(path)
	if f == nil || len(errLines(err)) != len(loadErrs) {
		t.Fatalf("LoadPartial = %v, %v; want the File and the problems", f, err)
	}
	for i, line := range errLines(err) {
		if !strings.HasPrefix(line, loadErrs[i]) {
			t.Errorf("load problem %d: %q; want it to start %q", i, line, loadErrs[i])
		}
	}
	for field, want := range map[string]bool{"engine": true, "redis.password_file": true, "sink.exec.grace": true,
		"redis.tls.ca_file": false, "sink.exec.command": false, "http": false} {
		if got := f.Failed(field); got != want {
			t.Errorf("Failed(%q) = %v; want %v", field, got, want)
		}
	}
	// The password file did not load: not read. The CA file did.
	if _, err := f.Store(nil, nil); !slices.Equal(errLines(err), []string{path + ":7: redis.tls.ca_file: " + ca + ": no such file or directory"}) {
		t.Errorf("Store: %v; want only the CA file missing", err)
	}
	if _, err := f.APIToken(nil, nil); !slices.Equal(errLines(err), []string{path + ":14: http.api_token_file: " + tok + ": no such file or directory"}) {
		t.Errorf("APIToken: %v; want the token file missing", err)
	}
	// grace broke a rule; the program is looked for all the same.
	if err := f.CheckSink(); !slices.Equal(errLines(err), []string{path + `:11: sink.exec.command: "/nonexistent/prog": stat /nonexistent/prog: no such file or directory`}) {
		t.Errorf("CheckSink: %v; want the program missing", err)
	}

	for _, tt := range []struct {
		name, src string
		check     func(*File) error
	}{
		// The sink's Validate finds again what Load reported: dropped.
		{"sink validate", "sink:\n  type: exec\n  exec:\n    command: [/nonexistent/prog]\n    timeout: -1s\n", (*File).CheckSink},
		{"sink type", "sink:\n  type: teleport\n", (*File).CheckSink},
		// Both set: which one is meant is the user's to say.
		{"token both", "http:\n  api_token_env: SYNCD_TEST_UNSET\n  api_token_file: /nonexistent/tok\n",
			func(f *File) error { _, err := f.APIToken(nil, nil); return err }},
		{"password both", "redis:\n  password_env: SYNCD_TEST_UNSET\n  password_file: /nonexistent/pw\n",
			func(f *File) error { _, err := f.Store(nil, nil); return err }},
	} {
		f, err := ParsePartial("c.yaml", []byte(tt.src))
		if f == nil || err == nil {
			t.Fatalf("%s: ParsePartial = %v, %v; want the File and a problem", tt.name, f, err)
		}
		if err := tt.check(f); err != nil {
			t.Errorf("%s: %v; want nothing more than Load reported", tt.name, err)
		}
	}
	// Nothing loads from a file that is not YAML.
	if f, err := ParsePartial("c.yaml", []byte("engine: [\n")); f != nil || err == nil {
		t.Errorf("ParsePartial of malformed YAML = %v, %v; want no File and the error", f, err)
	}
	if f, err := ParsePartial("c.yaml", []byte("- a\n")); f == nil || !f.Failed("redis.password_file") || err == nil {
		t.Errorf("ParsePartial of a list = %v, %v; want every field failed", f, err)
	}
}

func TestLogAccessors(t *testing.T) {
	tests := []struct {
		src    string
		level  zerolog.Level
		format string
	}{
		{"", zerolog.InfoLevel, FormatAuto},
		{"log: {level: debug, format: console}", zerolog.DebugLevel, FormatConsole},
		{"log: {level: info, format: json}", zerolog.InfoLevel, FormatJSON},
		{"log: {level: warn}", zerolog.WarnLevel, FormatAuto},
		{"log: {level: error}", zerolog.ErrorLevel, FormatAuto},
	}
	for _, tt := range tests {
		f := mustParse(t, tt.src)
		if f.LogLevel() != tt.level || f.LogFormat() != tt.format {
			t.Errorf("%q: LogLevel, LogFormat = %v, %q; want %v, %q", tt.src, f.LogLevel(), f.LogFormat(), tt.level, tt.format)
		}
	}
}

// target and sink.exec.exit_codes reach engine.TargetConfig and
// exec.Config, names parsed.
func TestTargetConversion(t *testing.T) {
	f := mustParse(t, yamlText(`
target:
	rate: 100/m
	max_in_flight: 4
	breaker:
		disabled: true
		probe_interval: 2s
sink:
	type: exec
	exec:
		command: [/bin/true]
		exit_codes:
			1: target
			75: item
`))
	want := engine.TargetConfig{Rate: engine.Rate{N: 100, Per: time.Minute}, MaxInFlight: 4,
		Breaker: engine.BreakerConfig{Disabled: true, ProbeInterval: 2 * time.Second}}
	if diff := cmp.Diff(f.Engine().Target, want); diff != "" {
		t.Errorf("Engine().Target (-got +want):\n%s", diff)
	}
	if got := f.Engine().WithDefaults().Target.Burst; got != 1 {
		t.Errorf("burst of 100/m = %d, want 1 (a second's worth, at least 1)", got)
	}
	wantCodes := map[int]sinks.Class{1: sinks.ClassTarget, 75: sinks.ClassItem}
	if diff := cmp.Diff(f.Sink().Exec.ExitCodes, wantCodes); diff != "" {
		t.Errorf("exit codes (-got +want):\n%s", diff)
	}
}
