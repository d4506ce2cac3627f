package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// privateDir is t.TempDir, which only its owner may write whatever the
// umask (it is 0775 under umask 002): secret files are refused in a
// directory their group can write (TestSecretFileDir).
func privateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeMode writes body to the file name in dir, with exactly mode
// whatever the umask, and returns its path.
func writeMode(t *testing.T, dir, name, body string, mode fs.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// secretConfig is a config naming the secret files in dir, each written
// with mode: the Redis password (line 3), the TLS key (7), the API token
// (9). The TLS certificate is 0644: it is no secret.
func secretConfig(t *testing.T, dir string, mode fs.FileMode) (f *File, pw, key, tok string) {
	t.Helper()
	certPEM, keyPEM := testCert(t)
	pw = writeMode(t, dir, "pw", "redis-pw\n", mode)
	cert := writeMode(t, dir, "cert.pem", certPEM, 0o644)
	key = writeMode(t, dir, "key.pem", keyPEM, mode)
	tok = writeMode(t, dir, "tok", "s3cret-API-token-never-shown\n", mode)
	return mustParse(t, yamlText(fmt.Sprintf(`
redis:
	addrs: ["redis.test:6380"]
	password_file: %s
	tls:
		enabled: true
		cert_file: %s
		key_file: %s
http:
	api_token_file: %s
`, pw, cert, key, tok))), pw, key, tok
}

// A secret file others can write is refused, one any user can read is a
// warning, one its group can read is fine; real files with real modes
// (the bits are what Stat says, also for root, whom they do not stop).
func TestSecretFileModes(t *testing.T) {
	tests := []struct {
		mode    fs.FileMode
		refused string // how the error says it, "" when read
		warned  bool
	}{
		{0o600, "", false},
		{0o400, "", false},
		{0o640, "", false}, // its group may read: how services share a secret
		{0o644, "", true},  // a Kubernetes secret volume's default
		{0o444, "", true},
		{0o620, "writable by group (mode 0620)", false},
		{0o602, "writable by others (mode 0602)", false},
		{0o666, "writable by group and others (mode 0666)", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%04o", uint32(tt.mode)), func(t *testing.T) {
			f, pw, key, tok := secretConfig(t, privateDir(t), tt.mode)
			var wantStore, wantTok, wantWarn []string
			if tt.refused != "" {
				wantStore = []string{
					"c.yaml:3: redis.password_file: " + pw + " is " + tt.refused + ": they could replace the Redis password; chmod 600 " + pw,
					"c.yaml:7: redis.tls.key_file: " + key + " is " + tt.refused + ": they could replace the TLS private key; chmod 600 " + key,
				}
				wantTok = []string{"c.yaml:9: http.api_token_file: " + tok + " is " + tt.refused + ": they could replace the API token; chmod 600 " + tok}
			}
			if tt.warned {
				mode := fmt.Sprintf("(mode %04o)", uint32(tt.mode))
				wantWarn = []string{
					"c.yaml:3: redis.password_file: " + pw + " is readable by others " + mode + ": any user on the host can read the Redis password; chmod 600 " + pw,
					"c.yaml:7: redis.tls.key_file: " + key + " is readable by others " + mode + ": any user on the host can read the TLS private key; chmod 600 " + key,
					"c.yaml:9: http.api_token_file: " + tok + " is readable by others " + mode + ": any user on the host can read the API token; chmod 600 " + tok,
				}
			}
			st, err := f.Store(nil, nil)
			if diff := cmp.Diff(errLines(err), wantStore); diff != "" {
				t.Errorf("Store errors (-got +want):\n%s", diff)
			}
			if err == nil && (st.Password != "redis-pw" || st.TLS == nil || len(st.TLS.Certificates) != 1) {
				t.Errorf("Store read password %q, TLS %+v", st.Password, st.TLS)
			}
			token, err := f.APIToken(nil, nil)
			if diff := cmp.Diff(errLines(err), wantTok); diff != "" {
				t.Errorf("APIToken errors (-got +want):\n%s", diff)
			}
			if err == nil && token != "s3cret-API-token-never-shown" {
				t.Errorf("APIToken = %q", token)
			}
			var me *ModeError
			if err != nil && (!errors.As(err, &me) || !me.Writable() || me.Path != tok) {
				t.Errorf("APIToken error unwraps to %+v; want a writable *ModeError of %s", me, tok)
			}
			var warns []string
			for _, w := range f.Warnings() {
				warns = append(warns, w.Error())
				if me := (*ModeError)(nil); !errors.As(w, &me) || me.Writable() || me.Mode != tt.mode {
					t.Errorf("warning %v unwraps to %+v; want a readable *ModeError", w, me)
				}
			}
			if diff := cmp.Diff(warns, wantWarn); diff != "" {
				t.Errorf("Warnings (-got +want):\n%s", diff)
			}
		})
	}
}

// The mode of the file read counts, not a link's: Kubernetes mounts
// secrets as links to links. The fix quotes a path that needs it.
func TestSecretFileModeLinksAndQuoting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's secret")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	target := writeMode(t, dir, "token", "s3cret-API-token-never-shown\n", 0o644)
	link := filepath.Join(dir, "tok")
	if err := os.Symlink("token", link); err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, "http:\n  api_token_file: "+link+"\n")
	if _, err := f.APIToken(nil, nil); err != nil {
		t.Fatalf("APIToken: %v", err)
	}
	want := []string{"c.yaml:2: http.api_token_file: " + link + " is readable by others (mode 0644): any user on the host can read the API token; chmod 600 '" +
		strings.ReplaceAll(link, "'", `'\''`) + "'"}
	var got []string
	for _, w := range f.Warnings() {
		got = append(got, w.Error())
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Warnings (-got +want):\n%s", diff)
	}
	if err := os.Chmod(target, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := f.APIToken(nil, nil); err == nil || !strings.Contains(err.Error(), "is writable by group and others (mode 0666)") {
		t.Errorf("APIToken through a link to a 0666 file: %v; want it refused", err)
	}
	if ws := f.Warnings(); len(ws) != 0 {
		t.Errorf("Warnings = %v; want none: the file is refused", ws)
	}
}

// Only the secret files in force are looked at: not the password file
// beside password_env (a load error), nor the TLS key with TLS off.
func TestSecretFileModeNotInForce(t *testing.T) {
	dir := privateDir(t)
	tok := writeMode(t, dir, "tok", "s3cret-API-token-never-shown\n", 0o666)
	f, err := ParsePartial("c.yaml", []byte("http:\n  api_token_env: TOK\n  api_token_file: "+tok+"\n"))
	if err == nil {
		t.Fatal("both api_token_env and api_token_file: accepted")
	}
	if ws := f.Warnings(); len(ws) != 0 {
		t.Errorf("Warnings = %v; want none", ws)
	}
	if _, err := f.APIToken(nil, nil); err != nil {
		t.Errorf("APIToken = %v; want nothing more than the load error", err)
	}
}

// Every key that names a file is a secret file, or says why not here,
// so that a secret file added to the schema is not left unchecked.
func TestSecretFilesComplete(t *testing.T) {
	notSecret := map[string]string{
		"redis.tls.ca_file":   "public certificates",
		"redis.tls.cert_file": "a public certificate (its key is key_file)",
		"items.file":          "item IDs",
		"sink.file.path":      "where the file sink writes",
	}
	keys, _ := schemaKeys()
	for _, k := range keys {
		name := k[strings.LastIndexByte(k, '.')+1:]
		section := slices.ContainsFunc(keys, func(o string) bool { return strings.HasPrefix(o, k+".") })
		isFile := !section && (name == "file" || name == "path" || strings.HasSuffix(name, "_file"))
		secret := slices.ContainsFunc(secretFiles, func(s struct{ field, secret string }) bool { return s.field == k })
		_, other := notSecret[k]
		if isFile && !secret && !other {
			t.Errorf("%s names a file: add it to secretFiles, or to notSecret here with why", k)
		}
	}
	for _, s := range secretFiles {
		if !slices.Contains(keys, s.field) {
			t.Errorf("secretFiles has %s, not a key", s.field)
		}
	}
}

// The CA certificate is public, but says which Redis to trust: others
// may read it, not write it (an outside trial: a 0666 ca_file was
// taken, so anyone on the host could vouch for a Redis of their own).
func TestCAFileMode(t *testing.T) {
	certPEM, _ := testCert(t)
	for mode, refused := range map[fs.FileMode]string{
		0o644: "",
		0o664: "writable by group (mode 0664)",
		0o666: "writable by group and others (mode 0666)",
	} {
		ca := writeMode(t, privateDir(t), "ca.pem", certPEM, mode)
		f := mustParse(t, yamlText(fmt.Sprintf(`
redis:
	addrs: ["redis.test:6380"]
	tls:
		enabled: true
		ca_file: %s
`, ca)))
		_, err := f.Store(nil, nil)
		var want []string
		if refused != "" {
			want = []string{"c.yaml:5: redis.tls.ca_file: " + ca + " is " + refused + ": they could replace the CA certificate; chmod go-w " + ca}
		}
		if diff := cmp.Diff(errLines(err), want); diff != "" {
			t.Errorf("ca_file %04o: Store errors (-got +want):\n%s", uint32(mode), diff)
		}
		if ws := f.Warnings(); len(ws) != 0 {
			t.Errorf("ca_file %04o: warnings %v", uint32(mode), ws)
		}
	}
}

// A configuration file that users other than its owner can write is
// refused (an outside trial: a 0666 config.yaml was taken, and it names
// the commands syncd runs). LoadPartial still gives the File and the
// file's other problems after it, for validate.
func TestConfigFileMode(t *testing.T) {
	const why = ": they could replace the configuration, which names the programs syncd runs (sink.exec.command, items.command) and where it sends data (sink.http.url); chmod go-w "
	for _, tt := range []struct {
		mode    fs.FileMode
		refused string
	}{
		{0o600, ""},
		{0o644, ""}, // a ConfigMap's, and a checkout's under umask 022
		{0o640, ""},
		{0o444, ""},
		{0o664, "writable by group (mode 0664)"}, // a checkout's under umask 002
		{0o646, "writable by others (mode 0646)"},
		{0o666, "writable by group and others (mode 0666)"},
	} {
		dir := t.TempDir()
		path := writeMode(t, dir, "c.yaml", "engine:\n  workerz: 3\n", tt.mode)
		want := []string{path + ":2: engine.workerz: unknown key (did you mean workers?)"}
		if tt.refused != "" {
			want = append([]string{path + ": " + tt.refused + why + path}, want...)
		}
		f, err := LoadPartial(path)
		if diff := cmp.Diff(errLines(err), want); diff != "" {
			t.Errorf("%04o: LoadPartial errors (-got +want):\n%s", uint32(tt.mode), diff)
		}
		if f == nil {
			t.Errorf("%04o: LoadPartial gave no File", uint32(tt.mode))
		}
		var me *ModeError
		if got := errors.As(err, &me); got != (tt.refused != "") || got && (me.Path != path || me.Mode != tt.mode || !me.Writable()) {
			t.Errorf("%04o: error unwraps to %+v", uint32(tt.mode), me)
		}

		path = writeMode(t, dir, "valid.yaml", "engine:\n  workers: 3\n", tt.mode)
		f, err = Load(path)
		want = nil
		if tt.refused != "" {
			want = []string{path + ": " + tt.refused + why + path}
		}
		if diff := cmp.Diff(errLines(err), want); diff != "" || (f == nil) != (tt.refused != "") {
			t.Errorf("%04o: Load = %v, errors (-got +want):\n%s", uint32(tt.mode), f, diff)
		}
	}
}

// A ConfigMap mounted by Kubernetes: the name is a link to ..data/name,
// ..data a link to a directory of root's, the file in it 0644, the
// volume's root 0777 on a read-only mount (readOnlyFS; a test cannot
// mount one, so the root here is 0755). The file's mode counts, through
// the links, and the error names the path as given. The same root
// writable by others, not read-only, is refused: whoever can write it
// can put a file of their own in the config's place (a second outside
// trial had a config in a 0777 directory taken).
func TestConfigFileModeConfigMap(t *testing.T) {
	root := t.TempDir()
	ts := filepath.Join(root, "..2026_11_27_20_26_00.123456789")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	file := writeMode(t, ts, "config.yaml", "engine:\n  workers: 3\n", 0o644)
	path := filepath.Join(root, "config.yaml")
	for _, l := range [][2]string{{filepath.Base(ts), filepath.Join(root, "..data")}, {"..data/config.yaml", path}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if f, err := Load(path); err != nil || f.Engine().Workers != 3 {
		t.Fatalf("Load of a ConfigMap's file: %v", err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if want := path + ": in " + root + ", which group and others can write (mode 0777, no sticky bit): they could replace the configuration"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load from a 0777 directory: %v; want %q...", err, want)
	}
	var de *DirError
	if !errors.As(err, &de) || de.Dir != root {
		t.Errorf("error unwraps to %+v, want a DirError naming %s", de, root)
	}
	if err := os.Chmod(root, os.ModeSticky|0o777); err != nil { // sticky, as /tmp: others cannot replace the file
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Errorf("Load from a 1777 directory: %v", err)
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if want := path + ": writable by group and others (mode 0666): they could replace the configuration"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load through links to a 0666 file: %v; want %q...", err, want)
	}
	// A device's bits are not the file's: /dev/null (0666) is empty.
	if _, err := Load("/dev/null"); err != nil {
		t.Errorf("Load(/dev/null): %v", err)
	}
}

// A secret or trust file in a directory that users other than its owner
// can write, without the sticky bit, is refused whatever its own mode:
// they could rename it away and put theirs in its place. The directory
// of the path as named counts, and the file's through links.
func TestSecretFileDir(t *testing.T) {
	const rest = ": they could replace the %s; chmod go-w %s, or keep the file in a directory only its owner can write"
	for _, tt := range []struct {
		mode    fs.FileMode
		refused string // how the error says it, "" when read
	}{
		{0o700, ""},
		{0o755, ""},
		{0o777 | fs.ModeSticky, ""}, // /tmp's: others may not rename what is not theirs
		{0o770 | fs.ModeSticky, ""},
		{0o775, "which group can write (mode 0775, no sticky bit)"},
		{0o757, "which others can write (mode 0757, no sticky bit)"},
		{0o777, "which group and others can write (mode 0777, no sticky bit)"},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			f, pw, key, tok := secretConfig(t, dir, 0o600)
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			var wantStore, wantTok []string
			if tt.refused != "" {
				wantStore = []string{
					"c.yaml:3: redis.password_file: " + pw + " is in " + dir + ", " + tt.refused + fmt.Sprintf(rest, "Redis password", dir),
					"c.yaml:7: redis.tls.key_file: " + key + " is in " + dir + ", " + tt.refused + fmt.Sprintf(rest, "TLS private key", dir),
				}
				wantTok = []string{"c.yaml:9: http.api_token_file: " + tok + " is in " + dir + ", " + tt.refused + fmt.Sprintf(rest, "API token", dir)}
			}
			_, err := f.Store(nil, nil)
			if diff := cmp.Diff(errLines(err), wantStore); diff != "" {
				t.Errorf("Store errors (-got +want):\n%s", diff)
			}
			_, err = f.APIToken(nil, nil)
			if diff := cmp.Diff(errLines(err), wantTok); diff != "" {
				t.Errorf("APIToken errors (-got +want):\n%s", diff)
			}
			var de *DirError
			if err != nil && (!errors.As(err, &de) || de.Dir != dir || de.Mode != tt.mode.Perm()) {
				t.Errorf("APIToken error unwraps to %+v; want a *DirError of %s", de, dir)
			}
			if ws := f.Warnings(); len(ws) != 0 {
				t.Errorf("Warnings = %v; want none", ws)
			}
		})
	}
}

// Through links: a link in a directory others can write is refused, as
// a link to a file in one is; the CA certificate is held to it too.
func TestSecretFileDirLinks(t *testing.T) {
	safe, open := privateDir(t), t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	certPEM, _ := testCert(t)
	for _, tt := range []struct{ file, link string }{
		{filepath.Join(safe, "ca.pem"), filepath.Join(open, "ca-link.pem")},
		{filepath.Join(open, "ca.pem"), filepath.Join(safe, "ca-link.pem")},
	} {
		writeMode(t, filepath.Dir(tt.file), filepath.Base(tt.file), certPEM, 0o644)
		if err := os.Symlink(tt.file, tt.link); err != nil {
			t.Fatal(err)
		}
		f := mustParse(t, "redis:\n  addrs: [\"redis.test:6380\"]\n  tls:\n    enabled: true\n    ca_file: "+tt.link+"\n")
		_, err := f.Store(nil, nil)
		want := []string{"c.yaml:5: redis.tls.ca_file: " + tt.link + " is in " + open + ", which group and others can write (mode 0777, no sticky bit): they could replace the CA certificate; chmod go-w " +
			open + ", or keep the file in a directory only its owner can write"}
		if diff := cmp.Diff(errLines(err), want); diff != "" {
			t.Errorf("%s -> %s: Store errors (-got +want):\n%s", tt.link, tt.file, diff)
		}
	}
}

// A secret or trust file owned by a user other than root and the one
// syncd runs as is a warning, not refused: that user could replace it.
// As root the files are given to another user; otherwise syncd is made
// to run as another user than the files' owner.
func TestSecretFileOwner(t *testing.T) {
	dir := privateDir(t)
	_, pw, key, tok := secretConfig(t, dir, 0o600)
	certPEM, _ := testCert(t)
	ca := writeMode(t, dir, "ca.pem", certPEM, 0o644)
	owner := os.Geteuid()
	if owner == 0 {
		owner = 4242
		for _, p := range []string{pw, key, tok, ca} {
			if err := os.Chown(p, owner, -1); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		t.Cleanup(func() { euid = os.Geteuid })
		euid = func() int { return owner + 1 }
	}
	f := mustParse(t, yamlText(fmt.Sprintf(`
redis:
	addrs: ["redis.test:6380"]
	password_file: %s
	tls:
		enabled: true
		cert_file: %s
		key_file: %s
		ca_file: %s
http:
	api_token_file: %s
`, pw, filepath.Join(dir, "cert.pem"), key, ca, tok)))
	name := func(uid int) string {
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			return u.Username
		}
		return ""
	}
	runs, chown := "root, the user syncd runs as", "root"
	if me := euid(); me != 0 {
		runs, chown = "root or "+userText(name(me), me)+", the user syncd runs as", name(me)
		if chown == "" {
			chown = strconv.Itoa(me)
		}
	}
	var want []string
	for _, w := range [][3]string{{"3: redis.password_file", pw, "Redis password"}, {"7: redis.tls.key_file", key, "TLS private key"},
		{"8: redis.tls.ca_file", ca, "CA certificate"}, {"10: http.api_token_file", tok, "API token"}} {
		want = append(want, "c.yaml:"+w[0]+": "+w[1]+" is owned by "+userText(name(owner), owner)+", not by "+runs+
			": that user could replace the "+w[2]+", or let any user read it; chown "+chown+" "+w[1])
	}
	if _, err := f.Store(nil, nil); err != nil {
		t.Errorf("Store: %v", err)
	}
	if _, err := f.APIToken(nil, nil); err != nil {
		t.Errorf("APIToken: %v", err)
	}
	var got []string
	for _, w := range f.Warnings() {
		got = append(got, w.Error())
		if oe := (*OwnerError)(nil); !errors.As(w, &oe) || oe.Owner != owner || oe.User != euid() {
			t.Errorf("warning %v unwraps to %+v; want an *OwnerError", w, oe)
		}
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Warnings (-got +want):\n%s", diff)
	}
}

// A directory above the file's own counts too: whoever can write /srv
// can rename /srv/syncd away and make their own, whatever the modes
// below. The nearest such directory is named; a sticky one (as /tmp) is
// fine, as it is for the file's own.
func TestSecretFileDirAbove(t *testing.T) {
	const rest = ": they could rename the directories below it away and put their own in their place, and so replace the %s; chmod go-w %s, or keep the file where only its owner can write each directory on the way"
	for _, tt := range []struct {
		mode    fs.FileMode
		refused string
	}{
		{0o755, ""},
		{0o777 | fs.ModeSticky, ""},
		{0o775, "which group can write (mode 0775, no sticky bit)"},
		{0o777, "which group and others can write (mode 0777, no sticky bit)"},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			top := privateDir(t)
			open := filepath.Join(top, "srv")
			dir := filepath.Join(open, "syncd", "etc")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(open, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, _, _, tok := secretConfig(t, dir, 0o600)
			f := mustParse(t, "http:\n  api_token_file: "+tok+"\n")
			_, err := f.APIToken(nil, nil)
			var want []string
			if tt.refused != "" {
				want = []string{"c.yaml:2: http.api_token_file: " + tok + " is under " + open + ", " + tt.refused + fmt.Sprintf(rest, "API token", open)}
			}
			if diff := cmp.Diff(errLines(err), want); diff != "" {
				t.Errorf("APIToken errors (-got +want):\n%s", diff)
			}
			// The configuration file is held to the same rule.
			cfg := writeMode(t, dir, "syncd.yaml", "", 0o644)
			_, err = Load(cfg)
			var de *DirError
			if got := errors.As(err, &de); got != (tt.refused != "") || got && (de.Dir != open || !de.Above) {
				t.Errorf("Load(%s) = %v; want a *DirError of %s: %v", cfg, err, open, tt.refused != "")
			}
		})
	}
}

// A program syncd runs (sink.exec.command, items.command) that users
// other than its owner can write, or replace through a directory on the
// way, is refused, naming the key: it would run their code as syncd's
// user. One found through PATH is looked at where it was found; one that
// is not there is not this check's to report.
func TestProgramErrors(t *testing.T) {
	top := privateDir(t)
	safe := filepath.Join(top, "safe")
	open := filepath.Join(top, "open")
	for _, d := range []string{safe, filepath.Join(open, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	const script = "#!/bin/sh\nexit 0\n"
	good := writeMode(t, safe, "good", script, 0o755)
	groupW := writeMode(t, safe, "groupw", script, 0o775)
	under := writeMode(t, filepath.Join(open, "bin"), "under", script, 0o755)
	t.Setenv("PATH", safe+string(os.PathListSeparator)+os.Getenv("PATH"))
	parse := func(exec, items string) *File {
		return mustParse(t, yamlText(fmt.Sprintf("items:\n\tcommand: [%q]\nsink:\n\ttype: exec\n\texec:\n\t\tcommand: [%q]\n", items, exec)))
	}
	writable := func(field, path string) string {
		return "c.yaml:" + map[string]string{"items.command": "2", "sink.exec.command": "6"}[field] + ": " + field + ": " + path +
			" is writable by group (mode 0775): they could replace the program syncd runs; chmod go-w " + path
	}
	underOpen := func(field, path string) string {
		return "c.yaml:" + map[string]string{"items.command": "2", "sink.exec.command": "6"}[field] + ": " + field + ": " + path +
			" is under " + open + ", which group and others can write (mode 0777, no sticky bit): they could rename the directories below it away and put their own in their place, and so replace the program syncd runs; chmod go-w " +
			open + ", or keep the file where only its owner can write each directory on the way"
	}
	// A relative command with sink.exec.dir is found as the kernel finds
	// it: "lnk/../prog" is the prog beside lnk's target, in the open
	// directory, not the one beside lnk (an outside trial: the check
	// looked at the cleaned path, and syncd ran the other).
	t.Run("dot-dot after a link, relative to dir", func(t *testing.T) {
		dir := filepath.Join(top, "ok")
		sub := filepath.Join(open, "bad", "sub")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(open, "bad"), 0o777); err != nil {
			t.Fatal(err)
		}
		writeMode(t, dir, "prog", script, 0o755)
		writeMode(t, filepath.Join(open, "bad"), "prog", script, 0o755)
		if err := os.Symlink(sub, filepath.Join(dir, "lnk")); err != nil {
			t.Fatal(err)
		}
		f := mustParse(t, yamlText(fmt.Sprintf("sink:\n\ttype: exec\n\texec:\n\t\tcommand: [\"lnk/../prog\"]\n\t\tdir: %s\n", dir)))
		bad := filepath.Join(open, "bad")
		want := []string{"c.yaml:4: sink.exec.command: " + dir + "/lnk/../prog is in " + bad +
			", which group and others can write (mode 0777, no sticky bit): they could replace the program syncd runs; chmod go-w " + bad +
			", or keep the file in a directory only its owner can write"}
		var got []string
		for _, err := range f.ProgramErrors() {
			got = append(got, errLines(err)...)
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("ProgramErrors (-got +want):\n%s", diff)
		}
	})
	for _, tt := range []struct {
		name        string
		exec, items string
		want        []string
	}{
		{"both fine", good, "good", nil},
		{"missing", "/nonexistent/prog", "/nonexistent/list", nil},
		{"writable, through PATH", "groupw", good, []string{writable("sink.exec.command", groupW)}},
		{"writable items program", good, groupW, []string{writable("items.command", groupW)}},
		{"under an open directory", under, under, []string{underOpen("sink.exec.command", under), underOpen("items.command", under)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := parse(tt.exec, tt.items).ProgramErrors()
			var got []string
			for _, err := range errs {
				got = append(got, errLines(err)...)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("ProgramErrors (-got +want):\n%s", diff)
			}
		})
	}
}

// A path with a newline (or another control character) is quoted where
// an error shows it, so that one problem stays one line and a path
// cannot forge another (an outside trial: a program path with a newline
// spread validate's error over three lines). The fix's chmod is quoted
// for bash.
func TestOddPathsQuoted(t *testing.T) {
	top := privateDir(t)
	dir := filepath.Join(top, "we ird\n dir")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := writeMode(t, dir, "pr'og", "#!/bin/sh\nexit 0\n", 0o775)
	f := mustParse(t, yamlText(fmt.Sprintf("sink:\n\ttype: exec\n\texec:\n\t\tcommand: [%q]\n", prog)))
	errs := f.ProgramErrors()
	if len(errs) != 1 {
		t.Fatalf("ProgramErrors = %v; want one", errs)
	}
	want := "c.yaml:4: sink.exec.command: " + strconv.Quote(prog) + " is writable by group (mode 0775): they could replace the program syncd runs; chmod go-w $'" +
		strings.ReplaceAll(strings.ReplaceAll(prog, "\n", `\x0a`), "'", `\'`) + "'"
	if got := errs[0].Error(); got != want {
		t.Errorf("ProgramErrors = %q;\nwant %q", got, want)
	}
	// The quoted fix, run by bash, names the file.
	if _, err := exec.LookPath("bash"); err == nil {
		fix := strings.TrimPrefix(want[strings.Index(want, "chmod go-w "):], "chmod go-w ")
		out, err := exec.Command("bash", "-c", "printf %s "+fix).Output()
		if err != nil || string(out) != prog {
			t.Errorf("bash reads %s as %q (%v); want %q", fix, out, err, prog)
		}
	}
}

// A link's own directory is on the way too: a link in a 0777 directory
// that a 0755 path goes through can be pointed elsewhere by any user (an
// outside trial: safe2/l2 -> w/lnkS -> safe; a user of w swapped lnkS,
// and syncd ran their program as root). Programs, secret files and the
// configuration file are held to it alike; a relative path and .. after
// a link are walked as the kernel walks them.
func TestLinkInOpenDirectory(t *testing.T) {
	top := privateDir(t)
	safe, safe2, w := filepath.Join(top, "safe"), filepath.Join(top, "safe2"), filepath.Join(top, "w")
	for _, d := range []string{filepath.Join(safe, "sub"), safe2, w} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(w, 0o777); err != nil {
		t.Fatal(err)
	}
	writeMode(t, safe, "prog", "#!/bin/sh\nexit 0\n", 0o755)
	tok := writeMode(t, safe, "tok", "s3cret-API-token-never-shown\n", 0o600)
	cfg := writeMode(t, safe, "c.yaml", "", 0o644)
	if err := os.Symlink(safe, filepath.Join(w, "lnkS")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(w, "lnkS"), filepath.Join(safe2, "l2")); err != nil {
		t.Fatal(err)
	}
	under := ", which group and others can write (mode 0777, no sticky bit): they could rename the directories below it away and put their own in their place, and so replace the "
	for _, tt := range []struct{ exec, dir string }{
		{filepath.Join(safe2, "l2", "prog"), ""},
		{"l2/prog", safe2},
		{"l2/sub/../prog", safe2},
	} {
		src := fmt.Sprintf("sink:\n\ttype: exec\n\texec:\n\t\tcommand: [%q]\n", tt.exec)
		path := tt.exec
		if tt.dir != "" {
			src += fmt.Sprintf("\t\tdir: %s\n", tt.dir)
			path = tt.dir + "/" + tt.exec
		}
		var got []string
		for _, err := range mustParse(t, yamlText(src)).ProgramErrors() {
			got = append(got, errLines(err)...)
		}
		want := []string{"c.yaml:4: sink.exec.command: " + path + " is under " + w + under + "program syncd runs; chmod go-w " + w +
			", or keep the file where only its owner can write each directory on the way"}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("%s (dir %q): ProgramErrors (-got +want):\n%s", tt.exec, tt.dir, diff)
		}
	}
	// A secret file and the configuration file through the same link.
	linked := filepath.Join(safe2, "l2", filepath.Base(tok))
	_, err := mustParse(t, "http:\n  api_token_file: "+linked+"\n").APIToken(nil, nil)
	if want := linked + " is under " + w + under + "API token"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("APIToken through a link in %s: %v; want %q", w, err, want)
	}
	var de *DirError
	if _, err := Load(filepath.Join(safe2, "l2", filepath.Base(cfg))); !errors.As(err, &de) || de.Dir != w {
		t.Errorf("Load through a link in %s: %v; want its *DirError", w, err)
	}
	// The same chain with w 0755 is fine.
	if err := os.Chmod(w, 0o755); err != nil {
		t.Fatal(err)
	}
	if errs := mustParse(t, yamlText(fmt.Sprintf("sink:\n\ttype: exec\n\texec:\n\t\tcommand: [%q]\n", filepath.Join(safe2, "l2", "prog")))).ProgramErrors(); len(errs) != 0 {
		t.Errorf("ProgramErrors with every directory 0755: %v", errs)
	}
}

// A fix's path that starts with - is not read as chmod's options (a
// second outside trial: chmod 600 -pw failed with "invalid option").
func TestFixOfDashPath(t *testing.T) {
	if got := (&ModeError{Path: "-pw", Mode: 0o644}).Fix(); got != "chmod 600 ./-pw" {
		t.Errorf("Fix = %q, want chmod 600 ./-pw", got)
	}
}
