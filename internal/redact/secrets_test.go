package redact

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSecrets(t *testing.T) {
	s := NewSecrets("s3cret-value", "ab", " spaced-out ")
	if got := s.Clean("a s3cret-value b s3cret%2Dvalue ab spaced-out"); got != "a [redacted] b s3cret%2Dvalue ab [redacted]" {
		t.Errorf("Clean = %q", got)
	}
	for tail, want := range map[string]string{
		"…et-value end":  "… end",         // the end of a secret at the start goes
		"…e end":         "… end",         // even one byte of it
		"…plain end":     "…plain end",    // nothing of a secret
		"no cut, value":  "no cut, value", // not a tail: nothing dropped
		"…-out":          "…",             // all of it a piece
		"…\x80\x80x end": "…x end",        // no half UTF-8 sequence first
	} {
		if got := s.CleanTail(tail); got != want {
			t.Errorf("CleanTail(%q) = %q, want %q", tail, got, want)
		}
	}
	for in, want := range map[string]string{
		"token=abc password=x1 Bearer zz9Tok key=[redacted]": "token=xxxxx password=xxxxx Bearer xxxxx key=[redacted]",
		// The forms an operator's trial found shown.
		`quoted token='quotTOK' password="quot PW"`:     `quoted token='xxxxx' password="xxxxx"`,
		`json {"token":"jsonTOK","password": "jsonPW"}`: `json {"token":"xxxxx","password": "xxxxx"}`,
		"yaml password: yamlPW\nnext":                   "yaml password: xxxxx\nnext",
		"flag --password flagPW --verbose":              "flag --password xxxxx --verbose",
		"Authorization: Basic dXNlcjpwdw==":             "Authorization: Basic xxxxx",
		// Not secrets: author, idempotency_key, a key in prose.
		"author=ann idempotency_key=k1 monkey=m":        "author=ann idempotency_key=k1 monkey=m",
		"api_key=k2 apikey=k3 AWS_SECRET_ACCESS_KEY=k4": "api_key=xxxxx apikey=xxxxx AWS_SECRET_ACCESS_KEY=xxxxx",
	} {
		got := Pairs(in)
		if got != want {
			t.Errorf("Pairs(%q) = %q, want %q", in, got, want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", in, got, again)
		}
	}
	// A cut tail loses its first line, which may hold the rest of a
	// credential whose name was cut off; one with no newline shows
	// nothing.
	for in, want := range map[string]string{
		"…=CUTSECRETabc rest token=t1":                     "…",
		"…=CUTSECRETabc rest\nnext token=t1":               "…\nnext token=xxxxx",
		"…ce:URLCUTpass@h.example/x and more\nmore":        "…\nmore",
		"…BEARERCUT0987654321":                             "…",
		"whole text, not cut: password=pw here":            "whole text, not cut: password=xxxxx here",
		"…ssword:\n  NEXTLINEpw\nrest":                     "…\n  xxxxx\nrest",
		"…assword\n= NEXTLINEpw rest":                      "…\n= xxxxx rest",
		"…ine of prose\nerror: exit 1\nTraceback:\n  File": "…\nerror: exit 1\nTraceback:\n  File",
		// A password with an @ and then a / in it (an outside trial saw
		// redis://ss/w0rd@host).
		"url redis://:p@ss/w0rd@host:6379/0 x":     "url redis://host:6379/0 x",
		"…x\nconnect redis://user:p@ss/w0rd@h:1/0": "…\nconnect redis://h:1/0",
		// A DSN under a secret's name keeps its host, as Pairs shows it,
		// then without its user information, as URLs' Display does.
		"dsn=postgres://app:pw@db:5432/prod?password=pw2 failed": "dsn=postgres://db:5432/prod?password=xxxxx failed",
	} {
		if got := Tail(in, NewSecrets()); got != want {
			t.Errorf("Tail(%q) = %q, want %q", in, got, want)
		}
	}
}

// A tail cut inside what marks a credential (AUTH, -u, password:,
// Authorization: Bearer) shows no part of the credential after it,
// wherever the cut falls before it (an outside tester saw
// "… s3cretQ1" for redis-cli AUTH s3cretQ1 cut inside AUTH), and the
// lines after the cut one show; so does a cut line's end after a clause
// that follows the credential.
func TestTailCutKeyword(t *testing.T) {
	for _, tt := range []struct{ line, secret string }{
		{"redis-cli AUTH s3cretQ1", "s3cretQ1"},
		{"AUTH bob s3cretQ8", "s3cretQ8"},
		{"MIGRATE t 6379 k 0 5000 AUTH2 bob s3cretQ10", "s3cretQ10"},
		{"Authorization: Bearer s3cretQ2", "s3cretQ2"},
		{"password: s3cretQ5", "s3cretQ5"},
		{"curl -u carol:s3cretQ3 https://h/", "s3cretQ3"},
		{"smbclient -U alice%s3cretQ9 //srv/x", "s3cretQ9"},
		{`{"password": "s3cretQ7"}`, "s3cretQ7"},
		{"password:\n  s3cretQ6", "s3cretQ6"},
		{"db:\n  password: |-\n    s3cretQ11", "s3cretQ11"},
		{"key: !!binary >\n\n  s3cretQ12\n  more", "s3cretQ12"},
		// What a cut line's first clause may hold: a list of auth-params,
		// a header's scheme and credential, a quoted string with a clause's
		// marks in it, a JSON key, a private key's body on one line.
		{`Authorization: Digest username="u", realm="r", response="s3cretQ13"`, "s3cretQ13"},
		{"Authorization: token s3cretQ14", "s3cretQ14"},
		{`{"password":"a: b, s3cretQ15"}`, "s3cretQ15"},
		{`"db_password" : 's3cretQ16'`, "s3cretQ16"},
		{`{"k":"-----BEGIN PRIVATE KEY-----\nProc-Type: 4,x\nMIIEs3cretQ17\n-----END PRIVATE KEY-----\n"}`, "s3cretQ17"},
		{"curl -sf -u carol:s3cretQ18 https://h/", "s3cretQ18"},
		{`loaded -----BEGIN PRIVATE KEY-----\nProc-Type: 4,x\nMIIEs3cretQ19\n-----END PRIVATE KEY-----`, "s3cretQ19"},
	} {
		at := strings.Index(tt.line, tt.secret)
		for k := 1; k < at; k++ {
			for _, next := range []string{"", "\nnext line: exit 1", ", then: exit 1"} {
				if strings.HasPrefix(next, ",") && strings.Contains(tt.line, "\n") {
					continue // a block's last line goes with it
				}
				tail := "…" + strings.TrimSpace(tt.line[k:]+next)
				got := Tail(tail, NewSecrets())
				if strings.Contains(got, tt.secret[1:]) {
					t.Errorf("Tail(%q) = %q: the secret shows", tail, got)
				}
				if !strings.HasSuffix(got, strings.TrimPrefix(next, ", then:")) {
					t.Errorf("Tail(%q) = %q: want the line after the cut one, or the cut line's end, whole", tail, got)
				}
			}
		}
	}
}

// A tail that is one cut line, longer than the tail, shows what follows
// its first clause (where a credential whose name the cut took ends),
// where it showed "…" alone (the end of an error an operator needs).
// A line with no clause end still shows nothing: its words may all be
// the password of a Redis AUTH cut off.
func TestTailCutLine(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"…xxxxxxxx connect: connection refused", "… connection refused"},
		{`…ng","level":"error","msg":"dial tcp 10.0.0.1:6379: connect: connection refused"}`, `…"level":"error","msg":"dial tcp 10.0.0.1:6379: connect: connection refused"}`},
		{"…n't connect: can't find it, retry", "… can't find it, retry"},
		{"…H bob s3cretQ8: WRONGPASS invalid username-password pair", "… WRONGPASS invalid username-password pair"},
		// The first value after a name the cut may have cut into.
		{"…ssword: s3cretQ5 and more", "… xxxxx and more"},
		{`…ssword":"s3cretQ5","user":"bob"}`, `…"xxxxx","user":"bob"}`},
		{"…ization: Negotiate s3cretQ14 rest, done", "… Negotiate xxxxx rest, done"},
		// Any word may be the end of a secret's name, or follow one the
		// cut took (KEY00: cut to 00:, FuzzTailCut), but a word that says
		// the value is about a secret (TOKEN_TTL:).
		{"…ing: connection refused", "… xxxxx refused"},
		{"…00: Zq9sEcr3tW0rdX0", "… xxxxx"},
		{"…_TTL: 3600 s", "… 3600 s"},
		// Past a quoted string, a list of auth-params, a key's body.
		{`…a: b, s3cretQ15","msg":"boom"}`, `…"msg":"boom"}`},
		{`…ername="u", realm="r", response="s3cretQ13" x, done`, "… done"},
		{`…IEs3cretQ17\n-----END PRIVATE KEY-----\n","msg":"x"}`, `…"msg":"x"}`},
		{`…c-Type: 4,x\nMIIEs3cretQ19\n-----END PRIVATE KEY----- loaded, done`, "… loaded, done"},
		// The rest of a command whose name was cut: any password flag.
		{"…rl -v: x -u carol:s3cretQ3 -a s3cretQ4 https://h/; curl -a y", "… x -u xxxxx -a xxxxx https://h/; curl -a y"},
		// Credentials named after the clause, as anywhere.
		{"…x; token=t1 Authorization: Bearer s3cretQ2", "… token=xxxxx Authorization: Bearer xxxxx"},
		// No clause end.
		{"…ééé THE END", "…"},
		{"…=CUTSECRETabc rest token=t1", "…"},
		{`…"a, b" c`, "…"},
	} {
		if got := Tail(tt.in, NewSecrets()); got != tt.want {
			t.Errorf("Tail(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// user:password@host without a scheme shows no password (an outside
// tester saw "user alice:s3cretW12@host failed" whole), nor does a URL's
// user information; an address, a URI without a password, an image's
// digest and a package URL stay.
func TestPairsUserPassword(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"user alice:s3cretW12@host failed", "user alice:xxxxx@host failed"},
		{"connect alice:pw@10.0.0.1:5432: refused", "connect alice:xxxxx@10.0.0.1:5432: refused"},
		{"dial u:p@ss@tcp(127.0.0.1:3306)/db x=bob:pw@[::1]:6379", "dial u:xxxxx@tcp(127.0.0.1:3306)/db x=bob:xxxxx@[::1]:6379"},
		{"'alice:pw@h.example'\nbob:pw2@h2/x", "'alice:xxxxx@h.example'\nbob:xxxxx@h2/x"},
		// A URL's user information, as URLs hides it with Mask (a password
		// with an @ and a / in it too); its query is URLs'.
		{"connect redis://user:p@ss/w0rd@h:1/0 and https://u:pw@h/x?page=2&k=v", "connect redis://xxxxx@h:1/0 and https://xxxxx@h/x?page=2&k=v"},
		{"https://h/a@b https://u@h#a@b A://[@!:#@0", "https://h/a@b https://xxxxx@h#a@b A://xxxxx@0"},
		// Not a password.
		{"mailto:ann@example.com sip:ann@h.example acct:ann@h", "mailto:ann@example.com sip:ann@h.example acct:ann@h"},
		{"nginx:1.25@sha256:0123abcdef pkg:npm/lodash@4.17.21", "nginx:1.25@sha256:0123abcdef pkg:npm/lodash@4.17.21"},
		{"git@github.com:org/repo.git ann@example.com: mailbox full", "git@github.com:org/repo.git ann@example.com: mailbox full"},
		// A mail's header and SMTP's command before an address (an outside
		// trial saw Cc:xxxxx@example.com); not one of a name an account may
		// have, nor before a database's host.
		{"Cc:bob@example.com\nTo:<ann@mail.example.org>, Reply-To:x.y+z@h.example", "Cc:bob@example.com\nTo:<ann@mail.example.org>, Reply-To:x.y+z@h.example"},
		{"> RCPT TO:<ann@example.com>\n> MAIL FROM:<a@b.example> SIZE=12", "> RCPT TO:<ann@example.com>\n> MAIL FROM:<a@b.example> SIZE=12"},
		{"sender:pw1@smtp.example to:pw2@db to:pw3@db.example:5432 cc:p:w@h.example", "sender:xxxxx@smtp.example to:xxxxx@db to:xxxxx@db.example:5432 cc:xxxxx@h.example"},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// A known secret is hidden in the forms a command or a target prints it
// in: escaped in JSON (encoding/json's, JSON.stringify's, Python's), in
// a Go-quoted string, in a URL; an outside trial saw
// {"pw":"Pw0rd\u0026\u003cx\u003e\"q\""} whole. The text around it stays.
func TestSecretsEscaped(t *testing.T) {
	s := NewSecrets(`Pw0rd&<x>"q"`, "pässwörd\\1", "tab\tpw😀")
	for _, tt := range []struct{ in, want string }{
		{`{"pw":"Pw0rd\u0026\u003cx\u003e\"q\""}`, `{"pw":"[redacted]"}`},
		{`{"pw":"Pw0rd&<x>\"q\""} (JSON.stringify)`, `{"pw":"[redacted]"} (JSON.stringify)`},
		{`env: "Pw0rd&<x>\"q\"" ok`, `env: "[redacted]" ok`},
		{"url ?p=Pw0rd%26%3Cx%3E%22q%22&page=2", "url ?p=[redacted]&page=2"},
		{"raw Pw0rd&<x>\"q\" end", "raw [redacted] end"},
		{`py {"pw": "p\u00e4ssw\u00f6rd\\1"}`, `py {"pw": "[redacted]"}`},
		{`go "p\u00e4ssw\u00f6rd\\1"`, `go "[redacted]"`},
		{`{"t":"tab\tpw😀"} {"t":"tab\tpw\ud83d\ude00"} "tab\tpw\U0001f600"`, `{"t":"[redacted]"} {"t":"[redacted]"} "[redacted]"`},
		// Not secrets: other values, and the pieces of one.
		{`{"pw":"Pw0rd","x":"\u0026\u003c"}`, `{"pw":"Pw0rd","x":"\u0026\u003c"}`},
	} {
		if got := s.Clean(tt.in); got != tt.want {
			t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// SecretName goes by a name's words, split at _ - . and camelCase: a
// word that names a secret (key, auth, pwd) makes the name one, a longer
// word that only contains it (KEYWORD, AUTHOR) does not.
func TestSecretName(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"API_TOKEN", true}, {"db_password", true}, {"AWS_SECRET_ACCESS_KEY", true}, {"SECRET", true},
		{"DB_PWD", true}, {"PASSWD", true}, {"MYSQL_PW", true}, {"SMTP_PASS", true}, {"GPG_PASSPHRASE", true},
		{"X_API_KEY", true}, {"X-Api-Key", true}, {"x.api.key", true}, {"xApiKey", true}, {"APIKey", true},
		{"APIKEY", true}, {"KEY", true}, {"SSH_KEYS", true}, {"ROOTPASSWORD", true}, {"CLIENTSECRET", true},
		{"githubAccessToken", true}, {"OAuthToken", true}, {"HTTP_AUTHORIZATION", true}, {"BASIC_AUTH", true},
		{"auth", true}, {"GOOGLE_CREDENTIALS", true}, {"AWS_CREDS", true}, {"PRIVATE_PEM", true},
		{"WEBHOOK_SIGNATURE", true}, {"S3_SIG", true}, {"SESSION_ID", true}, {"COOKIE_JAR", true},
		{"DATABASE_DSN", true}, {"JWT", true}, {"token2", true}, {"Password1", true},
		{"SESSIONID", true}, {"session-id", true}, {"SIGNING_KEY", true}, {"KEYS", true},
		// A secret's metadata or count, and a database's key.
		{"TOKEN_TTL", false}, {"AUTH_URL", false}, {"PASSWORD_FILE", false}, {"REDIS_PASSWORD_ENV", false},
		{"API_KEY_ID", false}, {"TOKEN_TYPE", false}, {"SESSION_COUNT", false}, {"MAX_TOKENS", false},
		{"TOKENS_USED", false}, {"AUTH_HOST", false}, {"SMTP_USER", false}, {"JWT_EXPIRY", false},
		{"SORT_KEY", false}, {"primaryKey", false}, {"IDEMPOTENCY_KEY", false}, {"ORACLE_SID", false},
		// Words that only contain a secret's name.
		{"AUTHOR", false}, {"AUTHOR_NAME", false}, {"KEYWORD", false}, {"MONKEY", false},
		{"PASSENGER_COUNT", false}, {"BYPASS_CACHE", false}, {"COMPASS", false}, {"TOKENIZERS_PARALLELISM", false},
		{"SIGNAL", false}, {"SESSIONS_MAX", false}, {"PRIVATEER", false}, {"DSNAME", false},
		{"MODE", false}, {"PWD", false}, {"OLDPWD", false}, {"", false}, {"_-.", false},
	} {
		if got := SecretName(tt.name); got != tt.want {
			t.Errorf("SecretName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Pairs goes by a name's words as SecretName does: a word that only
// contains a secret's name, a secret's metadata or count, and a
// database's key keep their values (an outside trial saw KEYWORD=,
// keyboard= and max_tokens= hidden), secrets stay hidden, pw= among them.
func TestPairsNames(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// Useful text kept.
		{"KEYWORD=orders keyboard=us-intl keyspace=orders", "KEYWORD=orders keyboard=us-intl keyspace=orders"},
		{"sort key: created_at primary-key=id partition_key=tenant idempotency_key=k1", "sort key: created_at primary-key=id partition_key=tenant idempotency_key=k1"},
		{"max_tokens=1024 tokens_used=517 session_count=3 num_keys=4", "max_tokens=1024 tokens_used=517 session_count=3 num_keys=4"},
		{"token_ttl=3600 auth_url=https://h/login password_file=/run/secrets/pw token_type=bearer", "token_ttl=3600 auth_url=https://h/login password_file=/run/secrets/pw token_type=bearer"},
		{`{"api_key_id":"k-17","author":"ann","session_expires_at":"2026-01-01"}`, `{"api_key_id":"k-17","author":"ann","session_expires_at":"2026-01-01"}`},
		{"--max-tokens 1024 --sort-key name --keyword x", "--max-tokens 1024 --sort-key name --keyword x"},
		// Secrets hidden.
		{"api_key=k1 x-api-key: k2 key=k3 signing_key=k4", "api_key=xxxxx x-api-key: xxxxx key=xxxxx signing_key=xxxxx"},
		{"session=s1 sessionid=s2 session_id=s3 JSESSIONID=s4 PHPSESSID=s5 sid=s6", "session=xxxxx sessionid=xxxxx session_id=xxxxx JSESSIONID=xxxxx PHPSESSID=xxxxx sid=xxxxx"},
		{"token=t1 pw=p1 db_pw=p2 DB_PWD=p3 dsn=u:p@tcp(h)/db", "token=xxxxx pw=xxxxx db_pw=xxxxx DB_PWD=xxxxx dsn=xxxxx"},
		{`{"pw":"a\"b","key":"k"}`, `{"pw":"xxxxx","key":"xxxxx"}`},
		{"note:password=p4 a=token=t2", "note:password=xxxxx a=token=xxxxx"},
		{"the key: k5, keys=k6", "the key: xxxxx, keys=xxxxx"},
		// A word Pairs may hide is no database's word: it reads xxxxx the
		// next time (FuzzPairs: pass0:0sort key:0).
		{"pass0:0sort key:0 --password sort key:1", "pass0:xxxxx key:xxxxx --password xxxxx key:xxxxx"},
		{"(sort key: k7) index keys: k8", "(sort key: k7) index keys: k8"},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// A URL with user information under a secret's name keeps its scheme,
// host, port and path, as URLs shows it (an operator read dsn=xxxxx and
// could not tell which database failed); its user information and
// query values go. Any other value of a secret's name goes whole, and so
// does a URL that would not read as one once hidden.
func TestPairsSecretURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"dsn=postgres://app:pw@db:5432/prod", "dsn=postgres://xxxxx@db:5432/prod"},
		{"dsn=postgres://app:pw@db:5432/prod?sslmode=disable&password=pw2&k=v next", "dsn=postgres://xxxxx@db:5432/prod?sslmode=disable&password=xxxxx&k=xxxxx next"},
		{`{"dsn":"postgres://app:pw@db/prod","token":'redis://:pw@cache:6379/0'}`, `{"dsn":"postgres://xxxxx@db/prod","token":'redis://xxxxx@cache:6379/0'}`},
		{"--dsn postgres://app:pw@db:5432/prod: refused (dsn=mysql://u:pw@h/db)", "--dsn postgres://xxxxx@db:5432/prod: refused (dsn=mysql://xxxxx@h/db)"},
		{"password: redis://:p@ss/w0rd@host:6379/0\nmongo_dsn=mongodb://u:pw@h1:1,h2:2/db", "password: redis://xxxxx@host:6379/0\nmongo_dsn=mongodb://xxxxx@h1:1,h2:2/db"},
		// A password with a character that ends a bare value (& ; , ')
		// goes whole with the URL: dsn=xxxxx;ss@h showed ss.
		{"dsn=redis://:p;ss@h:1/0 dsn=redis://u:p,w&x@h", "dsn=redis://xxxxx@h:1/0 dsn=redis://xxxxx@h"},
		// Hidden whole: no URL, no user information, a URL only in part
		// or one that does not read as the user xxxxx at a host.
		{"dsn=u:pw@tcp(h:3306)/db token=https://h/x?a=1 dsn=postgres://h/db", "dsn=xxxxx token=xxxxx dsn=xxxxx"},
		{`dsn="postgres://u:pw@h/db extra" dsn=jdbc:mysql://u:pw@h/db`, `dsn="xxxxx" dsn=xxxxx`},
		{`dsn=postgres://u:pw@/db dsn=postgres://u:pw@h/%zz dsn="postgres://u:p\"w@h/db"`, `dsn=xxxxx dsn=xxxxx dsn="xxxxx"`},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// A YAML block scalar under a secret's key is hidden, all its lines (an
// outside trial saw password: | and the password on the next line, and
// password: xxxxx for the indicator); the key, its indicator and what
// follows the block stay, and so does the block of any other key.
func TestPairsYAMLBlocks(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"password: |\n  s3cretY1\n  line2\nnext: x", "password: |\n  xxxxx\nnext: x"},
		{"password: >-\n    s3cretY2\nother: 1", "password: >-\n    xxxxx\nother: 1"},
		{"db:\n  password: |+ # rotated\r\n    s3cretY3\r\n\r\n    more\r\n  user: bob\r\n", "db:\n  password: |+ # rotated\r\n    xxxxx\r\n  user: bob\r\n"},
		{"- private_key: !!binary |\n    LS0tLS1\n    QkVH\n- name: x", "- private_key: !!binary |\n    xxxxx\n- name: x"},
		{"tls:\n  key: |2\n    -----BEGIN PRIVATE KEY-----\n    MIIE\n  cert: |\n    -----BEGIN CERTIFICATE-----", "tls:\n  key: |2\n    xxxxx\n  cert: |\n    -----BEGIN CERTIFICATE-----"},
		{`"token": >` + "\n   s3cretY4\n", `"token": >` + "\n   xxxxx\n"},
		// Not a secret's key, or no block after it: as before.
		{"description: |\n  some text\nsort_key: >\n  name", "description: |\n  some text\nsort_key: >\n  name"},
		{"password: |\nnext: x", "password: xxxxx\nnext: x"},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// A PEM private key's body is hidden wherever it shows, with no name
// before it (a command that prints its key); its armour lines stay. In
// a JSON body its newlines are escaped; a tail cut inside it holds the
// END line only, and the body lines just above it are hidden. A
// certificate, which is public, stays.
func TestPairsPEMKeys(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"loaded:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1\nQkVHSU4gUlNBIFBS\n-----END RSA PRIVATE KEY-----\ndone",
			"loaded:\n-----BEGIN RSA PRIVATE KEY-----\nxxxxx\n-----END RSA PRIVATE KEY-----\ndone"},
		{"-----BEGIN ENCRYPTED PRIVATE KEY-----\r\nProc-Type: 4,ENCRYPTED\r\nMIIF\r\n-----END ENCRYPTED PRIVATE KEY-----",
			"-----BEGIN ENCRYPTED PRIVATE KEY-----\r\nxxxxx\r\n-----END ENCRYPTED PRIVATE KEY-----"},
		{`{"k":"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\nkqhkiG9w0BAQEF\n-----END PRIVATE KEY-----\n"}`,
			`{"k":"-----BEGIN PRIVATE KEY-----\nxxxxx\n-----END PRIVATE KEY-----\n"}`},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n(cut off)", "-----BEGIN OPENSSH PRIVATE KEY-----\nxxxxx"},
		{"b3BlbnNzaC1rZXk\nAAAAC3NzaC1lZDI1\n-----END OPENSSH PRIVATE KEY-----\nexit 1", "xxxxx\n-----END OPENSSH PRIVATE KEY-----\nexit 1"},
		{"error: bad key\n\nAAAAC3NzaC1lZDI1\n-----END PRIVATE KEY-----", "error: bad key\n\nxxxxx\n-----END PRIVATE KEY-----"},
		{"-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIB\n-----END CERTIFICATE-----", "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIB\n-----END CERTIFICATE-----"},
		// OpenPGP's armour, headers and blank line and all (a second
		// outside trial saw its body).
		{"-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: x\n\nlQOYBGXPGPSECRET\n-----END PGP PRIVATE KEY BLOCK-----",
			"-----BEGIN PGP PRIVATE KEY BLOCK-----\nxxxxx\n-----END PGP PRIVATE KEY BLOCK-----"},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// A tail cut exactly at a line's end drops an empty line: the key line
// before it, whole, was cut off, and the lines more indented after the
// cut may be its block, or the value of password: on the next line;
// they are hidden. A tail cut in a private key's BEGIN line hides the
// body after it. A second outside trial saw both, by cutting at every
// position; and a MIGRATE after cmd= showed its AUTH's password.
func TestTailCutAtLineEnd(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// Its key's indentation is unknown: every more indented line
		// goes, a sibling key too.
		{"…\n    BLOCKSECRETone\n    BLOCKSECRETtwo\n  user: bob\nnext: 1", "…\n    xxxxx\nnext: 1"},
		{"…\n  s3cretNextLine\nnext: 1", "…\n  xxxxx\nnext: 1"},
		{"…IN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAPEMSECRET\nQkVHSU4gUlNBIFBS\n", "…\nxxxxx\n"},
		{"…-\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES\n\nMIIEPEMSECRET2xyz\n-----END RSA PRIVATE KEY-----", "…\nxxxxx\n-----END RSA PRIVATE KEY-----"},
		{"…x\nERR: cmd=MIGRATE host 6379 k 0 1000 AUTH MIGSECRET5", "…\nERR: cmd=MIGRATE host 6379 k 0 1000 AUTH xxxxx"},
		// Not indented, not a key's body: shown.
		{"…\nexit status 1\ndone", "…\nexit status 1\ndone"},
		{"…a-\nshort\nline", "…\nshort\nline"},
	} {
		if got := Tail(tt.in, NewSecrets()); got != tt.want {
			t.Errorf("Tail(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A value ends at a bracket that closes one opened before it, and a yes
// or no says only whether there is a secret: an outside trial read
// "(using password: xxxxx" and "auth=[Bearer xxxxx".
func TestPairsBrackets(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// Useful text kept.
		{"ERROR 1045 (28000): Access denied for user 'root'@'localhost' (using password: YES)", "ERROR 1045 (28000): Access denied for user 'root'@'localhost' (using password: YES)"},
		{"(using password: NO)", "(using password: NO)"},
		{`{"private": true, "token": null, "auth": false}`, `{"private": true, "token": null, "auth": false}`},
		// Hidden, and the bracket stays.
		{"auth=[Bearer x]", "auth=[Bearer xxxxx]"},
		{"(password=hunter2) next", "(password=xxxxx) next"},
		{"[token: t0k3n] [password=p(1)] f(secret=s2)", "[token: xxxxx] [password=xxxxx] f(secret=xxxxx)"},
		{"(sent Bearer eyJhbGciOiJIUzI1NiJ9.e30.x)", "(sent Bearer xxxxx)"},
		{"map[Authorization:[Bearer abc] Accept:[*/*]] (Authorization: token ghp_16C7e42F)", "map[Authorization:[Bearer xxxxx] Accept:[*/*]] (Authorization: token xxxxx)"},
		// A bracket opened nowhere, or on another line, is the value's.
		{"password=hunter2) x", "password=xxxxx x"},
		{"(a\npassword=pa)ss", "(a\npassword=xxxxx"},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// A Redis AUTH command echoed shows no password (an outside trial saw
// "AUTH app hunter2xyz: ERR invalid password"); prose about auth keeps
// its words.
func TestPairsRedisAuth(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"AUTH app hunter2xyz: ERR invalid password", "AUTH app xxxxx: ERR invalid password"},
		{"sync: AUTH hunter2xyz: WRONGPASS invalid username-password pair", "sync: AUTH xxxxx: WRONGPASS invalid username-password pair"},
		{"AUTH app secretpass: -ERR x\nnext line", "AUTH app xxxxx: -ERR x\nnext line"},
		{"127.0.0.1:6379> AUTH hunter2xyz\n(error) WRONGPASS", "127.0.0.1:6379> AUTH xxxxx\n(error) WRONGPASS"},
		{`send "HELLO 3 AUTH app hunter2xyz"`, `send "HELLO 3 AUTH app xxxxx"`},
		{"AUTH :0\nAUTH :hunter2xyz", "AUTH :xxxxx\nAUTH xxxxx"}, // AUTH's pair, then a credential
		{`1700000000.1 [0 10.0.0.1:5000] "AUTH" "app" "hunter 2\"x"` + "\n" + `"auth" "pw2xyz"`, `1700000000.1 [0 10.0.0.1:5000] "AUTH" "app" "xxxxx"` + "\n" + `"auth" "xxxxx"`},
		// Quoted, or in lower case where a command is echoed (an outside
		// tester saw AUTH "s3cretW4" and auth s3cretW5 whole).
		{`AUTH "s3cretW4"` + "\nAUTH bob 's3cret W4'\nAUTH \"hunter\": ERR x\n(AUTH \"pw\\\"1\")", `AUTH "xxxxx"` + "\nAUTH bob 'xxxxx'\nAUTH \"xxxxx\": ERR x\n(AUTH \"xxxxx\")"},
		{"auth s3cretW5\nAuth bob s3cretW5\n127.0.0.1:6379> auth s3cretW5\n  auth \"hunter\"", "auth xxxxx\nAuth bob xxxxx\n127.0.0.1:6379> auth xxxxx\n  auth \"xxxxx\""},
		{`redis-cli -h h auth "s3cretW5"` + "\n" + `1700000000.1 [0 10.0.0.1:5000] "auth" "s3cretW6"`, `redis-cli -h h auth xxxxx` + "\n" + `1700000000.1 [0 10.0.0.1:5000] "auth" "xxxxx"`},
		// More words than AUTH takes: a password with blanks typed
		// without quotes, hidden whole, the user's word too (an outside
		// trial saw AUTH a b c lose only b); HELLO's words end at its
		// SETNAME.
		{"AUTH alice my pass: WRONGPASS x\n127.0.0.1:6379> auth alice my s3cret\nAUTH 'my' pass phrase", "AUTH xxxxx xxxxx xxxxx: WRONGPASS x\n127.0.0.1:6379> auth xxxxx xxxxx xxxxx\nAUTH 'xxxxx' xxxxx xxxxx"},
		{`"AUTH" "alice" "my" "pass"` + "\nHELLO 3 AUTH app s3cretW7 SETNAME auth\n" + `"HELLO" "3" "AUTH" "app" "p w" "x" "SETNAME" "c"`, `"AUTH" "xxxxx" "xxxxx" "xxxxx"` + "\nHELLO 3 AUTH app xxxxx SETNAME auth\n" + `"HELLO" "3" "AUTH" "xxxxx" "xxxxx" "xxxxx" "SETNAME" "c"`},
		{"AUTH app s3cretW8; echo done\nAUTH \"pw\": denied, retry", "AUTH app xxxxx; echo done\nAUTH \"xxxxx\": denied, retry"},
		// A bracket that ends the words goes with a pair's value; the
		// words end there the next time too (FuzzPairs).
		{`AUTH "pw"=)0 0`, `AUTH "pw"=xxxxx 0`},
		// After redis-cli's prompt a word is a password typed, one of
		// prose too; after another > it is read as elsewhere.
		{"127.0.0.1:6379> AUTH foobared\ncache:6379[2]> auth app secret\nnot connected> auth failed: ERR x", "127.0.0.1:6379> AUTH xxxxx\ncache:6379[2]> auth app xxxxx\nnot connected> auth xxxxx: ERR x"},
		{"> AUTH failed\nquote> auth secret", "> AUTH failed\nquote> auth secret"},
		// MIGRATE's AUTH pw and AUTH2 user pw echoed without redis-cli (an
		// outside trial), in any case, as MONITOR quotes it too; a key
		// called auth stays, among its fixed arguments or after KEYS.
		{"MIGRATE t 6379 k 0 5000 AUTH Zq9Secr3t\nsync: MIGRATE t 6379 \"\" 0 5000 COPY AUTH2 alice Zq9Secr3t KEYS a auth b", "MIGRATE t 6379 k 0 5000 AUTH xxxxx\nsync: MIGRATE t 6379 \"\" 0 5000 COPY AUTH2 alice xxxxx KEYS a auth b"},
		{"127.0.0.1:6379> migrate t 6379 k 0 5000 auth pw: ERR x\nerror: migrate t 6379 k 0 5000 auth pw2; retry", "127.0.0.1:6379> migrate t 6379 k 0 5000 auth xxxxx: ERR x\nerror: migrate t 6379 k 0 5000 auth xxxxx; retry"},
		{`1700000000.1 [0 10.0.0.1:5000] "MIGRATE" "t" "6379" "k" "0" "5000" "AUTH" "pw 1"`, `1700000000.1 [0 10.0.0.1:5000] "MIGRATE" "t" "6379" "k" "0" "5000" "AUTH" "xxxxx"`},
		{"MIGRATE t 6379 auth 0 5000 REPLACE\nMIGRATE: 3 keys moved, auth ok", "MIGRATE t 6379 auth 0 5000 REPLACE\nMIGRATE: 3 keys moved, auth ok"},
		// A word before a Redis error stays hidden, one of prose too: no
		// rule tells AUTH failed: WRONGPASS from AUTH foobared: WRONGPASS,
		// whose word is a password (Redis's own example), and WRONGPASS
		// says what failed.
		{"AUTH failed: WRONGPASS invalid username-password pair\nAUTH foobared: WRONGPASS x", "AUTH xxxxx: WRONGPASS invalid username-password pair\nAUTH xxxxx: WRONGPASS x"},
		// Prose and Redis's own words stay.
		{"AUTH failed for user alice\nAUTH mode off; redis-cli x\nAUTH a b c", "AUTH failed for user alice\nAUTH mode off; redis-cli x\nAUTH a b c"},
		{"AUTH failed\nauth failed: ERR x\nBASIC AUTH disabled (bearer only)", "AUTH failed\nauth failed: ERR x\nBASIC AUTH disabled (bearer only)"},
		{"OAuth token refresh failed\nauth timeout\nerror: auth s3cretW5x required\nnote (auth abc123x)", "OAuth token refresh failed\nauth timeout\nerror: auth s3cretW5x required\nnote (auth abc123x)"},
		{"ERR AUTH <password> called without any password configured", "ERR AUTH <password> called without any password configured"},
		{"NOAUTH Authentication required. SMTP AUTH PLAIN is off", "NOAUTH Authentication required. SMTP AUTH PLAIN is off"},
		{"error: AUTH required for this command", "error: AUTH required for this command"},
		{`{"type": "auth", "user": "app"}`, `{"type": "auth", "user": "app"}`},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// The word after bearer or basic is hidden in header form whatever it
// is, elsewhere only when it looks like a credential: prose keeps its
// words.
func TestPairsSchemes(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// Prose: the words an operator needs stay.
		{"basic auth failed", "basic auth failed"},
		{"falling back to bearer mode", "falling back to bearer mode"},
		{"Basic authentication required", "Basic authentication required"},
		{"expected a Bearer token, got none", "expected a Bearer token, got none"},
		{"BASIC AUTH disabled (bearer only)", "BASIC AUTH disabled (bearer only)"},
		{"no Bearer Token. Basic re-auth is off", "no Bearer Token. Basic re-auth is off"},
		{`WWW-Authenticate: Bearer realm="api", error="invalid_token"`, `WWW-Authenticate: Bearer realm="api", error="invalid_token"`},
		{"bearer x1", "bearer x1"},     // shorter than MinSecret
		{"Bearer :0", "Bearer :xxxxx"}, // Bearer's pair, hidden as such (FuzzPairs)
		// Credentials outside the header form: not words of prose.
		{"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln-X_y", "Bearer xxxxx"},
		{"sent basic dXNlcjpwdw== and got 401", "sent basic xxxxx and got 401"},
		{"bearer ghp_16C7e42F292c6912E7710c838347Ae178B4a)", "bearer xxxxx"},
		{"Basic YTpi", "Basic xxxxx"},
		{"Basic admin:hunter2", "Basic xxxxx"},
		{"Bearer abc.def", "Bearer xxxxx"},
		{"bearer abcdefghijklmnopqrst", "bearer xxxxx"}, // maxProseWord letters
		{"Bearer TokenV2", "Bearer xxxxx"},
		// Header form: hidden whatever it looks like.
		{"Authorization: Bearer mode", "Authorization: Bearer xxxxx"},
		{"authorization:basic\tx", "authorization:basic\txxxxx"},
		{`curl -H 'Authorization: Bearer auth' https://h/x`, `curl -H 'Authorization: Bearer xxxxx' https://h/x`},
		{`{"Authorization": "Basic ab"}`, `{"Authorization": "xxxxx"}`},
		{"Proxy-Authorization: Basic dXNlcg==", "Proxy-Authorization: Basic xxxxx"},
		{"token=Bearer word", "token=Bearer xxxxx"},
		{"header map[Authorization:[Bearer abc]]", "header map[Authorization:[Bearer xxxxx]]"},
		// Other schemes in header form: the credential after the scheme
		// went unhidden (GitHub's "token ghp_..."). A known scheme stays,
		// as Bearer does (an outside tester read "Authorization: xxxxx
		// xxxxx" for token s3cret); a word not known as one goes too.
		{"Authorization: token ghp_16C7e42F292c6912E7710c838347Ae178B4a", "Authorization: token xxxxx"},
		{"-H 'authorization: ApiKey k-123' x", "-H 'authorization: ApiKey xxxxx' x"},
		{"HTTP_AUTHORIZATION=Negotiate YIIGhgYGKwYB rest", "HTTP_AUTHORIZATION=Negotiate xxxxx rest"},
		{"Authorization: Tok3nPrefix ghp_16C7e42F", "Authorization: xxxxx xxxxx"},
		{"Authorization: ghp_16C7e42F292c6912E7710c838347Ae178B4a", "Authorization: xxxxx"},
		{"HTTP_AUTHORIZATION=ghp_16C7e42F292c6912E7710c838347Ae178B4a", "HTTP_AUTHORIZATION=xxxxx"},
		{`{"Authorization": "token ghp_16C7e42F292c"}`, `{"Authorization": "xxxxx"}`},
		// Digest and other schemes of auth-params: the whole list goes
		// (the scheme stays),
		// quoted, escaped, in a shell's quotes or a Go map (an outside
		// trial saw response= shown).
		{`Authorization: Digest username="u", realm="r", nonce="n", uri="/", response="6629fae49393a05397450978507c4ef1"`, "Authorization: Digest xxxxx"},
		{`Authorization: Digest username="u", response="6629fae4", cnonce="0a4f113b"` + "\nHost: h", "Authorization: Digest xxxxx\nHost: h"},
		{"Proxy-Authorization: Digest username=u,realm=r,nonce=n,response=6629fae4,algorithm=MD5 next", "Proxy-Authorization: Digest xxxxx next"},
		{`-H 'Authorization: Digest username="u", uri="/a]b", response="6629fae4"' -v`, "-H 'Authorization: Digest xxxxx' -v"},
		{`{"Authorization":"Digest username=\"u\", response=\"6629fae4\"","Host":"h"}`, `{"Authorization":"xxxxx","Host":"h"}`},
		{`map[Authorization:[Digest username="u", response="6629fae4"] Accept:[*/*]]`, "map[Authorization:[Digest xxxxx] Accept:[*/*]]"},
		{`Authorization: Digest username = "u" , response = "6629fae4"`, "Authorization: Digest xxxxx"},
		{`Authorization: AWS4-HMAC-SHA256 Credential=AKIA/20240101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=5d6f`, "Authorization: AWS4-HMAC-SHA256 xxxxx"},
		{`Authorization: username="u", response="6629fae4"`, "Authorization: xxxxx"},
		{`WWW-Authenticate: Digest realm="r", nonce="n", qop="auth"`, `WWW-Authenticate: Digest realm="r", nonce="n", qop="auth"`},
		{"Authorization: Bearer", "Authorization: Bearer"},
		{"WWW-Authenticate: Negotiate", "WWW-Authenticate: Negotiate"},
		// Left visible before (an outside trial).
		{"--password hunter21x --token tokSecret22", "--password xxxxx --token xxxxx"},
		{"Cookie: session=cookieSecret6", "Cookie: xxxxx"},
		{"Set-Cookie: sid=cookieSecret7; Path=/", "Set-Cookie: xxxxx; Path=/"},
		{"X-Signature: sigHeaderSecret17", "X-Signature: xxxxx"},
		{"pass=passSecret16 and session=s3ss", "pass=xxxxx and session=xxxxx"},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
	// Every header form hides every word, as before.
	for _, form := range []string{"Authorization: %s %s", "-H 'authorization: %s %s'", `"Authorization":"%s %s"`,
		"Authorization = %s %s", "X-Auth-Token: %s %s", "map[Authorization:[%s %s]]", "password: %s %s",
		`{"Authorization":["%s %s"]}`, "HTTP_AUTHORIZATION=%s %s", "X_AUTHORIZATION: %s %s", "headers: {Authorization: [ '%s %s' ]}"} {
		for _, scheme := range []string{"Bearer", "basic", "BASIC"} {
			for _, word := range []string{"mode", "auth", "Token", "q", "dXNlcjpwdw==", "t0k3n"} {
				in := fmt.Sprintf(form, scheme, word)
				if got := Pairs(in); strings.Contains(got, scheme+" "+word) || !strings.Contains(got, Masked) {
					t.Errorf("Pairs(%q) = %q: the credential shows", in, got)
				}
			}
		}
	}
}

// A short flag's value is hidden in the commands whose flag is a
// password, and stays where it is a port, a path or part of an option.
func TestPasswordFlags(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// Hidden (an outside trial saw -p hunter2 and -phunter2).
		{"mysql -u root -phunter2 db", "mysql -u root -pxxxxx db"},
		{"+ /usr/bin/mysqldump -uroot -p123456 -P 3306 db", "+ /usr/bin/mysqldump -uroot -pxxxxx -P 3306 db"},
		{"+ mysql -h db '-phunter 2' -e 'select 1'", "+ mysql -h db '-pxxxxx' -e 'select 1'"},
		{`mariadb-dump -p"hunter 2" db`, `mariadb-dump -pxxxxx db`},
		{"mysql -p'0'0 0", "mysql -pxxxxx 0"},
		// A quote closed right after the flag: the value follows it, and
		// the quote stays (FuzzPairs: '-p'0 gave '-pxxxxx, then more).
		{"mYsql '-p'0 0", "mYsql '-p'xxxxx 0"},
		{"mYsql '-p0'0 x", "mYsql '-pxxxxx'xxxxx x"},
		{"mysql '-phunter 2", "mysql '-pxxxxx"},
		{"exec: mongosh --host h -u admin -p hunter2 --eval x", "exec: mongosh --host h -u admin -p xxxxx --eval x"},
		{"sshpass -p hunter2 ssh -p 2222 h", "sshpass -p xxxxx ssh -p 2222 h"},
		{"7z a -pS3cret x.7z dir", "7z a -pxxxxx x.7z dir"},
		// RAR's -hp, which encrypts the headers too (an outside trial saw
		// -hpS3cret whole), as its -p.
		{"rar a -hpS3cret x.rar dir; unrar x -pS3cret -y x.rar", "rar a -hpxxxxx x.rar dir; unrar x -pxxxxx -y x.rar"},
		{"/usr/bin/rar a '-hpS3 cret' x.rar", "/usr/bin/rar a '-hpxxxxx' x.rar"},
		{"redis-cli -h r -p 6379 -a hunter2 ping", "redis-cli -h r -p 6379 -a xxxxx ping"},
		// redis-cli's command after its options: AUTH pw, AUTH user pw,
		// HELLO 3 AUTH user pw, in any case (the user stays).
		{"redis-cli -h h AUTH pw1; redis-cli -h auth -n 0 auth app pw2: WRONGPASS invalid", "redis-cli -h h AUTH xxxxx; redis-cli -h auth -n 0 auth app xxxxx: WRONGPASS invalid"},
		{"valkey-cli --user u --pass pw3 HELLO 3 AUTH u 'pw 4' SETNAME x", "valkey-cli --user u --pass xxxxx HELLO 3 AUTH u xxxxx SETNAME x"},
		// More words than AUTH takes go all (an outside trial saw AUTH a
		// b c lose only b); HELLO's end at its next option.
		{"redis-cli AUTH a b c; redis-cli AUTH alice my pw: WRONGPASS", "redis-cli AUTH xxxxx xxxxx xxxxx; redis-cli AUTH xxxxx xxxxx xxxxx: WRONGPASS"},
		{"redis-cli HELLO 3 AUTH u my pw SETNAME auth", "redis-cli HELLO 3 AUTH xxxxx xxxxx xxxxx SETNAME auth"},
		{"redis-cli HELLO 3 SETNAME auth AUTH u pw", "redis-cli HELLO 3 SETNAME auth AUTH u xxxxx"},
		// MIGRATE's AUTH pw and AUTH2 user pw (a second outside trial);
		// its KEYS after them stay.
		{"redis-cli -h h MIGRATE t 6379 k 0 5000 AUTH Zq9Secr3t", "redis-cli -h h MIGRATE t 6379 k 0 5000 AUTH xxxxx"},
		{"redis-cli MIGRATE t 6379 \"\" 0 5000 COPY AUTH2 alice Zq9Secr3t KEYS a b", "redis-cli MIGRATE t 6379 \"\" 0 5000 COPY AUTH2 alice xxxxx KEYS a b"},
		{"redis-cli MIGRATE t 6379 auth 0 5000", "redis-cli MIGRATE t 6379 auth 0 5000"},
		// After KEYS every word is a key, one called auth too; AUTH takes
		// the word after it whatever it is, and more up to an option.
		{`redis-cli MIGRATE t 6379 "" 0 5000 KEYS auth x`, `redis-cli MIGRATE t 6379 "" 0 5000 KEYS auth x`},
		{`redis-cli MIGRATE t 6379 "" 0 5000 AUTH KEYS KEYS a; redis-cli MIGRATE t 6379 k 0 5 AUTH2 u my pw COPY`, `redis-cli MIGRATE t 6379 "" 0 5000 AUTH xxxxx KEYS a; redis-cli MIGRATE t 6379 k 0 5 AUTH2 xxxxx xxxxx xxxxx COPY`},
		{`C:\bin\mysql.exe -phunter2`, `C:\bin\mysql.exe -pxxxxx`},
		{"cd /x && MYSQL -phunter2; ls -p x", "cd /x && MYSQL -pxxxxx; ls -p x"},
		{"mysql -p -u root db", "mysql -p -u root db"}, // asks for the password
		// curl's user:password (the user stays), OpenLDAP's -w (-W asks;
		// ldappasswd's -a and -s are the old and new passwords), Samba's
		// user%password: an outside trial saw them all.
		{"+ curl -sf -u admin:hunter2xyz https://h/x", "+ curl -sf -u admin:xxxxx https://h/x"},
		{"curl --user admin:hunter2xyz -o out https://h/x", "curl --user admin:xxxxx -o out https://h/x"},
		{"curl -uadmin:hunter2xyz --user=u:pw2xyz -U proxy:pw3xyz --proxy-user 'p r:pw 4' h", "curl -uadmin:xxxxx --user=u:xxxxx -U proxy:xxxxx --proxy-user 'p r:xxxxx' h"},
		{`curl -sSu "admin:hunter 2" h; curl -su :t0k h`, `curl -sSu "admin:xxxxx" h; curl -su :xxxxx h`},
		{"ldapsearch -x -H ldap://h -D cn=admin,dc=x -w hunter2xyz -b dc=x", "ldapsearch -x -H ldap://h -D cn=admin,dc=x -w xxxxx -b dc=x"},
		{"ldapmodify -xwhunter2xyz -f x.ldif; ldapwhoami -x -ZZ -w 'a b'", "ldapmodify -xwxxxxx -f x.ldif; ldapwhoami -x -ZZ -w xxxxx"},
		{"ldappasswd -x -D cn=a -w pw1xyz -a old2xyz -s new3xyz uid=u", "ldappasswd -x -D cn=a -w xxxxx -a xxxxx -s xxxxx uid=u"},
		{"smbclient //srv/share -U admin%hunter2xyz -c ls", "smbclient //srv/share -U admin%xxxxx -c ls"},
		{`smbclient -L srv --user='DOM\admin%hunter2xyz'; rpcclient -Uadmin%pw2xyz srv`, `smbclient -L srv --user='DOM\admin%xxxxx'; rpcclient -Uadmin%xxxxx srv`},
		// The : , or ; after a password is the text's, and stays; a
		// password of those marks alone goes.
		{"smbclient -U alice%secret: NT_STATUS_LOGON_FAILURE", "smbclient -U alice%xxxxx: NT_STATUS_LOGON_FAILURE"},
		{"ldapsearch -w hunter2xyz, -x; curl -u a:b; mysql '-psecret': denied", "ldapsearch -w xxxxx, -x; curl -u a:xxxxx; mysql '-pxxxxx': denied"},
		{"--password hunter2: denied; curl -u a:: h", "--password xxxxx: denied; curl -u a:xxxxx h"},
		// MySQL's, 7-Zip's and RAR's -p alone asks for the password: the
		// next word is the database or the archive.
		{"mysqldump -u root -p orders_db > dump.sql", "mysqldump -u root -p orders_db > dump.sql"},
		{"mysql -u root -p hunter2", "mysql -u root -p hunter2"},
		{"7z x -p archive.7z; rar a -p backup.rar dir; rar a -hp b.rar dir", "7z x -p archive.7z; rar a -p backup.rar dir; rar a -hp b.rar dir"},
		// So does their --password (and MySQL's --password1 to 3): only
		// --password=X holds one. Elsewhere --password takes the next word.
		{"mysql --password orders_db; mysqldump -u root --password1 db2 --password=pw2xyz", "mysql --password orders_db; mysqldump -u root --password1 db2 --password=xxxxx"},
		{"mariadb-dump --password db | x --password hunter2xyz", "mariadb-dump --password db | x --password xxxxx"},
		// Stays: a user without a password, a flag of another command.
		{"curl -u admin https://h/x; curl -H 'X: a:b' -d u=v:w h", "curl -u admin https://h/x; curl -H 'X: a:b' -d u=v:w h"},
		{"ldapsearch -x -W -D cn=admin -b dc=x; smbclient -U admin //s/x", "ldapsearch -x -W -D cn=admin -b dc=x; smbclient -U admin //s/x"},
		{"ssh -u admin:x h; wget -U agent:1 h", "ssh -u admin:x h; wget -U agent:1 h"},
		// Stays: -p of other commands, and -p after the command.
		{"redis-cli -p 6379 ping", "redis-cli -p 6379 ping"},
		// AUTH as a word of prose, or an argument of another command.
		{"ran redis-cli and AUTH failed; redis-cli -h h SET AUTH v", "ran redis-cli and AUTH failed; redis-cli -h h SET AUTH v"},
		{"the AUTH step; AUTH mode off; redis-cli --eval s.lua AUTH , pw", "the AUTH step; AUTH mode off; redis-cli --eval s.lua AUTH , pw"},
		{"+ mkdir -p /var/lib/syncd", "+ mkdir -p /var/lib/syncd"},
		{"ssh -p 2222 h; psql -p5433 -h db", "ssh -p 2222 h; psql -p5433 -h db"},
		{"find . -name '*.go' -print", "find . -name '*.go' -print"},
		{"gcc -pthread x.c; docker run -p 8080:80 img", "gcc -pthread x.c; docker run -p 8080:80 img"},
		{"-p hunter2 -phunter2", "-p hunter2 -phunter2"},
		{"mysql -e 'select 1' | grep -p x\nmkdir -p y", "mysql -e 'select 1' | grep -p x\nmkdir -p y"},
		{"mongodb -p x", "mongodb -p x"},
		{"sshpass -e ssh -p 2222 h", "sshpass -e ssh -p 2222 h"},
		{"mysql -P 3306 --protocol tcp", "mysql -P 3306 --protocol tcp"},
	} {
		got := Pairs(tt.in)
		if got != tt.want {
			t.Errorf("Pairs(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Pairs(got); again != got {
			t.Errorf("Pairs(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// Args hides across a command's arguments given as a list what Pairs
// hides in a command line: an outside trial saw ["mysql","-phunter2xyz"]
// and the value after --password in validate's output.
func TestArgs(t *testing.T) {
	for _, tt := range []struct{ in, want []string }{
		{[]string{"mysql", "-phunter2xyz"}, []string{"mysql", "-pxxxxx"}},
		{[]string{"x", "--password", "hunter2xyz", "--token", "t0k3n", "-v"}, []string{"x", "--password", "xxxxx", "--token", "xxxxx", "-v"}},
		{[]string{"/usr/bin/curl", "-sf", "-u", "admin:hunter2xyz", "https://h/x"}, []string{"/usr/bin/curl", "-sf", "-u", "admin:xxxxx", "https://h/x"}},
		{[]string{"ldapsearch", "-x", "-w", "hunter2xyz", "-b", "dc=x"}, []string{"ldapsearch", "-x", "-w", "xxxxx", "-b", "dc=x"}},
		{[]string{"redis-cli", "-p", "6379", "-a", "hunter 2"}, []string{"redis-cli", "-p", "6379", "-a", "xxxxx"}},
		{[]string{"redis-cli", "-h", "h", "AUTH", "app", "hunter 2:"}, []string{"redis-cli", "-h", "h", "AUTH", "app", "xxxxx"}},
		{[]string{"redis-cli", "AUTH", "a", "b", "c"}, []string{"redis-cli", "AUTH", "xxxxx", "xxxxx", "xxxxx"}},
		{[]string{"smbclient", "//s/x", "-Uadmin%hunter2xyz"}, []string{"smbclient", "//s/x", "-Uadmin%xxxxx"}},
		{[]string{"redis-cli", "-u", "redis://:p@ss/w0rd@host:6379/0", "ping"}, []string{"redis-cli", "-u", "redis://xxxxx@host:6379/0", "ping"}},
		// A URL with user information after a secret's flag shows as
		// Pairs shows it; any other value goes whole.
		{[]string{"x", "--dsn", "postgres://app:pw@db:5432/prod", "--dsn=mysql://u:pw@h/db", "--token", "https://h/x?a=1"},
			[]string{"x", "--dsn", "postgres://xxxxx@db:5432/prod", "--dsn=mysql://xxxxx@h/db", "--token", "xxxxx"}},
		{[]string{"rar", "a", "-hphunter2xyz", "x.rar"}, []string{"rar", "a", "-hpxxxxx", "x.rar"}},
		{[]string{"rar", "a", "-hp", "x.rar"}, []string{"rar", "a", "-hp", "x.rar"}},
		{[]string{"sshpass", "-p", "hunter2xyz", "ssh", "-p", "2222", "h"}, []string{"sshpass", "-p", "xxxxx", "ssh", "-p", "2222", "h"}},
		{[]string{"sh", "-c", "mysql -phunter2xyz db; curl -u admin:pw2xyz h; redis-cli -a pw3xyz"}, []string{"sh", "-c", "mysql -pxxxxx db; curl -u admin:xxxxx h; redis-cli -a xxxxx"}},
		{[]string{"x", "--password", "--token", "t0k3n"}, []string{"x", "--password", "--token", "xxxxx"}},
		// Useful text kept.
		{[]string{"mysqldump", "-u", "root", "-p", "orders_db"}, []string{"mysqldump", "-u", "root", "-p", "orders_db"}},
		{[]string{"mysql", "--password", "orders_db", "--password2=pw2xyz"}, []string{"mysql", "--password", "orders_db", "--password2=xxxxx"}},
		{[]string{"ssh", "-p", "2222", "-u", "admin:x", "h"}, []string{"ssh", "-p", "2222", "-u", "admin:x", "h"}},
		{[]string{"sync", "--max-tokens", "1024", "--sort-key", "name", "--user", "admin"}, []string{"sync", "--max-tokens", "1024", "--sort-key", "name", "--user", "admin"}},
		{[]string{"curl", "-u", "admin", "h"}, []string{"curl", "-u", "admin", "h"}},
		{nil, nil},
	} {
		got := Args(tt.in)
		if diff := cmp.Diff(got, tt.want); diff != "" {
			t.Errorf("Args(%q) (-got +want):\n%s", tt.in, diff)
		}
		if again := Args(got); !cmp.Equal(again, got) {
			t.Errorf("Args(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// FuzzTailCut: a credential that Pairs hides in a line shows in no
// part in the tail of that line cut anywhere before it or in it: no
// piece of it of MinSecret bytes. The line's quotes pair up (but
// apostrophes: can't), as Tail assumes (clauseEnd).
func FuzzTailCut(f *testing.F) {
	for _, s := range [][2]string{
		{"redis-cli AUTH ", ": WRONGPASS x, done"}, {"Authorization: token ", " rest, done"},
		{`{"password":"a: b, `, `","msg":"boom"}`}, {`Authorization: Digest username="u", response="`, `" x, done`},
		{"curl -v https://h/: retry -u carol:", " https://h/; echo done"}, {"x; password: ", ", y: z"},
		{`{"k":"-----BEGIN PRIVATE KEY-----\nProc-Type: 4,x\nMII`, `\n-----END PRIVATE KEY-----\n"}`},
		{`loaded -----BEGIN PRIVATE KEY-----\nProc-Type: 4,x\nMII`, `\n-----END PRIVATE KEY----- loaded, done`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, before, after string) {
		const secret = "Zq9sEcr3tW0rdX"
		line := before + secret + after
		pieces := func(s string) []string {
			var ps []string
			for i := 0; i+MinSecret <= len(s); i++ {
				ps = append(ps, s[i:i+MinSecret])
			}
			return ps
		}
		if strings.ContainsAny(line, "\n\r…") || strings.Contains(before+after, Masked) ||
			slices.ContainsFunc(pieces(secret), func(p string) bool { return strings.Contains(before+after, p) }) {
			return
		}
		if dq, sq := quoteParity(line); dq || sq {
			return // quotes that do not pair up
		}
		if pemBegin.MatchString(before) && !pemEnd.MatchString(after) {
			// A key with no END line: Pairs hides all after its BEGIN, a
			// body or not ("-----BEGIN PRIVATE KEY----- 000& Zq9s…"),
			// and a cut past the BEGIN cannot know where a key began. A
			// one-line tail that ends inside a key is left to that
			// (a known limit, the closing note of session 20).
			return
		}
		if out := Pairs(line); slices.ContainsFunc(pieces(secret), func(p string) bool { return strings.Contains(out, p) }) {
			return // not a credential Pairs hides
		}
		for k := 1; k < len(before)+len(secret)-MinSecret; k++ {
			tail := "…" + strings.TrimSpace(line[k:])
			got := Tail(tail, NewSecrets())
			for _, p := range pieces(secret[max(k-len(before), 0):]) {
				if strings.Contains(got, p) {
					t.Fatalf("Tail(%q) = %q: %q of the credential in %q shows", tail, got, p, line)
				}
			}
		}
	})
}

// FuzzCleanTail: no piece of a secret of four bytes or more is left at
// the start of a cleaned tail, and no whole secret anywhere.
func FuzzCleanTail(f *testing.F) {
	f.Add("token-1234", "…en-1234 and token-1234 again")
	f.Add("abcd", "…cdabcd")
	f.Fuzz(func(t *testing.T, secret, tail string) {
		s := NewSecrets(secret)
		out := s.CleanTail(tail)
		sec := strings.TrimSpace(secret)
		if len(sec) < MinSecret || strings.Contains(sec, Redacted) || strings.ContainsAny(sec, "…[]") {
			return
		}
		if strings.Contains(out, sec) && !strings.Contains(tail, Redacted) {
			// Clean replaced every occurrence; one can only reappear when
			// the replacement itself builds it, which a secret without
			// brackets cannot.
			t.Fatalf("CleanTail(%q) with %q = %q: the secret shows", tail, secret, out)
		}
		rest, cut := strings.CutPrefix(out, "…")
		if !cut {
			return
		}
		for k := MinSecret; k < len(sec); k++ {
			if strings.HasPrefix(rest, sec[len(sec)-k:]) && strings.HasPrefix(tail, "…"+sec[len(sec)-k:]) {
				t.Fatalf("CleanTail(%q) with %q = %q: a piece of the secret starts it", tail, secret, out)
			}
		}
	})
}

// FuzzPairs: Pairs, Tail and Args never panic, Pairs and Args applied
// twice change nothing more, and no URL that Pairs leaves shows user
// information but xxxxx.
func FuzzPairs(f *testing.F) {
	for _, s := range []string{`token='a b' password="c" {"key":"d"}`, "--password x -v", "Bearer y", "…z token=1", "pwd: : =",
		"basic auth failed", "Authorization: Bearer mode", `Bearer realm="api"`,
		`Authorization: Digest username="u", response="r"`, `"authorization": "Digest a=\"b\", c=d"`,
		"mysql -uroot -p'a b' -p x; sshpass -p y ssh -p 1", "curl -su a:b -U 'c:d' --user=e:f; ldapsearch -xw g -W",
		"AUTH app pw1x: ERR x\n\"AUTH\" \"u\" \"p\"", "(password: YES) auth=[Bearer x] sort key: k",
		"…H bob s3cretQ8\nAUTH \"pw\" auth 'p w'\n> auth s3cretW5", "user alice:s3cretW12@tcp(h:1)/db Authorization: token x",
		"url redis://:p@ss/w0rd@host:6379/0 x A://[@!:#@0 https://u@h#a@b",
		"dsn=postgres://app:pw@db:5432/prod?k=v&sslmode=off --dsn redis://:p;ss@h:1/0 'token':'r://u:p@h' dsn=u:pw@h/%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		out := Pairs(text)
		if again := Pairs(out); again != out {
			t.Fatalf("Pairs(%q) = %q, then %q", text, out, again)
		}
		for _, u := range urlRE.FindAllString(out, -1) {
			_, rest, _ := strings.Cut(u, "://")
			if at := userinfoEnd(rest); at >= 0 && rest[:at] != Masked {
				t.Fatalf("Pairs(%q) = %q: user information %q shows", text, out, rest[:at])
			}
		}
		Tail(text, NewSecrets("abcd"))
		args := Args(strings.Fields(text))
		if again := Args(args); !cmp.Equal(again, args) {
			t.Fatalf("Args(%q) = %q, then %q", strings.Fields(text), args, again)
		}
	})
}
