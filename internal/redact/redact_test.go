package redact

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestURLs(t *testing.T) {
	tests := []struct {
		in                     string
		mask, display, passwrd string
	}{
		{"https://h/x", "https://h/x", "https://h/x", "https://h/x"},
		{"https://u:pw@h/x", "https://xxxxx@h/x", "https://h/x", "https://u:xxxxx@h/x"},
		{"https://token@h/x", "https://xxxxx@h/x", "https://h/x", "https://token@h/x"},
		{"https://h/x?api_key=k&page=2", "https://h/x?api_key=xxxxx&page=2", "https://h/x?api_key=xxxxx&page=2", "https://h/x?api_key=xxxxx&page=2"},
		{"https://h/x?k3y#frag", "https://h/x?xxxxx#frag", "https://h/x?xxxxx", "https://h/x?xxxxx#frag"},
		{"https://h/x?a=1&&b=#f?c=2", "https://h/x?a=xxxxx&&b=xxxxx#f?c=xxxxx", "https://h/x?a=xxxxx&&b=xxxxx", "https://h/x?a=xxxxx&&b=xxxxx#f?c=xxxxx"},
		{"https://h/x?page=2&sort=asc&token=t", "https://h/x?page=2&sort=asc&token=xxxxx", "https://h/x?page=2&sort=asc&token=xxxxx", "https://h/x?page=2&sort=asc&token=xxxxx"},
		{"https://h/x?", "https://h/x", "https://h/x", "https://h/x"},
		{"http://u:pw@h/%zz", "http://xxxxx@h/%zz", "http://h/%zz", "http://u:xxxxx@h/%zz"},
		{"http://u:p@w@h", "http://xxxxx@h", "http://h", "http://u:xxxxx@h"},
		{"http://u:p'w@h", "http://xxxxx@h", "http://h", "http://u:xxxxx@h"},
		{"https://h/a@b", "https://h/a@b", "https://h/a@b", "https://h/a@b"},
		{"DATABASE_URL=postgres://u:SECRET@h/db and redis://:pw@r:6379/0",
			"DATABASE_URL=postgres://xxxxx@h/db and redis://xxxxx@r:6379/0",
			"DATABASE_URL=postgres://h/db and redis://r:6379/0",
			"DATABASE_URL=postgres://u:xxxxx@h/db and redis://:xxxxx@r:6379/0"},
		{"X_redis://u:pw@h", "X_redis://xxxxx@h", "X_redis://h", "X_redis://u:xxxxx@h"},
		{`parse "http://u:pw@h/%zz?token=t": invalid URL escape "%zz"`,
			`parse "http://xxxxx@h/%zz?token=xxxxx": invalid URL escape "%zz"`,
			`parse "http://h/%zz?token=xxxxx": invalid URL escape "%zz"`,
			`parse "http://u:xxxxx@h/%zz?token=xxxxx": invalid URL escape "%zz"`},
		{"<a href=`https://h/?sig=s`>", "<a href=`https://h/?sig=xxxxx`>", "<a href=`https://h/?sig=xxxxx`>", "<a href=`https://h/?sig=xxxxx`>"},
		// OAuth's implicit flow returns its token in the fragment; a
		// fragment of other pairs, or no pairs, stays.
		{"https://app/cb#access_token=t&expires_in=3600&state=s", "https://app/cb#access_token=xxxxx&expires_in=3600&state=xxxxx",
			"https://app/cb", "https://app/cb#access_token=xxxxx&expires_in=3600&state=xxxxx"},
		{"https://h/doc#section-2", "https://h/doc#section-2", "https://h/doc", "https://h/doc#section-2"},
		// An escaped URL that holds a secret, in a query, a path or free
		// text such as a form body, goes whole (an outside trial saw the
		// token of an OAuth redirect_uri); one without stays.
		{"https://h/auth?redirect_uri=https%3A%2F%2Fx%2Fcb%3Faccess_token%3DSECRET&page=2",
			"https://h/auth?redirect_uri=xxxxx&page=2", "https://h/auth?redirect_uri=xxxxx&page=2", "https://h/auth?redirect_uri=xxxxx&page=2"},
		{"https://h/proxy/https%3A%2F%2Fx%2Fcb%3Faccess_token%3DSECRET/more", "https://h/proxy/xxxxx/more", "https://h/proxy/xxxxx/more", "https://h/proxy/xxxxx/more"},
		{"https://h/proxy/https%3A%2F%2Fx%2Fcb%3Fpage%3D2/a%20b", "https://h/proxy/https%3A%2F%2Fx%2Fcb%3Fpage%3D2/a%20b",
			"https://h/proxy/https%3A%2F%2Fx%2Fcb%3Fpage%3D2/a%20b", "https://h/proxy/https%3A%2F%2Fx%2Fcb%3Fpage%3D2/a%20b"},
		{"POST client_id=a&redirect_uri=https%3A%2F%2Fx%2Fcb%3Faccess_token%3DSECRET&state=s 400",
			"POST client_id=a&redirect_uri=xxxxx&state=s 400", "POST client_id=a&redirect_uri=xxxxx&state=s 400", "POST client_id=a&redirect_uri=xxxxx&state=s 400"},
		{"next=https%253A%252F%252Fu%253Apw%2540x%252F 'https%3A%2F%2Fx%2Fcb%3Fpage%3D2'",
			"next=xxxxx 'https%3A%2F%2Fx%2Fcb%3Fpage%3D2'", "next=xxxxx 'https%3A%2F%2Fx%2Fcb%3Fpage%3D2'", "next=xxxxx 'https%3A%2F%2Fx%2Fcb%3Fpage%3D2'"},
		// A password with / ? or # in it, which url.Parse takes for the
		// authority's end: an outside trial saw redis://:pa (the rest and
		// the host lost), https://admin:pa?xxxxx and a whole password.
		{"redis://:pa#ss99zz@cache:6379", "redis://xxxxx@cache:6379", "redis://cache:6379", "redis://:xxxxx@cache:6379"},
		{"GET https://admin:pa?ss99zz@api.example.com/x?page=2 failed", "GET https://xxxxx@api.example.com/x?page=2 failed",
			"GET https://api.example.com/x?page=2 failed", "GET https://admin:xxxxx@api.example.com/x?page=2 failed"},
		{"dial redis://:pa/ss99zz@cache:6379/0: refused", "dial redis://xxxxx@cache:6379/0: refused", "dial redis://cache:6379/0: refused", "dial redis://:xxxxx@cache:6379/0: refused"},
		{"redis://u:a#s/s@h@[::1]:1#f", "redis://xxxxx@[::1]:1#f", "redis://[::1]:1", "redis://u:xxxxx@[::1]:1#f"},
		{"q=redis%3A%2F%2F%3Apa%23ss%40cache%3A6379 ok", "q=xxxxx ok", "q=xxxxx ok", "q=xxxxx ok"},
		// An @ and then a # in the password: url.Parse reads :p@ss for the
		// user information and w0rd@cache:6379 for the fragment, which
		// showed; the last @ that a host follows ends the password.
		{"redis://:p@ss#w0rd@cache:6379", "redis://xxxxx@cache:6379", "redis://cache:6379", "redis://:xxxxx@cache:6379"},
		{"dial redis://u:p@ss#w0@rd@cache:6379/0: x", "dial redis://xxxxx@cache:6379/0: x", "dial redis://cache:6379/0: x", "dial redis://u:xxxxx@cache:6379/0: x"},
		{"https://u@h#a@b redis://:p@ss#f", "https://xxxxx@h#a@b redis://xxxxx@ss#f", "https://h redis://ss", "https://u@h#a@b redis://:xxxxx@ss#f"},
		// A password with an @ and then a / ? or # in it (an outside
		// trial saw redis://xxxxx@ss/w0rd@host and redis://ss/w0rd@host):
		// the user information runs to the last @ that a host, or
		// nothing, follows.
		{"url redis://:p@ss/w0rd@host:6379/0 x", "url redis://xxxxx@host:6379/0 x", "url redis://host:6379/0 x", "url redis://:xxxxx@host:6379/0 x"},
		{"connect redis://user:p@ss/w0rd@h:1/0", "connect redis://xxxxx@h:1/0", "connect redis://h:1/0", "connect redis://user:xxxxx@h:1/0"},
		{`"redis://u:a@b/c@d?e@h:1/0" r://:p@ss?w0rd@h:1`, `"redis://xxxxx@h:1/0" r://xxxxx@h:1`, `"redis://h:1/0" r://h:1`, `"redis://u:xxxxx@h:1/0" r://:xxxxx@h:1`},
		{"mongodb://u:p@ss/w0rd@h1:1,h2:2/db redis://:p@ss/w0rd@/0", "mongodb://xxxxx@h1:1,h2:2/db redis://xxxxx@/0",
			"mongodb://h1:1,h2:2/db redis:///0", "mongodb://u:xxxxx@h1:1,h2:2/db redis://:xxxxx@/0"},
		{"redis://:1234/5678@cache:6379/0", "redis://xxxxx@cache:6379/0", "redis://cache:6379/0", "redis://:xxxxx@cache:6379/0"},
		// What a password may be goes: with a password before it, an @
		// in the path or query and a host after it end the user
		// information, and the host and path before them go too. An @
		// that no host follows does not (a%20b is none).
		{"https://u:pw@h/x?to=a@b.com", "https://xxxxx@b.com", "https://b.com", "https://u:xxxxx@b.com"},
		{"https://u:pw@h/x?to=a@b%20c", "https://xxxxx@h/x?to=a@b%20c", "https://h/x?to=a@b%20c", "https://u:xxxxx@h/x?to=a@b%20c"},
		// Without a password, an @ in the path or query is as url.Parse
		// reads it.
		{"https://u@h/a@b https://token@h/x?to=a@b.com", "https://xxxxx@h/a@b https://xxxxx@h/x?to=a@b.com", "https://h/a@b https://h/x?to=a@b.com", "https://u@h/a@b https://token@h/x?to=a@b.com"},
		// Not user information: a port, then an @ in the path or query.
		{"https://h:8443/mail/a@b.com?to=c@d.org", "https://h:8443/mail/a@b.com?to=c@d.org", "https://h:8443/mail/a@b.com?to=c@d.org", "https://h:8443/mail/a@b.com?to=c@d.org"},
		{"https://h/x?to=c@d.org#a@b", "https://h/x?to=c@d.org#a@b", "https://h/x?to=c@d.org", "https://h/x?to=c@d.org#a@b"},
		{"https://h/#/users/a@b.com", "https://h/#/users/a@b.com", "https://h/", "https://h/#/users/a@b.com"},
		{"%zz", "%zz", "%zz", "%zz"},
		{"no URL: a=b?c=d", "no URL: a=b?c=d", "no URL: a=b?c=d", "no URL: a=b?c=d"},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			ui   Userinfo
			want string
		}{{Mask, tt.mask}, {Display, tt.display}, {Password, tt.passwrd}} {
			got := URLs(tt.in, c.ui)
			if got != c.want {
				t.Errorf("URLs(%q, %d) = %q; want %q", tt.in, c.ui, got, c.want)
			}
			if again := URLs(got, c.ui); again != got {
				t.Errorf("URLs(%q, %d) = %q; not stable", got, c.ui, again)
			}
		}
	}
}

// URL redacts a value that is one URL, or not quite one.
func TestURL(t *testing.T) {
	tests := []struct {
		in   string
		ui   Userinfo
		want string
	}{
		{"https://u:pw@h/hook?access_token=t&team=a#x", Display, "https://h/hook?access_token=xxxxx&team=xxxxx"},
		{"https://api.example.com/v1/items?page=2&sort=asc", Mask, "https://api.example.com/v1/items?page=2&sort=asc"},
		{"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20240101&X-Amz-Date=20240101T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Security-Token=st&X-Amz-Signature=5d6f", Display,
			"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=xxxxx&X-Amz-Credential=xxxxx&X-Amz-Date=xxxxx&X-Amz-Expires=xxxxx&X-Amz-SignedHeaders=xxxxx&X-Amz-Security-Token=xxxxx&X-Amz-Signature=xxxxx"},
		{"http://user:pw@host/%zz?token=t", Password, "http://user:xxxxx@host/%zz?token=xxxxx"},
		{"host/x?token=t", Mask, "host/x?token=xxxxx"},
		{"u:pw@h", Display, "u:pw@h"}, // no scheme: no authority either
		// A database's connection options show (an outside tester read
		// sslmode=xxxxx); its password goes.
		{"postgres://u:pw@h/db?sslmode=disable&connect_timeout=5&password=pw2", Display, "postgres://h/db?sslmode=disable&connect_timeout=5&password=xxxxx"},
		{"mysql://u:pw@h/db?charset=utf8mb4&parseTime=true&timeout=5s", Password, "mysql://u:xxxxx@h/db?charset=utf8mb4&parseTime=true&timeout=5s"},
	}
	for _, tt := range tests {
		if got := URL(tt.in, tt.ui); got != tt.want {
			t.Errorf("URL(%q, %d) = %q; want %q", tt.in, tt.ui, got, tt.want)
		}
	}
}

// A webhook's URL is its credential: its token in the path is hidden,
// and other long segments (IDs, hashes) stay.
func TestURLPath(t *testing.T) {
	tests := []struct{ in, want string }{
		// Hidden: an outside trial saw a Slack hook's token.
		{"https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX", "https://hooks.slack.com/services/T000/B000/xxxxx"},
		{"https://HOOKS.slack.com:443/workflows/T0/A0/123/abcDEF12/", "https://HOOKS.slack.com:443/workflows/T0/A0/123/xxxxx/"},
		{"https://u:pw@hooks.zapier.com/hooks/catch/123456/abc7def/", "https://hooks.zapier.com/hooks/catch/123456/xxxxx/"},
		{"https://discord.com/api/webhooks/123456789012345678/aBcD-efGh_ijKLmnop0123456789qrSTuvWXyz0123456789abcdEFGHijklMNOPqrstUV",
			"https://discord.com/api/webhooks/123456789012345678/xxxxx"},
		{"https://discord.com/api/v10/webhooks/123456789012345678/aBcDefGhijKLmnop0123456789/messages/987654321098765432",
			"https://discord.com/api/v10/webhooks/123456789012345678/xxxxx/messages/987654321098765432"},
		{"https://chat.example.com/hooks/5fo3b7kzjbdsdqxmcbd4gh6opa", "https://chat.example.com/hooks/xxxxx"},
		{"https://x.webhook.office.com/webhookb2/0b5a5f2c-1c2b-4a5d-9e3f-1a2b3c4d5e6f@72f988bf-86f1-41af-91ab-2d7cd011db47/IncomingWebhook/3f9a8c7d6e5b4a3c2d1e0f9a8b7c6d5e/a1b2c3d4-e5f6-7a8b-9c0d-e1f2a3b4c5d6",
			"https://x.webhook.office.com/webhookb2/xxxxx/IncomingWebhook/xxxxx/xxxxx"},
		{"https://api.telegram.org/bot123456789:AAH3xYz_abcdefghij-klmnopqrstuvwx/sendMessage?chat_id=1",
			"https://api.telegram.org/botxxxxx/sendMessage?chat_id=xxxxx"},
		// Stays: IDs, hashes, names, a hook's number.
		{"https://api.example.com/v1/items/0b5a5f2c-1c2b-4a5d-9e3f-1a2b3c4d5e6f", "https://api.example.com/v1/items/0b5a5f2c-1c2b-4a5d-9e3f-1a2b3c4d5e6f"},
		{"https://github.com/o/r/commit/3f9a8c7d6e5b4a3c2d1e0f9a8b7c6d5e4f3a2b1c", "https://github.com/o/r/commit/3f9a8c7d6e5b4a3c2d1e0f9a8b7c6d5e4f3a2b1c"},
		{"https://api.github.com/repos/o/r/hooks/123456789/pings", "https://api.github.com/repos/o/r/hooks/123456789/pings"},
		{"https://app.example.com/webhooks/syncd-production/", "https://app.example.com/webhooks/syncd-production/"},
		{"https://hooks.example.com/status", "https://hooks.example.com/status"},
		{"https://example.com/hooks.slack.com/services/T0/B0/abc", "https://example.com/hooks.slack.com/services/T0/B0/abc"},
		{"https://example.com/robots/bot/about", "https://example.com/robots/bot/about"},
	}
	for _, tt := range tests {
		if got := URL(tt.in, Display); got != tt.want {
			t.Errorf("URL(%q, Display) = %q; want %q", tt.in, got, tt.want)
		} else if again := URL(got, Display); again != got {
			t.Errorf("URL(%q, Display) = %q, then %q", tt.in, got, again)
		}
	}
}

// URLSecrets returns what URL hides, as it is and unescaped, and not
// what it shows.
func TestURLSecrets(t *testing.T) {
	got := URLSecrets("https://u:p%40w@hooks.slack.com/services/T0/B0/hookTok3n?page=2&sort=name&access_token=a%2Fb&q=https%3A%2F%2Fx%3Fsig%3Ds#state=st1&expires_in=9")
	want := []string{"u:p%40w", "hookTok3n", "a%2Fb", "https%3A%2F%2Fx%3Fsig%3Ds", "st1", "u:p@w", "a/b", "https://x?sig=s"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("URLSecrets (-got +want):\n%s", diff)
	}
	if got, want := URLSecrets("redis://:p@ss#w0rd@cache:6379"), []string{":p@ss#w0rd"}; !cmp.Equal(got, want) {
		t.Errorf("URLSecrets = %q, want %q", got, want)
	}
	if got := URLSecrets("https://h/x?page=2&sort=name"); len(got) != 0 {
		t.Errorf("URLSecrets = %q, want none", got)
	}
}

// Query hides the values of the parameters whose names say they are
// secrets, and bare items; the rest reads as it is.
func TestQuery(t *testing.T) {
	tests := []struct{ in, want string }{
		{"page=2&sort=asc", "page=2&sort=asc"},
		{"q=hello+world&limit=10&offset=20&team=a&", "q=hello+world&limit=10&offset=20&team=xxxxx&"},
		{"PAGE=2&Sort=asc&mode=", "PAGE=2&Sort=asc&mode="},
		{"token=t&access_token=a&key=k&api_key=k&apikey=k&secret=s&password=p&passwd=p&pwd=p&auth=a&signature=s&sig=s",
			"token=xxxxx&access_token=xxxxx&key=xxxxx&api_key=xxxxx&apikey=xxxxx&secret=xxxxx&password=xxxxx&passwd=xxxxx&pwd=xxxxx&auth=xxxxx&signature=xxxxx&sig=xxxxx"},
		// Names no list of secret names foresaw (an outside trial).
		{"pw=a&p=b&sign=c&bearer=d&u=admin", "pw=xxxxx&p=xxxxx&sign=xxxxx&bearer=xxxxx&u=xxxxx"},
		{"sv=2022-11-02&sp=r&se=2024-01-01&sig=abc%3D", "sv=xxxxx&sp=xxxxx&se=xxxxx&sig=xxxxx"},
		{"code=c0de&state=xyz&scope=read&client_secret=s", "code=xxxxx&state=xxxxx&scope=read&client_secret=xxxxx"},
		// Escaped names.
		{"%70age=2&api%5Fkey=k&%zz=v", "%70age=2&api%5Fkey=xxxxx&%zz=xxxxx"},
		// A bare item has no name to go by.
		{"token=&k3y&debug", "token=xxxxx&xxxxx&xxxxx"},
		// A value that holds a query of its own with a secret in it,
		// escaped or not, goes under a name whose value shows; one with
		// none stays.
		{"q=https%3A%2F%2Fx%2Fcb%3Faccess_token%3DSECRET&page=2", "q=xxxxx&page=2"},
		{"q=https://x/cb?access_token=SECRET", "q=xxxxx"},
		{"q=https%253A%252F%252Fx%252Fcb%253Fcode%253DSECRET", "q=xxxxx"},
		{"q=https%3A%2F%2Fx%2Fcb%23access_token%3DSECRET", "q=xxxxx"},
		{"q=https%3A%2F%2Fx%2Fcb%3FSECRET", "q=xxxxx"},
		{"q=https%3A%2F%2Fuser%3Apw%40x%2F", "q=xxxxx"},
		{"filter=team%3Da%26page%3D2", "filter=xxxxx"},
		{"q=https%3A%2F%2Fx%2Fcb%3Fpage%3D2%23top&filter=status%3Dactive&q=what%3F&q=a%zzb", "q=https%3A%2F%2Fx%2Fcb%3Fpage%3D2%23top&filter=status%3Dactive&q=what%3F&q=a%zzb"},
	}
	for _, tt := range tests {
		got := Query(tt.in)
		if got != tt.want {
			t.Errorf("Query(%q) = %q; want %q", tt.in, got, tt.want)
		}
		if again := Query(got); again != got {
			t.Errorf("Query(%q) = %q, then %q", tt.in, got, again)
		}
	}
}

// FuzzURLPassword: a password in a URL's user information shows in no
// part in free text, whatever it holds (/ ? # @ : ' as people type
// them), with any host after it and a path, a query or more text after
// that: no piece of it of MinSecret bytes that the rest of the text
// does not hold.
func FuzzURLPassword(f *testing.F) {
	f.Add("p@ss/w0rd", "host:6379", "/0 x")
	f.Add("a@b/c@d?e#f", "h", "?to=a@b.com")
	f.Add("1234/5678", "[::1]:1", "")
	f.Add("p@ss#w0rd", "h1:1,h2:2", "/db redis://x")
	f.Fuzz(func(t *testing.T, pw, host, after string) {
		if pw == "" || !hostPort.MatchString(host) || strings.ContainsAny(pw, " \t\n\v\f\r\"<>`") ||
			after != "" && !strings.ContainsRune("/?# ", rune(after[0])) {
			return // not a password and a host as a URL in text has them
		}
		text := "url redis://:" + pw + "@" + host + after
		// What the text holds without the password, with its user
		// information or without (Display: "redis://" then the host,
		// whose "//A00" is no piece of a password "/A00").
		rest := "url redis://:@" + host + after + Masked + "@" + host + " redis://" + host
		for _, ui := range []Userinfo{Mask, Display, Password} {
			out := URLs(text, ui)
			for i := 0; i+MinSecret <= len(pw); i++ {
				if piece := pw[i : i+MinSecret]; strings.Contains(out, piece) && !strings.Contains(rest, piece) {
					t.Fatalf("URLs(%q, %d) = %q: %q of the password shows", text, ui, out, piece)
				}
			}
		}
	})
}

// FuzzURLs checks that URLs is stable, and that no URL it leaves in the
// text has a password, user information but xxxxx (Mask) or none
// (Display), a secret query value (secretParam) or bare item but xxxxx,
// a query value or escaped path segment that holds a secret
// (nestedSecret), or a webhook's or bot's token in its path; nor does an
// escaped URL it leaves.
func FuzzURLs(f *testing.F) {
	for _, s := range []string{"https://u:pw@h/x?a=1&b#f", `x "http://u@h?k" y`, "a://b@c@d/e?f=g&&h x_s://:p@q",
		"%zz", "redis://:p w@h", "http://[::1]:80/?q=%zz#a?b=c", "https://h/p%2Fa?q=https%3A%2F%2Fx%3Fpage%3D2%26t%3D1",
		"r=https%253A%252F%252Fu%2540x%252F&s=https%3A%2F%2Fx%2F%3Fk", "https://hooks.x/a/b/ http://h/api/webhooks/1/abcdefghijklmnop0/bot1:x",
		"redis://:pa#ss@cache:6379 https://u:p?w@h/x?y=a@b r://:p/@[::1]:1#x@y",
		"url redis://:p@ss/w0rd@host:6379/0 x https://u:pw@h/x?to=a@b.com m://u:p@s/s@h1:1,h2:2/db r://:p@s/w@/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, ui := range []Userinfo{Mask, Display, Password} {
			out := URLs(text, ui)
			if again := URLs(out, ui); again != out {
				t.Fatalf("URLs(%q, %d) = %q, then %q", text, ui, out, again)
			}
			for _, raw := range urlRE.FindAllString(out, -1) {
				if _, rest, _ := strings.Cut(raw, "://"); !strings.HasPrefix(raw, Masked) {
					if at, _ := specialUserinfo(rest); at >= 0 {
						t.Fatalf("URLs(%q, %d) = %q: user information %q shows", text, ui, out, rest[:at])
					}
				}
				u, err := url.Parse(raw)
				if err != nil {
					continue
				}
				if pw, ok := u.User.Password(); ok && pw != Masked {
					t.Fatalf("URLs(%q, %d) = %q: password %q shows", text, ui, out, pw)
				}
				if name := u.User.Username(); u.User != nil && (ui == Mask && name != Masked || ui == Display) {
					t.Fatalf("URLs(%q, %d) = %q: user %q shows", text, ui, out, name)
				}
				for _, item := range strings.Split(u.RawQuery, "&") {
					if k, v, ok := strings.Cut(item, "="); item != "" && (ok && (secretParam(k) || nestedSecret(v)) && v != Masked || !ok && item != Masked) {
						t.Fatalf("URLs(%q, %d) = %q: query item %q shows", text, ui, out, item)
					}
				}
				_, rest, _ := strings.Cut(strings.Split(strings.Split(raw, "#")[0], "?")[0], "://")
				if _, p, ok := strings.Cut(rest, "/"); ok {
					hook := false
					for _, seg := range strings.Split(p, "/") {
						if strings.Contains(seg, "%") && nestedSecret(seg) || hook && hookSecret(seg) || telegramBot.MatchString(seg) {
							t.Fatalf("URLs(%q, %d) = %q: path segment %q shows", text, ui, out, seg)
						}
						hook = hook || hookSegments[strings.ToLower(seg)]
					}
				}
			}
			for _, esc := range escapedURL.FindAllString(out, -1) {
				if nestedSecret(esc) {
					t.Fatalf("URLs(%q, %d) = %q: escaped URL %q shows", text, ui, out, esc)
				}
			}
		}
	})
}
