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
// yaml.v3 decodes the file strictly: unknown keys, duplicate keys and
// wrong types (a list where a string belongs, a quoted "4" where a number
// belongs, a duration without a unit) are errors, reported all at once.
// Its errors carry a line only; a walk over the node tree names the field
// on that line, suggests a key for a misspelt one, and refuses what
// yaml.v3 lets through (merge keys, empty list elements, fractions where
// a whole number belongs). Each problem names the file, line and field:
//
//	config.yaml:12: redis.shardz: unknown key (did you mean shards?)
//	config.yaml:17: ownership.ttl: "3x" is not a duration (examples: 30s, 500ms, 2m)
//	config.yaml:23: engine.workers: -1 is outside 1..10000
//
// The returned error is an *Errors whose List holds a *FieldError per
// problem, at most 20 and then a count of the rest.
//
// # Defaults, and only for keys left out
//
// A key left out, or with no value ("ttl:"), takes its default, which
// the library that owns the field applies (WithDefaults); an empty file
// is the embedded store, no items and the log sink. A value written out
// must be valid itself: `workers: 0` is an error, not the default. Any
// scalar is taken as a string where a string belongs (`owner: 42`).
//
// # Validation
//
// The rules of each library stay in the library: Parse runs the Validate
// of store, ownership, engine and the sink, which report every bad field,
// and maps each field back to the line of its key (or of its section).
// The rules here are about the file (which keys go together, item IDs,
// http.listen, log) and across libraries: sink.exec.grace must be below
// ownership.margin, so that a command stopped when its lease's trust
// window closes is dead before the claim can expire.
//
// # Hostile input
//
// A file over 1 MiB, or whose aliases expand to more than 10,000 values,
// is refused before it is decoded; values and keys are cut in messages.
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
// and files that do (an inline redis password is refused). Store resolves
// them; no error of this package quotes a password, and Redacted prints
// the effective configuration with header values (but for a few harmless
// headers), secret-named environment values, URL user information and
// query values, and credentials inside values hidden.
package config
