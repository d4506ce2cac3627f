package redact

import (
	"net/url"
	"strings"
	"testing"
)

func TestURLs(t *testing.T) {
	tests := []struct {
		in                     string
		mask, display, passwrd string
	}{
		{"https://h/x", "https://h/x", "https://h/x", "https://h/x"},
		{"https://u:pw@h/x", "https://xxxxx@h/x", "https://h/x", "https://u:xxxxx@h/x"},
		{"https://token@h/x", "https://xxxxx@h/x", "https://h/x", "https://token@h/x"},
		{"https://h/x?api_key=k&team=a", "https://h/x?api_key=xxxxx&team=xxxxx", "https://h/x?api_key=xxxxx&team=xxxxx", "https://h/x?api_key=xxxxx&team=xxxxx"},
		{"https://h/x?k3y#frag", "https://h/x?xxxxx#frag", "https://h/x?xxxxx", "https://h/x?xxxxx#frag"},
		{"https://h/x?a=1&&b=#f?c=2", "https://h/x?a=xxxxx&&b=xxxxx#f?c=2", "https://h/x?a=xxxxx&&b=xxxxx", "https://h/x?a=xxxxx&&b=xxxxx#f?c=2"},
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
		{"http://user:pw@host/%zz?token=t", Password, "http://user:xxxxx@host/%zz?token=xxxxx"},
		{"host/x?token=t", Mask, "host/x?token=xxxxx"},
		{"u:pw@h", Display, "u:pw@h"}, // no scheme: no authority either
	}
	for _, tt := range tests {
		if got := URL(tt.in, tt.ui); got != tt.want {
			t.Errorf("URL(%q, %d) = %q; want %q", tt.in, tt.ui, got, tt.want)
		}
	}
}

// FuzzURLs checks that URLs is stable, and that no URL it leaves in the
// text has a password, user information but xxxxx (Mask) or none
// (Display), or a query value but xxxxx.
func FuzzURLs(f *testing.F) {
	for _, s := range []string{"https://u:pw@h/x?a=1&b#f", `x "http://u@h?k" y`, "a://b@c@d/e?f=g&&h x_s://:p@q",
		"%zz", "redis://:p w@h", "http://[::1]:80/?q=%zz#a?b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, ui := range []Userinfo{Mask, Display, Password} {
			out := URLs(text, ui)
			if again := URLs(out, ui); again != out {
				t.Fatalf("URLs(%q, %d) = %q, then %q", text, ui, out, again)
			}
			for _, raw := range urlRE.FindAllString(out, -1) {
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
					if _, v, ok := strings.Cut(item, "="); item != "" && (ok && v != Masked || !ok && item != Masked) {
						t.Fatalf("URLs(%q, %d) = %q: query item %q shows", text, ui, out, item)
					}
				}
			}
		}
	})
}
