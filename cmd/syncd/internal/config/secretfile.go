package config

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	execsink "github.com/syncd/syncd/sinks/exec"
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
//
// Whoever can write the directory that holds a secret or trust file can
// replace the file too, whatever its mode: such a directory, without the
// sticky bit, is refused (DirError). A file owned by a user other than
// root and the one syncd runs as is a warning (OwnerError): that user
// can replace it, but a secret kept by another service's user and
// shared through a group is a setup of its own.

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

func (e *ModeError) Error() string { return shownPath(e.Path) + " is " + e.state() }

// state is Error without the path: "writable by ... (mode ...): ...; fix".
func (e *ModeError) state() string {
	if e.Writable() {
		return fmt.Sprintf("writable by %s (mode %04o): they could replace the %s; %s",
			writers(e.Mode), uint32(e.Mode), e.Secret, e.Fix())
	}
	return fmt.Sprintf("readable by others (mode %04o): any user on the host can read the %s; %s",
		uint32(e.Mode), e.Secret, e.Fix())
}

// writers says who, other than its owner, may write a file of mode.
func writers(mode fs.FileMode) string {
	return map[fs.FileMode]string{0o020: "group", 0o002: "others", 0o022: "group and others"}[mode&modeWritable]
}

// DirError is a secret or trust file in a directory that users other
// than its owner can write, without the sticky bit, on a file system
// mounted writable, or under one: they could rename the file, or a
// directory on the way, away and put their own in its place. It is the
// Err of such a FieldError: refused.
type DirError struct {
	Path   string      // the file, as named
	Dir    string      // the directory, absolute
	Mode   fs.FileMode // the directory's permission bits
	Secret string      // what the file holds, as in ModeError
	Above  bool        // Dir is above the file's own directory
}

// Fix is a command that fixes the directory; moving the file to a
// directory only its owner can write is the other fix.
func (e *DirError) Fix() string { return "chmod go-w " + shellQuote(e.Dir) }

func (e *DirError) Error() string { return shownPath(e.Path) + " is " + e.state() }

// state is Error without the file's name, for a message that starts
// with it.
func (e *DirError) state() string {
	if e.Above {
		return fmt.Sprintf("under %s, which %s can write (mode %04o, no sticky bit): they could rename the directories below it away and put their own in their place, and so replace the %s; %s, or keep the file where only its owner can write each directory on the way",
			shownPath(e.Dir), writers(e.Mode), uint32(e.Mode), e.Secret, e.Fix())
	}
	return fmt.Sprintf("in %s, which %s can write (mode %04o, no sticky bit): they could replace the %s; %s, or keep the file in a directory only its owner can write",
		shownPath(e.Dir), writers(e.Mode), uint32(e.Mode), e.Secret, e.Fix())
}

// OwnerError is a secret or trust file owned by a user other than root
// and the one syncd runs as: that user could replace it, or let any user
// read it. It is the Err of such a warning (Warnings), not refused.
type OwnerError struct {
	Path   string
	Owner  int    // the file's owner's uid
	User   int    // the uid syncd runs as
	Secret string // what the file holds, as in ModeError
	names  [2]string
}

// Fix is the command that gives the file to the user syncd runs as.
func (e *OwnerError) Fix() string {
	return "chown " + cmp.Or(e.names[1], strconv.Itoa(e.User)) + " " + shellQuote(e.Path)
}

func (e *OwnerError) Error() string {
	runs := "root or " + userText(e.names[1], e.User) + ", the user syncd runs as"
	if e.User == 0 {
		runs = "root, the user syncd runs as"
	}
	return fmt.Sprintf("%s is owned by %s, not by %s: that user could replace the %s, or let any user read it; %s",
		shownPath(e.Path), userText(e.names[0], e.Owner), runs, e.Secret, e.Fix())
}

// userText is a user as "name (uid n)", or "uid n" without a name.
func userText(name string, uid int) string {
	if name == "" {
		return "uid " + strconv.Itoa(uid)
	}
	return fmt.Sprintf("%s (uid %d)", name, uid)
}

// euid is the user syncd runs as; a test may change it.
var euid = os.Geteuid

// ownerError returns an *OwnerError when fi, the file at path holding
// secret, is owned by a user other than root and the one syncd runs as;
// nil where the system does not say who owns it (fileOwner).
func ownerError(secret, path string, fi fs.FileInfo) *OwnerError {
	uid, ok := fileOwner(fi)
	if me := euid(); ok && uid != 0 && uid != me {
		e := &OwnerError{Path: path, Owner: uid, User: me, Secret: secret}
		for i, id := range []int{uid, me} {
			if u, err := user.LookupId(strconv.Itoa(id)); err == nil {
				e.names[i] = u.Username
			}
		}
		return e
	}
	return nil
}

// dirError returns a *DirError when field names a secret or trust file
// and a directory on the way to the file at path lets users other than
// its owner replace it: writable by group or others, without the sticky
// bit (as /tmp has), on a file system mounted writable. On the way is
// every directory the kernel looks in to find the file (onTheWay): those
// above it, up to the root, and each link's own. Whoever can write /srv
// can rename /srv/syncd away and make a /srv/syncd of their own, or
// point a link in it elsewhere, whatever the modes below (as ssh's
// StrictModes looks at every directory up to the home). A Kubernetes
// secret volume links name to ..data/name to ..<time>/name, the first
// two in a 1777 directory, the file in a 0755 one; a ConfigMap's first
// directory is 0777, but the volume is mounted read-only.
func dirError(field, path string) *DirError {
	secret := fileSecret(field)
	if secret == "" {
		return nil
	}
	return openDir(path, secret)
}

// openDir returns a *DirError, of a file holding secret, when a
// directory on the way to the file at path (see dirError and onTheWay)
// lets users other than its owner replace it; else nil. The one nearest
// the file is named.
func openDir(path, secret string) *DirError {
	dirs, own := onTheWay(path)
	for _, dir := range slices.Backward(dirs) {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode()&modeWritable == 0 || fi.Mode()&fs.ModeSticky != 0 || readOnlyFS(dir) {
			continue
		}
		return &DirError{Path: path, Dir: dir, Mode: fi.Mode().Perm(), Secret: secret, Above: !slices.Contains(own, dir)}
	}
	return nil
}

// maxLinks is how many links onTheWay follows, as Linux's ELOOP limit.
const maxLinks = 40

// onTheWay returns the directories the kernel looks in to find the file
// at path, in that order, following links as it does: each directory a
// name of the path, or of a link's target, is looked up in. That takes
// in every directory above the file, and each link's own directory,
// where whoever can write it can point the link elsewhere (an outside
// trial: /safe2/l2 linked to /w/lnkS, a link in a 0777 directory to
// /safe, and a user of /w swapped lnkS for a link to their own program,
// which syncd then ran; the path's own directories and the file's were
// all 0755). own are the directories its last name was looked up in:
// the file's own, and that of each link to it. A name that is not there
// ends the walk: nothing past it is read.
func onTheWay(path string) (dirs, own []string) {
	if path == "" {
		return nil, nil
	}
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return nil, nil
		}
		path = wd + "/" + path
	}
	names := strings.Split(path, "/")
	cur, links := "/", 0
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur holds no link: this is the kernel's ..
			continue
		}
		if !slices.Contains(dirs, cur) {
			dirs = append(dirs, cur)
		}
		if !slices.ContainsFunc(names, func(n string) bool { return n != "" && n != "." }) && !slices.Contains(own, cur) {
			own = append(own, cur)
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			break
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		target, err := os.Readlink(next)
		if links++; err != nil || links > maxLinks {
			break
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		names = append(strings.Split(target, "/"), names...)
	}
	return dirs, own
}

// fileSecret is what the file field names holds, "" when it is neither
// a secret file nor a trust file.
func fileSecret(field string) string {
	for _, s := range slices.Concat(secretFiles, trustFiles) {
		if s.field == field {
			return s.secret
		}
	}
	return ""
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

// secretPath returns the secret or trust file named by field that is in
// force: the password file unless password_env is set, the TLS key and
// CA with TLS on, the token file unless api_token_env is set; "" for
// none.
func (f *File) secretPath(field string) string {
	r, h := f.s.Redis, f.s.HTTP
	switch {
	case field == "redis.password_file" && r.PasswordEnv == "":
		return r.PasswordFile
	case field == "redis.tls.key_file" && r.TLS.Enabled:
		return r.TLS.KeyFile
	case field == "redis.tls.ca_file" && r.TLS.Enabled:
		return r.TLS.CAFile
	case field == "http.api_token_file" && h.APITokenEnv == "":
		return h.APITokenFile
	}
	return ""
}

// Warnings returns what syncd runs with but should not, each at its key:
// a secret file that any user can read (its Err a *ModeError), a secret
// or trust file owned by another user than root and the one syncd runs
// as (an *OwnerError). It looks at the files (os.Stat); one it cannot
// look at, or that others can write or replace, is Store's or
// APIToken's error, not a warning. On a File with problems
// (LoadPartial), keys with one are skipped. They come in line order.
func (f *File) Warnings() []*FieldError {
	var ws []*FieldError
	for _, s := range slices.Concat(secretFiles, trustFiles) {
		path := f.secretPath(s.field)
		if path == "" || f.Failed(s.field) {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		me := modeError(s.field, path, fi.Mode())
		if me != nil && me.Writable() || dirError(s.field, path) != nil {
			continue
		}
		if me != nil {
			ws = append(ws, f.errorAt(me, s.field, nil, me.Error()))
		}
		if oe := ownerError(s.secret, path, fi); oe != nil {
			ws = append(ws, f.errorAt(oe, s.field, nil, oe.Error()))
		}
	}
	slices.SortStableFunc(ws, func(a, b *FieldError) int { return a.Line - b.Line }) // the file's order
	return ws
}

// shellSafe is a path that a shell takes as it is.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9@%+=:,./_-]+$`)

// shellQuote quotes path for a shell command line, when it needs it.
func shellQuote(path string) string {
	if strings.HasPrefix(path, "-") {
		// chmod 600 -pw reads -pw as options (a second outside trial).
		path = "./" + path
	}
	if shellSafe.MatchString(path) {
		return path
	}
	if odd(path) {
		// bash's $'...', each byte that is no printable character
		// escaped: a newline in a fix would break the one problem per
		// line that errors keep (an outside trial).
		var b strings.Builder
		b.WriteString("$'")
		for i := 0; i < len(path); i++ {
			switch c := path[i]; {
			case c == '\\' || c == '\'':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20 || c == 0x7f || c >= 0x80 && !utf8.FullRuneInString(path[i:]):
				fmt.Fprintf(&b, "\\x%02x", c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('\'')
		return b.String()
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}

// odd reports whether path holds a control character or is not UTF-8:
// shown as it is, it could break an error's line or forge another.
func odd(path string) bool {
	return !utf8.ValidString(path) || strings.ContainsFunc(path, unicode.IsControl)
}

// shownPath is path as an error shows it: quoted as Go quotes a string
// when it is odd, else as it is.
func shownPath(path string) string {
	if odd(path) {
		return strconv.Quote(path)
	}
	return path
}

// RedisUser is the Redis user syncd logs in as: redis.username, or
// Redis's "default" user when that is not set.
func (f *File) RedisUser() string {
	if u := f.s.Redis.Username; u != "" {
		return u
	}
	return "default"
}

// PasswordField is the key that gives syncd its Redis password:
// redis.password_env when set, else redis.password_file, else
// redis.username (a user without a password); "redis.password_file"
// when none is set.
func (f *File) PasswordField() string {
	r := f.s.Redis
	switch {
	case r.PasswordEnv != "":
		return "redis.password_env"
	case r.PasswordFile == "" && r.Username != "":
		return "redis.username"
	}
	return "redis.password_file"
}

// programSecret is what a program syncd runs (sink.exec.command,
// items.command) is, as a ModeError or DirError says it.
const programSecret = "program syncd runs"

// programError returns a *ModeError when users other than its owner can
// write the program at path, or a *DirError when they can replace it
// through a directory on the way (openDir): either would run code of
// theirs as syncd's user, as a writable configuration file would. Nil
// otherwise, and for a program that is not there (running it says so).
func programError(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	if fi.Mode().IsRegular() && fi.Mode()&modeWritable != 0 {
		return &ModeError{Path: path, Mode: fi.Mode().Perm(), Secret: programSecret, Public: true}
	}
	if de := openDir(path, programSecret); de != nil {
		return de
	}
	return nil
}

// ProgramErrors are the programs syncd runs that users other than their
// owner can replace (programError): sink.exec.command's, with sink.type
// exec, and items.command's, each named by its key and line. Run and
// validate refuse them. A program that is not found is not one of them:
// validate and the exec sink say so.
func (f *File) ProgramErrors() []error {
	var errs []error
	check := func(field, path string) {
		if err := programError(path); err != nil {
			errs = append(errs, f.At(field, err))
		}
	}
	if c := f.Sink(); c.Type == SinkExec && !f.Failed("sink.exec.command") && !f.Failed("sink.exec.dir") {
		if path, err := execsink.Program(c.Exec); err == nil {
			check("sink.exec.command", path)
		}
	}
	if argv, _ := f.ItemsCommand(); len(argv) > 0 && !f.Failed("items.command") {
		if path, err := exec.LookPath(argv[0]); err == nil {
			check("items.command", path)
		}
	}
	return errs
}
