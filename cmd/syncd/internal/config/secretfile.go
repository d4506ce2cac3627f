package config

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
)

// The configuration file and its permissions. One that users other
// than its owner can write is refused (LoadPartial): it names the
// commands syncd runs and where it sends data. The fix is chmod go-w.
//
// Secret files and their permissions. A secret file that users other
// than its owner may write is refused: they could replace the secret
// with a token they know, or the password or key of a Redis of their
// own. One that any user may read is a warning (Warnings), not refused:
// Kubernetes mounts secret volumes 0644 unless defaultMode says
// otherwise. Read by the file's group is fine: that is how services
// share a secret through a group. The fix for both is chmod 600.

// secretFiles are the keys that name a file holding a secret, in the
// order of the file, and what it holds (TestSecretFilesComplete keeps the
// list complete).
var secretFiles = []struct{ field, secret string }{
	{"redis.password_file", "Redis password"},
	{"redis.tls.key_file", "TLS private key"},
	{"http.api_token_file", "API token"},
}

// Permission bits of a secret file: writable by group or others is
// refused, readable by others a warning.
const (
	modeWritable fs.FileMode = 0o022
	modeReadable fs.FileMode = 0o004
)

// ModeError is a secret file whose permissions let users other than its
// owner replace it (refused) or read it (a warning). It is the Err of
// such a FieldError.
type ModeError struct {
	Path   string
	Mode   fs.FileMode // its permission bits
	Secret string      // what it holds: "API token", "Redis password", "TLS private key", "CA certificate", or configSecret
	Public bool        // others may read it (trustFiles, the configuration file): only writing is refused
}

// Writable reports whether users other than the owner may write the
// file: it is refused, else it is a warning.
func (e *ModeError) Writable() bool { return e.Mode&modeWritable != 0 }

// Fix is the command that fixes the permissions.
func (e *ModeError) Fix() string {
	if e.Public {
		return "chmod go-w " + shellQuote(e.Path)
	}
	return "chmod 600 " + shellQuote(e.Path)
}

func (e *ModeError) Error() string { return e.Path + " is " + e.state() }

// state is Error without the path: "writable by ... (mode ...): ...; fix".
func (e *ModeError) state() string {
	if e.Writable() {
		who := map[fs.FileMode]string{0o020: "group", 0o002: "others", 0o022: "group and others"}[e.Mode&modeWritable]
		return fmt.Sprintf("writable by %s (mode %04o): they could replace the %s; %s",
			who, uint32(e.Mode), e.Secret, e.Fix())
	}
	return fmt.Sprintf("readable by others (mode %04o): any user on the host can read the %s; %s",
		uint32(e.Mode), e.Secret, e.Fix())
}

// trustFiles are the keys that name a file that is not secret but says
// whom to trust: others may read it, not write it. Whoever can replace
// the CA certificate can vouch for a Redis of their own, which syncd
// then sends its password (an outside trial).
var trustFiles = []struct{ field, secret string }{
	{"redis.tls.ca_file", "CA certificate"},
}

// configSecret is what a configuration file holds, as a ModeError says
// it: whoever can change the file chooses what syncd runs and where it
// sends data, as syncd's user.
const configSecret = "configuration, which names the programs syncd runs (sink.exec.command, items.command) and where it sends data (sink.http.url)"

// configModeError returns a *ModeError when users other than its owner
// can write the configuration file at path, of the given mode (as ssh
// refuses a writable ~/.ssh/config); else nil. Only a regular file's or
// a named pipe's bits are looked at: a device's say nothing of what it
// gives (/dev/null is 0666). A link's do not count, the file's do: a
// Kubernetes ConfigMap is a link to a link to a 0644 file.
func configModeError(path string, mode fs.FileMode) *ModeError {
	if mode.Type()&^fs.ModeNamedPipe != 0 || mode&modeWritable == 0 {
		return nil
	}
	return &ModeError{Path: path, Mode: mode.Perm(), Secret: configSecret, Public: true}
}

// modeError returns a *ModeError when field names a secret file and
// mode, of the file at path, lets others write or read it, or names a
// trust file (trustFiles) that others can write; else nil.
func modeError(field, path string, mode fs.FileMode) *ModeError {
	for _, s := range secretFiles {
		if s.field == field && mode&(modeWritable|modeReadable) != 0 {
			return &ModeError{Path: path, Mode: mode.Perm(), Secret: s.secret}
		}
	}
	for _, s := range trustFiles {
		if s.field == field && mode&modeWritable != 0 {
			return &ModeError{Path: path, Mode: mode.Perm(), Secret: s.secret, Public: true}
		}
	}
	return nil
}

// secretPath returns the secret file named by field that is in force:
// the password file unless password_env is set, the TLS key with TLS
// on, the token file unless api_token_env is set; "" for none.
func (f *File) secretPath(field string) string {
	r, h := f.s.Redis, f.s.HTTP
	switch {
	case field == "redis.password_file" && r.PasswordEnv == "":
		return r.PasswordFile
	case field == "redis.tls.key_file" && r.TLS.Enabled:
		return r.TLS.KeyFile
	case field == "http.api_token_file" && h.APITokenEnv == "":
		return h.APITokenFile
	}
	return ""
}

// Warnings returns what syncd runs with but should not, each at its key:
// a secret file that any user can read (its Err a *ModeError). It looks
// at the files (os.Stat); one it cannot look at, or that others can
// write, is Store's or APIToken's error, not a warning. On a File with
// problems (LoadPartial), keys with one are skipped.
func (f *File) Warnings() []*FieldError {
	var ws []*FieldError
	for _, s := range secretFiles {
		path := f.secretPath(s.field)
		if path == "" || f.Failed(s.field) {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if me := modeError(s.field, path, fi.Mode()); me != nil && !me.Writable() {
			ws = append(ws, f.errorAt(me, s.field, nil, me.Error()))
		}
	}
	return ws
}

// shellSafe is a path that a shell takes as it is.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9@%+=:,./_-]+$`)

// shellQuote quotes path for a shell command line, when it needs it.
func shellQuote(path string) string {
	if shellSafe.MatchString(path) {
		return path
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}
