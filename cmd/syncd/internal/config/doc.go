// Package config loads syncd's YAML configuration file and turns it into
// the configurations of the libraries: store.Config, ownership.Config,
// engine.Config and the sinks'. The checked-in config.yaml at the root of
// the repository documents every key and its default; a test keeps it
// complete.
//
// Parsing is strict (package yamlstrict decodes; this package owns the
// schema and its rules) and reports every problem at once, each with its
// file, line and dotted field, in an *Errors (at most 20, then a count):
//
//	config.yaml:12: redis.shardz: unknown key (did you mean shards?)
//	config.yaml:17: ownership.ttl: "3x" is not a duration (examples: 30s, 500ms, 2m)
//	config.yaml:23: engine.workers: -1 is outside 1..10000
//
// A key left out takes its default, which the library that owns the
// field applies (WithDefaults), as does a section, string, list or
// boolean set to null; a value written out must be valid, so
// `workers: 0` is an error, not the default, and so is a number or
// duration set to null (`shards:` alone), whatever its default
// (yamlstrict's RefuseZeros). Each library's Validate
// checks its own fields; this package checks the file (keys that go
// together, item IDs, http.listen and allowed_hosts, log) and the one
// rule across libraries: sink.exec.grace below ownership.margin.
//
// Parse reads nothing; Store, APIToken, Items and BuildSink read the
// passwords, TLS, token and items files, through functions the caller
// passes, and build the sink. LoadPartial also gives a file with
// problems as far as it loaded, on which those checks skip the fields
// with a problem: syncd validate reports the file's problems and theirs
// in one run.
//
// The file holds no secrets, only the names of the variables and files
// that do; no error quotes a password, and Redacted prints the effective
// configuration with credentials hidden. Load refuses a file that users
// other than its owner can write: it names the commands syncd runs and
// where it sends data. A secret file
// (redis.password_file, redis.tls.key_file, http.api_token_file) that
// users other than its owner can write, or replace through its
// directory, is refused; one that any user can read, or that another
// user owns, is a warning (Warnings).
package config
