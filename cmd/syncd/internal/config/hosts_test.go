package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Each entry of http.allowed_hosts is a host name, an IP address or a
// wildcard, and comes back as requests are matched against it; anything
// else is refused with what is wrong.
func TestAllowedHost(t *testing.T) {
	for _, tt := range []struct{ entry, want, err string }{
		{"syncd.example.com", "syncd.example.com", ""},
		{"Syncd.Example.COM.", "syncd.example.com", ""},
		{"syncd", "syncd", ""},
		{"my_service-1.internal", "my_service-1.internal", ""},
		{"*.syncd.example.com", "*.syncd.example.com", ""},
		{"*.Example.com.", "*.example.com", ""},
		{"*.svc.cluster.local", "*.svc.cluster.local", ""},
		{"10.0.0.5", "10.0.0.5", ""},
		{"2001:DB8:0::5", "2001:db8::5", ""},
		{"", "", "must not be empty: give a host name or IP address (example: syncd.example.com)"},
		{"syncd example.com", "", `"syncd example.com" contains white space or a control character`},
		// An outside trial's: malformed addresses and labels, a network.
		{"10.0.0.256", "", `"10.0.0.256" is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots`},
		{"12345", "", `"12345" is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots`},
		{"-x-.example.com", "", `"-x-.example.com" is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots`},
		{"10.0.0.0/8", "", `"10.0.0.0/8" is a network: list host names; every IP address is answered already`},
		{"1password.example.com", "1password.example.com", ""},
		{" syncd.example.com", "", `" syncd.example.com" contains white space or a control character`},
		{"syncd.example.com\x00", "", `"syncd.example.com\x00" contains white space or a control character`},
		{"http://syncd.example.com", "", `"http://syncd.example.com" has a scheme: give the host alone (example: syncd.example.com)`},
		{"syncd.example.com/", "", `"syncd.example.com/" has a path: give the host alone (example: syncd.example.com)`},
		{"syncd.example.com?x", "", `"syncd.example.com?x" has a path: give the host alone (example: syncd.example.com)`},
		{"syncd.example.com:9090", "", `"syncd.example.com:9090" has a port: give "syncd.example.com" alone; the port of a request's Host is not compared`},
		{"10.0.0.5:80", "", `"10.0.0.5:80" has a port: give "10.0.0.5" alone; the port of a request's Host is not compared`},
		{"[2001:db8::5]:80", "", `"[2001:db8::5]:80" has a port: give "2001:db8::5" alone; the port of a request's Host is not compared`},
		{"[2001:db8::5]", "", `"[2001:db8::5]": write an IPv6 address without brackets (2001:db8::5)`},
		{"fe80::1%eth0", "", `"fe80::1%eth0" has an IPv6 zone: give the address without %eth0`},
		{"*", "", `"*" is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"*.", "", `"*." is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"*example.com", "", `"*example.com" is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"*.*.example.com", "", `"*.*.example.com" is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"a.*.example.com", "", `"a.*.example.com" is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"*..", "", `"*.." is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"*.a..b", "", `"*.a..b" is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"*.10.0.0.5", "", `"*.10.0.0.5" is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)`},
		{"*.com", "", `"*.com" matches every name under com, a top-level domain or public suffix: give a domain of your own (example: *.example.com)`},
		{"*.co.uk", "", `"*.co.uk" matches every name under co.uk, a top-level domain or public suffix: give a domain of your own (example: *.example.com)`},
		{"*.github.io", "", `"*.github.io" matches every name under github.io, a top-level domain or public suffix: give a domain of your own (example: *.example.com)`},
		{"*.lan", "", `"*.lan" matches every name under lan, a top-level domain or public suffix: give a domain of your own (example: *.example.com)`},
		{"user@syncd.example.com", "", `"user@syncd.example.com" is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots`},
		{"a..b", "", `"a..b" is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots`},
		{".", "", `"." is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots`},
		{"bücher.example", "", `"bücher.example" is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots`},
	} {
		got, err := allowedHost(tt.entry)
		var gotErr string
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.err {
			t.Errorf("allowedHost(%q) = %q, %q; want %q, %q", tt.entry, got, gotErr, tt.want, tt.err)
		}
	}
}

// AllowedHosts gives the list as the guard matches it; nil when empty.
func TestAllowedHosts(t *testing.T) {
	f := mustParse(t, yamlText(`
http:
	listen: 0.0.0.0:9090
	allowed_hosts: [Syncd.Example.com., "*.Syncd.Example.com", "2001:DB8::5", 10.0.0.5]
`))
	if diff := cmp.Diff(f.AllowedHosts(), []string{"syncd.example.com", "*.syncd.example.com", "2001:db8::5", "10.0.0.5"}); diff != "" {
		t.Errorf("AllowedHosts (-got +want):\n%s", diff)
	}
	for _, src := range []string{"", "http:\n  allowed_hosts: []\n", "http:\n  allowed_hosts:\n"} {
		if got := mustParse(t, src).AllowedHosts(); got != nil {
			t.Errorf("AllowedHosts of %q = %q, want nil", src, got)
		}
	}
}
