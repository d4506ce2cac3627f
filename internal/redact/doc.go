// Package redact owns how syncd shows a URL that may carry credentials:
// its user information hidden and the value of each query parameter but
// those of harmless names (page, sort, q, ...: plainParams) replaced with
// xxxxx, in one URL (URL) or in every URL of a free text
// (URLs), such as an error message that quotes one. The token in a
// webhook's path (Slack, Discord, Mattermost, Teams, a Telegram bot's)
// is replaced too: such a URL is its own credential. A value, a path
// segment or an escaped URL in free text that holds a URL or query of
// its own with a secret in it is replaced whole.
//
// The config package shows URLs in its messages and in the effective
// configuration with Mask; the http sink shows its target's URL in logs
// and errors with Display, and in configuration errors with Password.
// What else counts as a secret stays with each caller: config hides
// token=, password= pairs and bearer credentials by pattern, the http
// sink the values of its configured headers and URL wherever they appear.
package redact
