package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"unicode"

	"golang.org/x/net/publicsuffix"
)

// AllowedHosts returns http.allowed_hosts as requests are matched
// against it: host names lower case without a trailing dot, IP addresses
// in their canonical form, wildcards as "*." and a domain. Nil when the
// list is empty. Parse refused any other entry.
func (f *File) AllowedHosts() []string {
	var hosts []string
	for _, h := range f.s.HTTP.AllowedHosts {
		if n, err := allowedHost(h); err == nil {
			hosts = append(hosts, n)
		}
	}
	return hosts
}

// allowedHosts checks http.allowed_hosts, each bad entry at its line.
func (p *parser) allowedHosts() {
	for i, h := range p.f.s.HTTP.AllowedHosts {
		field := fmt.Sprintf("http.allowed_hosts[%d]", i)
		if _, err := allowedHost(h); err != nil && !p.Failed(field) {
			p.report(err, field, nil, "%v", err)
		}
	}
}

// allowedHost checks h, an entry of http.allowed_hosts: a host name, an
// IP address, or "*." and a domain, which stands for every name below
// the domain (not the domain itself). It returns the entry lower case
// and without a trailing dot, an IP address in its canonical form.
//
// A Host header carries a port, which is not compared, so an entry with
// one is refused, as are schemes and paths: they are URLs, not hosts. A
// wildcard over a top-level domain or public suffix (*.com, *.github.io)
// is refused: anyone could register a name it matches, and point it at
// syncd, which is what the list guards against.
func allowedHost(h string) (string, error) {
	switch {
	case h == "":
		return "", errors.New("must not be empty: give a host name or IP address (example: syncd.example.com)")
	case strings.ContainsFunc(h, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return "", fmt.Errorf("%s contains white space or a control character", show(h))
	case strings.Contains(h, "://"):
		return "", fmt.Errorf("%s has a scheme: give the host alone (example: syncd.example.com)", show(h))
	case isPrefix(h):
		return "", fmt.Errorf("%s is a network: list host names; every IP address is answered already", show(h))
	case strings.ContainsAny(h, "/?#"):
		return "", fmt.Errorf("%s has a path: give the host alone (example: syncd.example.com)", show(h))
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		return "", fmt.Errorf("%s has a port: give %s alone; the port of a request's Host is not compared", show(h), show(host))
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		return "", fmt.Errorf("%s: write an IPv6 address without brackets (%s)", show(h), strings.Trim(h, "[]"))
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("%s has an IPv6 zone: give the address without %%%s", show(h), ip.Zone())
		}
		return ip.String(), nil
	}
	name := strings.TrimSuffix(strings.ToLower(h), ".")
	domain, wild := strings.CutPrefix(name, "*.")
	if _, err := netip.ParseAddr(domain); strings.Contains(domain, "*") || wild && (err == nil || !hostName(domain)) {
		return "", fmt.Errorf("%s is not a valid wildcard: write *. and a domain, which matches every name below it (example: *.example.com)", show(h))
	}
	if !hostName(domain) {
		return "", fmt.Errorf("%s is not a host name or IP address: a name is letters, digits, - and _ in labels joined by dots", show(h))
	}
	if _, err := publicsuffix.EffectiveTLDPlusOne(domain); wild && err != nil {
		return "", fmt.Errorf("%s matches every name under %s, a top-level domain or public suffix: give a domain of your own (example: *.example.com)", show(h), domain)
	}
	return name, nil
}

// hostName reports whether s is a DNS name, lower case: labels of 1 to 63
// letters, digits, '-' and '_', neither starting nor ending with '-',
// joined by dots, at most 253 bytes in all, the last not all digits
// (12345 and 10.0.0.256 are malformed addresses, which a browser would
// not send as names). Underscores are not in the DNS rules for host
// names but appear in container names, which a Host header may carry.
func hostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	last := ""
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' || strings.ContainsFunc(label, func(r rune) bool {
			return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_')
		}) {
			return false
		}
		last = label
	}
	return strings.ContainsFunc(last, func(r rune) bool { return r < '0' || r > '9' })
}

// isPrefix reports whether h is a network in CIDR notation.
func isPrefix(h string) bool {
	_, err := netip.ParsePrefix(h)
	return err == nil
}
