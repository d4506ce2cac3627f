// Package redact owns how syncd shows a URL that may carry credentials:
// its user information hidden (up to the last "@" that a host follows
// when it has a password, so that one typed with / ? # or @ in it goes
// whole: redis://xxxxx@cache:6379/0 for redis://:p@ss/w0rd@cache:6379/0)
// and the value of each query parameter but those of harmless names
// (page, sort, q, ...: plainParams) replaced with xxxxx, in one URL (URL)
// or in every URL of a free text (URLs), such as an error message that
// quotes one. The token in a webhook's path (Slack, Discord, Mattermost,
// Teams, a Telegram bot's) is replaced too: such a URL is its own
// credential. A value, a path segment or an escaped URL in free text
// that holds a URL or query of its own with a secret in it is replaced
// whole.
//
// The config package shows URLs in its messages and in the effective
// configuration with Mask; the http sink shows its target's URL in logs
// and errors with Display, and in configuration errors with Password.
// Beyond URLs, Pairs hides credentials that a text names as such
// (token=, password=, Authorization: ..., a YAML block scalar's lines
// after password: |; a name goes by its words, as SecretName's do, so
// KEYWORD=, token_ttl= and sort key: keep their values; a URL with user
// information under such a name shows as URLs shows it, its host kept:
// dsn=postgres://xxxxx@db:5432/prod), the password flags of the
// commands that have one (mysql -p…, rar -hp…, curl -u user:…,
// ldapsearch -w, smbclient -U user%…, redis-cli -a), a Redis AUTH or
// MIGRATE command echoed, the body of a PEM private key, which needs no
// name, and a URL's user information, as URLs hides it; Args does the
// same across a command's arguments given as a list. Secrets hides the
// known values of a configuration wherever they appear, as they are or
// escaped in a URL, JSON or a Go string (the http sink's headers and
// what URLSecrets returns of its URL, the exec sink's secret variables:
// SecretName), and Tail both in the end of a command's stderr; a tail
// that was cut also loses its first line, or, when that is its only
// line, the line's first clause, where what the cut may have split of a
// credential ends ("… WRONGPASS invalid password" for
// "…TH s3cret: WRONGPASS invalid password", cut inside AUTH).
package redact
