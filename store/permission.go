package store

import (
	"errors"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrPermission is what an ACL refusal of Redis's is (errors.Is): the
// user syncd logs in as lacks a command or a key one of its calls needs.
// Retrying cannot help until an operator grants it; IsPermission tells
// one from any error a call returns.
var ErrPermission = errors.New("store: redis user lacks a permission")

// PermissionError is an ACL refusal: Err is Redis's reply, as wrapped
// by the call that got it. Its text is Err's without what Redis adds
// when a script's command was refused (" script: <sha>, on
// @user_script:38."), which nobody can act on, and, from Redis 7.0, in
// its place where to find the command: 7.0 names none there, where a
// command's own NOPERM does; its ACL LOG does (context lua, object
// zscore), but reading it takes the acl command, which syncd's user
// should not have. Redis 7.2 and later (and Valkey) name the command in
// a script's refusal as NOPERM does ("ACL failure in script: User syncd
// has no permissions to run the 'zscore' command"), though not the key.
type PermissionError struct{ Err error }

// scriptWhere is the place Redis names in a refusal inside a script.
var scriptWhere = regexp.MustCompile(` script: [0-9a-f]{40}, on @user_script:\d+\.`)

func (e *PermissionError) Error() string {
	s := e.Err.Error()
	if t := scriptWhere.ReplaceAllString(s, ""); t != s {
		if strings.Contains(t, inScriptFailure) {
			return t
		}
		if strings.Contains(t, inScriptRefusal+"access") {
			return t + " (a key a command of its script names: Redis's ACL LOG names it)"
		}
		return t + " (a command its script calls: Redis's ACL LOG names it)"
	}
	return s
}

func (e *PermissionError) Unwrap() error { return e.Err }

// namedCommand is the command a NOPERM names ("... no permissions to run
// the 'evalsha' command").
var namedCommand = regexp.MustCompile(`to run the '([^' ]+)' command`)

// Refused says in a few words what Redis refused: "command evalsha", "a
// key", or inside a script, where Redis 7.0 names neither (7.2 names the
// command), "a command a script calls" or "a key a script names" (its
// ACL LOG names them);
// Redis's reply, without the script's place, when it is none of these.
// It names no shard, item or key, so that one missing grant reads the
// same from every shard and every item it refuses: the engine logs one
// line per Refused, where it logged one per shard.
func (e *PermissionError) Refused() string {
	reply := e.Err.Error()
	var re redis.Error
	if errors.As(e.Err, &re) {
		reply = re.Error() // without the call's wrapping, which names the shard
	}
	inScript := strings.Contains(reply, inScriptRefusal) || strings.Contains(reply, inScriptFailure)
	switch m := namedCommand.FindStringSubmatch(reply); {
	case m != nil:
		return "command " + m[1]
	case inScript && (strings.Contains(reply, "can't access") || strings.Contains(reply, "access a key")):
		return "a key a script names"
	case inScript && strings.Contains(reply, "can't run"):
		return "a command a script calls"
	case strings.Contains(reply, "access one of the keys") || strings.Contains(reply, "access a key"):
		return "a key"
	}
	return scriptWhere.ReplaceAllString(reply, "")
}

// Is makes a PermissionError ErrPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

// inScriptRefusal starts Redis 7.0's refusals inside a script: of a
// command it calls ("can't run this command or subcommand") and of a key
// a command names ("can't access at least one of the keys mentioned in
// the command arguments"), which IsPermission did not match before.
const inScriptRefusal = "The user executing the script can't "

// inScriptFailure starts the same refusals from Redis 7.2 on, and
// Valkey's: "ACL failure in script: " and the text of a command's
// NOPERM after it ("User syncd has no permissions to run the 'del'
// command", "No permissions to access a key").
const inScriptFailure = "ACL failure in script: "

// IsPermission reports whether err is an ACL refusal: ErrPermission, a
// command's NOPERM, or, inside a script, Redis 7.0's "ERR The user
// executing the script can't run this command or subcommand" or "can't
// access at least one of the keys", or Redis 7.2's and Valkey's "ERR ACL
// failure in script: ...".
func IsPermission(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrPermission) || redis.IsPermissionError(err) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, inScriptRefusal) || strings.Contains(s, inScriptFailure)
}

// Permission returns err as a *PermissionError when it is an ACL
// refusal not made one yet, and err otherwise.
func Permission(err error) error {
	if !IsPermission(err) || errors.Is(err, ErrPermission) {
		return err
	}
	return &PermissionError{Err: err}
}
