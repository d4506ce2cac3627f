// Package config loads syncd's YAML configuration file and turns it into
// the configurations of the libraries: store.Config, ownership.Config,
// engine.Config and the sinks'.
//
// The file has the sections redis, ownership, engine, items, sink, http
// and log; the checked-in config.yaml at the root of the repository
// documents every key and its default, and a test keeps it complete.
//
// # Strict, and every problem at once
//
// Load and Parse refuse what they do not understand rather than guess:
// unknown keys at any level, wrong types (a list where a string belongs, a
// quoted "4" where a number belongs, a duration without a unit), merge
// keys, duplicate keys and a second YAML document are all errors. They
// report every problem they find, not the first, each with the file, the
// line and the dotted field:
//
//	config.yaml:12: redis.shardz: unknown key (did you mean shards?)
//	config.yaml:17: ownership.ttl: "3x" is not a duration (examples: 30s, 500ms, 2m)
//	config.yaml:23: engine.workers: -1 is outside 1..10000
//
// The returned error is an *Errors whose List holds a *FieldError per
// problem.
//
// # Zero means default
//
// A missing key, a key with no value ("ttl:") and a zero value all mean the
// library's default; an empty file is a valid configuration of defaults
// only (the embedded store, no items, the log sink). Any scalar is taken
// as a string where a string belongs, so `owner: 42` is the host "42".
//
// # Validation
//
// The rules of each library stay in the library. Parse runs
// store.Config.Validate, ownership.Config.Validate, engine.Config.Validate
// and the sinks' Validate, and maps the field each names back to the line
// of its key (or of its section when the key is not in the file). Those
// validators stop at the first bad field; Parse resets that field to its
// default and runs them again, to find the next, except after a field
// that later checks are measured against (ownership.ttl and margin). The
// rules here are about the file: which keys go together (password_env or
// password_file; sink.type and its sub-section; redis.tls keys need
// enabled: true; min_replicas needs redis.addrs), item IDs, http.listen
// and log.
//
// # Side effects
//
// Load reads the file, and Parse reads nothing. Store reads the passwords
// and TLS files, Items reads items.file, both through functions the
// caller passes; BuildSink builds the sink, which may look up a command or
// open a file. Paths are used as written, relative to the working
// directory of the process.
//
// # Secrets
//
// The file holds no secrets, only the names of the environment variables
// and files that do. Store resolves them; no error of this package quotes
// a password, and Redacted prints the effective configuration with header
// and environment values of secret-looking names and URL passwords hidden.
package config
