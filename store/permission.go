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
// @user_script:38."), which nobody can act on, and in its place where to
// find the command: Redis 7.0 names none there, where a command's own
// NOPERM does; its ACL LOG does (context lua, object zscore), but
// reading it takes the acl command, which syncd's user should not have.
type PermissionError struct{ Err error }

// scriptWhere is the place Redis names in a refusal inside a script.
var scriptWhere = regexp.MustCompile(` script: [0-9a-f]{40}, on @user_script:\d+\.`)

func (e *PermissionError) Error() string {
	s := e.Err.Error()
	if t := scriptWhere.ReplaceAllString(s, ""); t != s {
		return t + " (a command its script calls: Redis's ACL LOG names it)"
	}
	return s
}

func (e *PermissionError) Unwrap() error { return e.Err }

// Is makes a PermissionError ErrPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

// inScriptRefusal is Redis 7.0's refusal of a command a script calls;
// later versions say NOPERM there too.
const inScriptRefusal = "The user executing the script can't run this command"

// IsPermission reports whether err is an ACL refusal: ErrPermission, a
// command's NOPERM, or, inside a script, Redis 7.0's "ERR The user
// executing the script can't run this command or subcommand".
func IsPermission(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, ErrPermission) || redis.IsPermissionError(err) || strings.Contains(err.Error(), inScriptRefusal)
}

// Permission returns err as a *PermissionError when it is an ACL
// refusal not made one yet, and err otherwise.
func Permission(err error) error {
	if !IsPermission(err) || errors.Is(err, ErrPermission) {
		return err
	}
	return &PermissionError{Err: err}
}
