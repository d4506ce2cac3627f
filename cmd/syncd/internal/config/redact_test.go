package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Issue #15: validate printed an env value DATABASE_URL=postgres://u:SECRET@h/db
// and a custom header in full, as redaction went by name only.
func TestRedactedValues(t *testing.T) {
	tests := []struct {
		src  string
		want []string
	}{{`
sink:
	type: exec
	exec:
		command: [sync, --password=hunter1, "https://u:hunter2@h/x?sig=hunter3", "Authorization: Bearer hunter4"]
		env: ["DATABASE_URL=postgres://u:hunter5@h/db", "PGOPTS=host=h password=hunter6", "MODE=fast", "DSN=u:hunter9@tcp(h)/db",
			"TOKEN_TTL=3600", "AUTH_URL=https://u:hunter10@h/login?page=2", "PASSWORD_FILE=/run/secrets/pw", "KEYWORD=orders", "DB_PW=hunter11"]
`, []string{"--password=xxxxx", "https://xxxxx@h/x?sig=xxxxx", "Authorization: Bearer xxxxx",
		"DATABASE_URL=postgres://xxxxx@h/db", "PGOPTS=host=h password=xxxxx", "MODE=fast", "DSN=[redacted]",
		// A secret's metadata shows, a URL's password does not (an
		// outside trial saw TOKEN_TTL=[redacted] and KEYWORD=xxxxx).
		"TOKEN_TTL=3600", "AUTH_URL=https://xxxxx@h/login?page=2", "PASSWORD_FILE=/run/secrets/pw", "KEYWORD=orders", "DB_PW=[redacted]"},
	}, {`
items:
	command: [sh, -c, "curl -sf -u admin:hunter12 https://h/ids; redis-cli -a hunter13 smembers ids"]
sink:
	type: exec
	exec:
		command: [mysql, -phunter14, --password, orders_db, --sort-key, name]
`, []string{"curl -sf -u admin:xxxxx https://h/ids; redis-cli -a xxxxx smembers ids", "- -pxxxxx", "- --password\n", "- orders_db\n", "- --sort-key\n", "- name\n"},
	}, {`
sink:
	type: exec
	exec:
		command: [dbsync, --password, hunter15]
`, []string{"- --password\n", "- xxxxx\n"},
	}, {`
sink:
	type: exec
	exec:
		command: [curl, -u, "admin:hunter16"]
`, []string{"- admin:xxxxx"},
	}, {`
sink:
	type: exec
	exec:
		command: [ldapsearch, -x, -w, hunter17, -b, "dc=x"]
`, []string{"- -w\n", "- xxxxx\n", "- dc=x\n"},
	}, {`
sink:
	type: http
	http:
		url: https://h/hook?token=hunter7&page=2
		headers:
			X-Hub: sha1=hunter8
			accept: application/json
`, []string{"url: https://h/hook?token=xxxxx&page=2", "X-Hub: '[redacted]'", "accept: application/json"},
	}}
	for _, tt := range tests {
		red, err := mustParse(t, yamlText(tt.src)).Redacted()
		if err != nil {
			t.Fatal(err)
		}
		out := string(red)
		if strings.Contains(out, "hunter") {
			t.Errorf("Redacted shows a secret:\n%s", out)
		}
		for _, want := range tt.want {
			if !strings.Contains(out, want) {
				t.Errorf("Redacted lacks %q:\n%s", want, out)
			}
		}
	}
}

// Messages that quote a value redact it as well.
func TestErrorsRedacted(t *testing.T) {
	_, err := Parse("c.yaml", []byte(yamlText(`
ownership:
	ttl: token=hunter1
sink:
	type: exec
	exec:
		command: [sh]
		env: ["DATABASE_URL postgres://u:hunter2@h/db"]
log:
	level: https://u:hunter3@h
`)))
	want := []string{
		`c.yaml:2: ownership.ttl: "token=xxxxx" is not a duration (examples: 30s, 500ms, 2m)`,
		`c.yaml:7: sink.exec.env[0]: "DATABASE_URL postgres://xxxxx@h/db" is not KEY=value`,
		`c.yaml:9: log.level: expected one of debug, info (the default), warn or error, got "https://xxxxx@h"`,
	}
	if diff := cmp.Diff(errLines(err), want); diff != "" {
		t.Errorf("errors (-got +want):\n%s", diff)
	}
	_, err = Parse("c.yaml", []byte("sink:\n  type: http\n  http:\n    url: http://u:hunter4@/x\n"))
	want = []string{`c.yaml:4: sink.http.url: host must not be empty in "http://xxxxx@/x"`}
	if diff := cmp.Diff(errLines(err), want); diff != "" {
		t.Errorf("errors (-got +want):\n%s", diff)
	}
	// The URL in quotes ends at the closing quote.
	_, err = Parse("c.yaml", []byte("sink:\n  type: http\n  http:\n    url: http://u:hunter5@h/%zz?token=hunter6\n"))
	want = []string{`c.yaml:4: sink.http.url: parse "http://xxxxx@h/%zz?token=xxxxx": invalid URL escape "%zz"`}
	if diff := cmp.Diff(errLines(err), want); diff != "" {
		t.Errorf("errors (-got +want):\n%s", diff)
	}
}

func TestRedactValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text, key_prefix and 30s", "plain text, key_prefix and 30s"},
		{"DATABASE_URL=postgres://u:pw@h/db", "DATABASE_URL=postgres://xxxxx@h/db"},
		{"--api-key=abc --token=def", "--api-key=xxxxx --token=xxxxx"},
		{"host=h user=u password=pw sslmode=off", "host=h user=u password=xxxxx sslmode=off"},
		{"SECRET=s; passwd=p, pwd=q", "SECRET=xxxxx; passwd=xxxxx, pwd=xxxxx"},
		{"Bearer abc.def", "Bearer xxxxx"},
		{"Authorization: basic dXNlcjpwdw==", "Authorization: basic xxxxx"},
		{"API_TOKEN=[redacted]", "API_TOKEN=[redacted]"},
		// A password with an @ and then a / in it: redis://xxxxx@ss/w0rd@host.
		{"url redis://:p@ss/w0rd@host:6379/0 x", "url redis://xxxxx@host:6379/0 x"},
		{"connect redis://user:p@ss/w0rd@h:1/0", "connect redis://xxxxx@h:1/0"},
		// A URL under a secret's name keeps its host.
		{"dsn=postgres://app:pw@db:5432/prod --dsn redis://:p@ss/w0rd@h:1/0", "dsn=postgres://xxxxx@db:5432/prod --dsn redis://xxxxx@h:1/0"},
	}
	for _, tt := range tests {
		got := redactValue(tt.in)
		if got != tt.want {
			t.Errorf("redactValue(%q) = %q; want %q", tt.in, got, tt.want)
		}
		if again := redactValue(got); again != got {
			t.Errorf("redactValue(%q) = %q; not stable", got, again)
		}
	}
}
