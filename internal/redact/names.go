package redact

import (
	"slices"
	"strings"
	"unicode"
)

// SecretName reports whether an environment variable's or a field's name
// says that its value is a secret (API_TOKEN, DB_PASSWORD, AWS_SECRET_KEY,
// apiKey). It goes by the name's words (nameWords, secretWords), not by
// what it contains: AUTHOR, KEYWORD, MONKEY and PASSENGER_COUNT are not
// secrets, DB_PWD and X-Api-Key are; nor are a secret's metadata and
// counts (TOKEN_TTL, AUTH_URL, PASSWORD_FILE, SESSION_COUNT, MAX_TOKENS)
// nor a database's keys (SORT_KEY, PRIMARY_KEY). PWD alone is the
// shell's working directory, not a password. Pairs goes by the same
// rules.
func SecretName(name string) bool {
	return name != "PWD" && secretWords(nameWords(name))
}

// secretWords reports whether words, a name's (nameWords), say that its
// value is a secret. The rule, which SecretName and Pairs share:
//
//   - a word that is one of secretWord (password, pw, token, key, auth,
//     session, ...) or ends with one of secretEnds (ROOTPASSWORD,
//     JSESSIONID) makes the name a secret's; a name that is sid alone
//     (a session cookie) is one too, ORACLE_SID is not;
//   - unless its last word is one of metaWords: the value is then about
//     a secret, not the secret (TOKEN_TTL, AUTH_URL, PASSWORD_FILE,
//     API_KEY_ID, TOKEN_TYPE, SESSION_COUNT, TOKENS_USED). A session's
//     id is the exception, as it is the session's credential
//     (SESSION_ID, session-id). A URL's password is still hidden, by
//     URL, where the value is shown;
//   - or its first word counts (MAX_TOKENS, NUM_KEYS);
//   - key and keys count only alone or after a word that is not one of
//     dataKeys: key=, signing_key= and api-key: are secrets,
//     sort_key=, primary-key= and idempotency_key= name a database's or
//     a cache's keys (and keyspace= and keyboard= are other words).
func secretWords(words []string) bool {
	n := len(words)
	if n == 0 || n > 1 && countWords[words[0]] {
		return false
	}
	if last := words[n-1]; metaWords[last] && !(last == "id" && n > 1 && sessionWords[words[n-2]]) {
		return false
	}
	if n == 1 && words[0] == "sid" {
		return true
	}
	for i, w := range words {
		if (w == "key" || w == "keys") && i > 0 && dataKeys[words[i-1]] {
			continue
		}
		if secretWord[w] || slices.ContainsFunc(secretEnds, func(end string) bool { return strings.HasSuffix(w, end) }) {
			return true
		}
	}
	return false
}

// secretWord are the words of a name that say its value is a secret.
var secretWord = map[string]bool{
	"password": true, "passwd": true, "pwd": true, "pw": true, "pass": true, "passphrase": true,
	"secret": true, "secrets": true, "token": true, "tokens": true, "bearer": true, "jwt": true,
	"key": true, "keys": true, "apikey": true, "auth": true, "authorization": true,
	"credential": true, "credentials": true, "creds": true, "private": true,
	"signature": true, "sig": true, "session": true, "cookie": true, "cookies": true, "dsn": true,
}

// secretEnds are the ends of a word that make it a secret's name when
// the name does not separate its words (ROOTPASSWORD, CLIENTSECRET,
// PHPSESSID): only those no common word ends with (not key: MONKEY; not
// pass: BYPASS).
var secretEnds = []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "credentials", "sessionid", "sessid"}

// metaWords are the last words of a name whose value is about a secret,
// not the secret itself: where it is, how long it lasts, what kind it
// is, how many there are, whether it is on.
var metaWords = map[string]bool{
	"ttl": true, "url": true, "uri": true, "host": true, "hostname": true, "port": true,
	"user": true, "username": true, "name": true, "type": true, "kind": true, "file": true, "path": true, "dir": true,
	"env": true, "id": true, "header": true, "prefix": true, "count": true, "len": true, "length": true,
	"size": true, "used": true, "expiry": true, "expires": true, "expiration": true, "at": true, "timeout": true,
	"enabled": true, "disabled": true, "required": true, "mode": true, "method": true, "scheme": true,
	"alg": true, "algorithm": true, "format": true, "version": true,
}

// countWords are the first words of a name whose value is a number of
// things (MAX_TOKENS, NUM_KEYS), not one of them.
var countWords = map[string]bool{"max": true, "min": true, "num": true, "total": true, "count": true}

// sessionWords are the words before id that make the name a session's
// id, which is its credential.
var sessionWords = map[string]bool{"session": true, "sess": true}

// dataKeys are the words before key that make it a database's, a
// cache's or a queue's key, a name rather than a secret.
var dataKeys = map[string]bool{
	"sort": true, "primary": true, "partition": true, "foreign": true, "unique": true, "shard": true,
	"range": true, "cache": true, "idempotency": true, "dedup": true, "dedupe": true, "routing": true,
	"row": true, "lookup": true, "composite": true, "index": true, "item": true, "object": true,
	"record": true, "redis": true, "natural": true, "surrogate": true, "compound": true,
}

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
