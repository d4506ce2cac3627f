package redact

import (
	"slices"
	"strings"
	"unicode"
)

// SecretName reports whether an environment variable's or a field's name
// says that its value is a secret (API_TOKEN, DB_PASSWORD, AWS_SECRET_KEY,
// apiKey). It goes by the name's words (nameWords), not by what it
// contains: AUTHOR, KEYWORD, MONKEY and PASSENGER_COUNT are not secrets,
// DB_PWD and X-Api-Key are. A word is a secret when it is one of
// secretWords, or ends with one of secretEnds (DBPASSWORD, ACCESSTOKEN,
// MYAPIKEY). PWD alone is the shell's working directory, not a password.
func SecretName(name string) bool {
	if name == "PWD" {
		return false
	}
	return slices.ContainsFunc(nameWords(name), func(w string) bool {
		return secretWords[w] || slices.ContainsFunc(secretEnds, func(end string) bool { return strings.HasSuffix(w, end) })
	})
}

// secretWords are the words of a name that say its value is a secret.
var secretWords = map[string]bool{
	"password": true, "passwd": true, "pwd": true, "pw": true, "pass": true, "passphrase": true,
	"secret": true, "secrets": true, "token": true, "tokens": true, "bearer": true, "jwt": true,
	"key": true, "keys": true, "apikey": true, "auth": true, "authorization": true,
	"credential": true, "credentials": true, "creds": true, "private": true,
	"signature": true, "sig": true, "session": true, "cookie": true, "cookies": true, "dsn": true,
}

// secretEnds are the ends of a word that make it a secret's name when
// the name does not separate its words (ROOTPASSWORD, CLIENTSECRET):
// only those no common word ends with (not key: MONKEY; not pass: BYPASS).
var secretEnds = []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "credentials"}

// nameWords splits a name into its words, in lower case: at '_', '-',
// '.' and any other character that is neither a letter nor a digit,
// where letters meet digits, and at camelCase boundaries (apiKey: api,
// key; APIKey: api, key; OAuthToken: o, auth, token).
func nameWords(name string) []string {
	var words []string
	rs := []rune(name)
	start := 0
	kind := func(r rune) int {
		switch {
		case unicode.IsUpper(r):
			return 'A'
		case unicode.IsLetter(r):
			return 'a'
		case unicode.IsDigit(r):
			return '0'
		}
		return 0
	}
	for i := 0; i <= len(rs); i++ {
		split := i == len(rs) || kind(rs[i]) == 0
		if !split && i > start {
			prev, cur := kind(rs[i-1]), kind(rs[i])
			next := 0
			if i+1 < len(rs) {
				next = kind(rs[i+1])
			}
			split = (prev == '0') != (cur == '0') || // a letter meets a digit
				prev == 'a' && cur == 'A' || // apiKey
				prev == 'A' && cur == 'A' && next == 'a' // APIKey
		}
		if !split {
			continue
		}
		if i > start {
			words = append(words, strings.ToLower(string(rs[start:i])))
		}
		start = i
		if i < len(rs) && kind(rs[i]) == 0 {
			start = i + 1
		}
	}
	return words
}
