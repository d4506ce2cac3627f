package redact

import (
	"regexp"
	"strings"
)

// A short flag is a password only to the commands that say so: -p is
// MySQL's, MariaDB's, mongo's and sshpass's password (-phunter2; and
// -p hunter2 but for MySQL's), but redis-cli's, psql's and ssh's port,
// mkdir's and cp's switch (mkdir -p /var/x), and the start of find's
// -print and gcc's -pthread. So a flag's value is hidden only in a
// command passwordCommand names, from its name to the end of the line
// or of the command (|, ;, &): hiding every -p value would garble
// those, and hiding only what cannot be a port would show a numeric
// MySQL password (-p123456). Elsewhere -p's value stays; --password's
// is hidden anywhere (flagRE) but after MySQL's and MariaDB's
// --password, which asks for one as their -p does (askFlags).

// passwordCommand finds the name of a command one of whose flags takes
// a password (commandFlagsOf: MySQL's and MariaDB's clients, mongo's,
// sshpass, 7-Zip, RAR, redis-cli and its forks, curl, OpenLDAP's
// clients, Samba's), as a word or at the end of a path (/usr/bin/mysql,
// C:\bin\mysql.exe), with a blank after it.
var passwordCommand = regexp.MustCompile(`(?i)(?:^|[\s/\\'"(=` + "`" + `])(` + pwCommands + `)(?:\.exe)?[ \t]`)

// pwCommands are the names of the commands commandFlagsOf knows.
const pwCommands = `mysql[a-z]*|mariadb(?:-[a-z]+)?|mongo(?:sh|dump|restore|export|import|stat|top|files)?|sshpass|7z[ar]?|(?:un)?rar|(?:redis|valkey|keydb)-cli|curl|ldap(?:search|add|modify|delete|whoami|passwd|compare|modrdn|exop)|smbclient|rpcclient|smbcacls|smbcquotas|smbget|smbtree`

// pwProgram matches an argument that names one of pwCommands, alone or
// at the end of a path.
var pwProgram = regexp.MustCompile(`(?i)(?:^|[/\\])(` + pwCommands + `)(?:\.exe)?$`)

// argFlag matches an argument that is a flag alone: --password, -token.
var argFlag = regexp.MustCompile(`^--?([\w.-]+)$`)

// Args returns argv, a command and its arguments as a list (as a
// configuration gives sink.exec.command), with what Pairs would hide in
// it written as one command line hidden: each argument as Pairs hides
// it, the argument after a flag that names a secret (--password, as
// flagRE), and the passwords of the flags of a command that an argument
// names (commandFlagsOf: ["mysql", "-phunter2"], ["curl", "-u",
// "admin:hunter2"], ["ldapsearch", "-w", "hunter2"]), as in text. An
// argument that starts with '-' is no value. Applied twice, it changes
// nothing more.
func Args(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = Pairs(a)
	}
	var cmd *pwCommand // the command whose arguments these are
	for i := 0; i < len(out); i++ {
		a := out[i]
		if m := pwProgram.FindStringSubmatch(a); m != nil {
			c := commandFlagsOf(strings.ToLower(m[1]))
			cmd = &c
			if _, pws := redisAuthArgs(out[i+1:], false); c.redis {
				for _, pw := range pws {
					k := i + 1 + pw // redis-cli AUTH pw
					out[k] = maskArg(out[k], appendValue(nil, out[k], 0, "", 0))
				}
			}
			continue
		}
		var masks [][2]int
		if cmd != nil && cmd.asks(a) {
			continue // mysql --password db: db is no password
		} else if f := argFlag.FindStringSubmatchIndex(a); f != nil && pairName(a, f[2], f[3]) && i+1 < len(out) {
			if shown, ok := secretURL(out[i+1]); ok {
				i++ // --dsn postgres://xxxxx@db:5432/prod, as Pairs shows it
				out[i] = shown
				continue
			}
			masks = appendValue(nil, out[i+1], 0, "", 0)
		} else if cmd == nil {
			continue
		} else if f, v, ok := cmd.flag(a); ok && v >= 0 {
			out[i] = maskArg(a, appendValue(nil, a[v:], v, "", f.after))
			continue
		} else if ok && i+1 < len(out) {
			masks = appendValue(nil, out[i+1], 0, "", f.after)
		} else if cmd.optionsFirst && !strings.HasPrefix(a, "-") {
			cmd = nil
			continue
		} else {
			continue
		}
		if !strings.HasPrefix(out[i+1], "-") { // else the next flag: mongosh -p -u root asks
			i++
			out[i] = maskArg(out[i], masks)
		}
	}
	return out
}

// maskArg returns a with what masks says replaced with xxxxx: one
// range at most, as appendValue returns it.
func maskArg(a string, masks [][2]int) string {
	for _, m := range masks {
		a = a[:m[0]] + Masked + a[m[1]:]
	}
	return a
}

// pwFlag is a flag of a command that takes a password.
type pwFlag struct {
	short string // its letters after "-", or "": -p, RAR's -hp
	long  string // its long form, or "": --user value, --user=value
	// attached says that only -pVALUE and --long=VALUE hold a password:
	// the flag alone asks for one, and the next word is no value (mysql
	// -u root -p orders_db, mysql --password orders_db).
	attached bool
	// after is the character after which the value holds the password
	// (curl -u user:pw, smbclient -U user%pw): the user stays, and a
	// value without it holds none (curl asks). 0: the whole value.
	after byte
}

// pwCommand is what commandFlags knows of a command's flags.
type pwCommand struct {
	flags []pwFlag
	// bundled says that short flags combine, the last one taking the
	// value (curl -su user:pw, ldapsearch -xw pw).
	bundled bool
	// optionsFirst says that its options end at the first word that is
	// not one: sshpass -p pw ssh -p 2222 host runs ssh, whose -p is its
	// port.
	optionsFirst bool
	// redis says that the words after its options are a Redis command,
	// whose AUTH's password is hidden too (redisAuthArgs).
	redis bool
}

// commandFlagsOf returns what commandFlags knows of the flags of name, a
// command passwordCommand found, in lower case.
func commandFlagsOf(name string) pwCommand {
	switch {
	case strings.HasPrefix(name, "mysql"), strings.HasPrefix(name, "mariadb"):
		// --password[=X] and -p[X]: the value is optional, and only one
		// attached is taken (mysql --password db asks, and db is the
		// database); so for the second to third factors' --password1, 2
		// and 3 (MySQL 8.0.27 and on).
		return pwCommand{flags: []pwFlag{{short: "p", long: "password", attached: true},
			{long: "password1", attached: true}, {long: "password2", attached: true}, {long: "password3", attached: true}}}
	case strings.HasPrefix(name, "7z"), strings.HasSuffix(name, "rar"):
		// 7z -p, rar -p and -hp ask; RAR's -hp encrypts the headers too.
		return pwCommand{flags: []pwFlag{{short: "p", attached: true}, {short: "hp", attached: true}}}
	case strings.HasSuffix(name, "-cli"):
		return pwCommand{flags: []pwFlag{{short: "a", long: "pass"}}, redis: true} // -p is the port
	case name == "sshpass":
		return pwCommand{flags: []pwFlag{{short: "p"}}, optionsFirst: true}
	case name == "curl":
		return pwCommand{flags: []pwFlag{{short: "u", long: "user", after: ':'}, {short: "U", long: "proxy-user", after: ':'}}, bundled: true}
	case name == "ldappasswd": // -a the old password, -s the new one
		return pwCommand{flags: []pwFlag{{short: "w"}, {short: "a"}, {short: "s"}}, bundled: true}
	case strings.HasPrefix(name, "ldap"): // -W asks
		return pwCommand{flags: []pwFlag{{short: "w"}}, bundled: true}
	case strings.HasPrefix(name, "mongo"):
		return pwCommand{flags: []pwFlag{{short: "p"}}}
	}
	return pwCommand{flags: []pwFlag{{short: "U", long: "user", after: '%'}}, bundled: true} // Samba's
}

// commandFlags returns text with the password in the value of each
// password flag of each command passwordCommand finds replaced with
// xxxxx: mysql -uroot -pxxxxx db, redis-cli -p 6379 -a xxxxx, curl -u
// admin:xxxxx; and the password of redis-cli's AUTH command
// (redisAuthWords: redis-cli -h h AUTH app xxxxx).
func commandFlags(text string) string {
	out := splicer{text: text}
	end := 0 // of the last command
	for _, m := range passwordCommand.FindAllStringSubmatchIndex(text, -1) {
		if m[0] < end {
			continue // inside the last command
		}
		cmd := commandFlagsOf(strings.ToLower(text[m[2]:m[3]]))
		var masks [][2]int
		if cmd.redis {
			// Its options up to its Redis command, then the command's AUTH.
			at, stop, auth := redisAuthWords(text, m[1])
			_, masks = flagValues(text[:at], m[1], cmd)
			end, masks = stop, append(masks, auth...)
		} else {
			end, masks = flagValues(text, m[1], cmd)
		}
		for _, v := range masks {
			out.replace(v[0], v[1], Masked)
		}
	}
	return out.String()
}

// redisCLIValue are the options of redis-cli that take the next word
// as their value (redis-cli --help, 7.0): the words after the options
// are the command, from the first that is neither an option nor such a
// value. -a and --pass, the password, are among them.
var redisCLIValue = map[string]bool{
	"-h": true, "-p": true, "-s": true, "-a": true, "-u": true, "-r": true, "-i": true, "-n": true, "-t": true,
	"-d": true, "-D": true, "-X": true, "--user": true, "--pass": true, "--sni": true, "--cacert": true,
	"--cacertdir": true, "--cert": true, "--key": true, "--tls-ciphers": true, "--tls-ciphersuites": true,
	"--show-pushes": true, "--lru-test": true, "--rdb": true, "--functions-rdb": true, "--pipe-timeout": true,
	"--memkeys-samples": true, "--pattern": true, "--quoted-pattern": true, "--intrinsic-latency": true, "--count": true,
}

// redisAuthArgs returns, of words, redis-cli's arguments after its
// name (quotes and all), where its Redis command starts (len(words) when
// there is none) and which of its words hold a password
// (redisPasswords). With --eval or --cluster there is no command: the
// words are a script's keys and arguments, or a cluster manager's. With
// punct, the arguments end at the first that ends with : , or ;
// (punctEnd), where the text around the command goes on: redis-cli AUTH
// pw: WRONGPASS.
func redisAuthArgs(words []string, punct bool) (cmd int, pws []int) {
	for cmd = 0; cmd < len(words); cmd++ {
		switch w := strings.Trim(words[cmd], `'"`); {
		case w == "--eval" || w == "--cluster":
			return len(words), nil
		case redisCLIValue[w]:
			cmd++
		case !strings.HasPrefix(w, "-"):
			args := words[cmd+1:]
			for i, a := range args {
				if punct && punctEnd(a, 0) != a {
					args = args[:i+1]
					break
				}
			}
			for _, i := range redisPasswords(words[cmd], args) {
				pws = append(pws, cmd+1+i)
			}
			return cmd, pws
		}
	}
	return len(words), nil
}

// Options of the Redis commands that take a password, which end the
// words of one (credentialRun).
var (
	helloOptions   = map[string]bool{"AUTH": true, "SETNAME": true}
	migrateOptions = map[string]bool{"COPY": true, "REPLACE": true, "AUTH": true, "AUTH2": true, "KEYS": true}
)

// redisPasswords returns which of args, the arguments of the Redis
// command name (quotes and all, in any case), hold a password, read as
// Redis reads them (credentialRun): AUTH pw and AUTH user pw; HELLO 3
// AUTH user pw [SETNAME name]; MIGRATE host port key db timeout [COPY]
// [REPLACE] [AUTH pw | AUTH2 user pw] [KEYS key ...] (a second outside
// trial). A key called auth stays: MIGRATE's options start after its
// five fixed arguments, the third of which is its key, and every word
// after KEYS is a key.
func redisPasswords(name string, args []string) []int {
	var pws []int
	switch redisWord(name) {
	case "AUTH":
		pws, _ = credentialRun(args, 0, 1, true, nil)
	case "HELLO":
		for i := 0; i < len(args); i++ {
			switch redisWord(args[i]) {
			case "AUTH":
				run, next := credentialRun(args, i+1, 2, true, helloOptions)
				pws, i = append(pws, run...), next-1
			case "SETNAME":
				i++ // a client may be called auth
			}
		}
	case "MIGRATE":
		for i := 5; i < len(args); i++ {
			var run []int
			next := i + 1
			switch redisWord(args[i]) {
			case "AUTH":
				run, next = credentialRun(args, i+1, 1, false, migrateOptions)
			case "AUTH2":
				run, next = credentialRun(args, i+1, 2, true, migrateOptions)
			case "KEYS":
				return pws
			}
			pws, i = append(pws, run...), next-1
		}
	}
	return pws
}

// redisWord returns w, a word of a Redis command, without its quotes, in
// upper case.
func redisWord(w string) string { return strings.ToUpper(strings.Trim(w, `'"`)) }

// credentialRun returns which of args from from hold the credential of
// an AUTH (or AUTH2) that takes need words (a password: 1; a user and a
// password: 2), and where its words end. Redis takes the first need
// words whatever they are; the run goes on to the next of the command's
// options (stop) or its end. Redis refuses a run longer than need, but
// one is a password with blanks in it typed without quotes (AUTH my
// pass phrase), and what it shows would be part of that: so a run of
// two with a user (withUser) hides its second word, and any other run
// every word, the user too, as which word is the user no longer shows.
func credentialRun(args []string, from, need int, withUser bool, stop map[string]bool) (run []int, next int) {
	next = min(from+need, len(args))
	for next < len(args) && !stop[redisWord(args[next])] {
		next++
	}
	for i := from; i < next; i++ {
		run = append(run, i)
	}
	if withUser && len(run) == 2 {
		run = run[1:]
	}
	return run, next
}

// redisAuthWords returns where the Redis command of redis-cli's words
// in text from i starts (the end of its options: redisAuthArgs) and
// where they end, and where its passwords are, as flagValues returns
// them.
func redisAuthWords(text string, i int) (cmd, end int, masks [][2]int) {
	var words []string
	var starts []int
	for last := false; !last; {
		var start int
		start, i, last = nextWord(text, i)
		if start < i {
			words, starts = append(words, text[start:i]), append(starts, start)
		}
	}
	at, pws := redisAuthArgs(words, true)
	if at == len(words) {
		return i, i, nil
	}
	for _, pw := range pws {
		masks = appendValue(masks, punctEnd(words[pw], 0), starts[pw], "", 0)
	}
	return starts[at], i, masks
}

// flagValues reads the words of a command from i to the end of its line
// or of the command, and returns where it ended and where the passwords
// in the values of its flags (cmd) are: -fvalue, -f value, -f'value',
// '-fvalue' (without the closing quote), --long value, --long=value. A
// value that starts with '-' is the next flag (mongosh -p -u root asks
// for the password); one that is xxxxx is hidden already. With
// optionsFirst, the words end at the first that is not a flag.
func flagValues(text string, i int, cmd pwCommand) (end int, masks [][2]int) {
	var pending *pwFlag // the last word was this flag alone
	for {
		start, stop, last := nextWord(text, i)
		if start == stop {
			return stop, masks
		}
		i = stop
		word := text[start:stop]
		w := strings.TrimLeft(word, `'"`)
		off := len(word) - len(w) // quotes before the flag
		switch f, v, ok := cmd.flag(w); {
		case pending != nil:
			if !strings.HasPrefix(w, "-") {
				masks = appendValue(masks, punctEnd(word, pending.after), start, "", pending.after)
			}
			pending = nil
		case ok && v < 0:
			pending = f
		case ok:
			// '-fvalue': the quote that closes the word stays.
			masks = appendValue(masks, punctEnd(w[v:], f.after), start+off+v, word[:off], f.after)
		case cmd.optionsFirst && !strings.HasPrefix(w, "-"):
			return start, masks
		}
		if last {
			return stop, masks
		}
	}
}

// punctEnd returns v, a flag's value in a command line, without the :
// , and ; that end it, which mark the text around the command, not the
// password: smbclient -U alice%secret: NT_STATUS_LOGON_FAILURE shows
// alice%xxxxx:, as Pairs' other passes keep such marks. What would
// leave no password keeps them: a value that is only those marks, or
// one with nothing else after its after (curl -u a:: has ":" for one).
func punctEnd(v string, after byte) string {
	keep := 1
	if after != 0 {
		if k := strings.IndexByte(v, after); k >= 0 {
			keep = k + 2
		}
	}
	w := strings.TrimRight(v, ":,;")
	if len(w) < keep {
		return v[:min(keep, len(v))]
	}
	return w
}

// flag returns the password flag that w, a word of the command without
// the quotes before it, is, and where its value starts in w: -1 for a
// flag whose value is the next word. ok is false when w is none.
func (c pwCommand) flag(w string) (f *pwFlag, v int, ok bool) {
	if long, isLong := strings.CutPrefix(w, "--"); isLong {
		for i := range c.flags {
			f := &c.flags[i]
			if f.long == "" {
				continue
			}
			if long == f.long || long == f.long+`'` || long == f.long+`"` {
				if f.attached {
					return nil, 0, false // --password alone asks
				}
				return f, -1, true
			}
			if strings.HasPrefix(long, f.long+"=") {
				return f, 2 + len(f.long) + 1, true
			}
		}
		return nil, 0, false
	}
	if len(w) < 2 || w[0] != '-' {
		return nil, 0, false
	}
	for k := 1; k < len(w); k++ {
		for i := range c.flags {
			if f := &c.flags[i]; f.short != "" && strings.HasPrefix(w[k:], f.short) {
				switch n := k + len(f.short); {
				case n < len(w) && !strings.ContainsRune(`'"`, rune(w[n])) || n+1 < len(w):
					return f, n, true // -pVALUE, -p'VALUE'
				case f.attached:
					return nil, 0, false // -p alone asks
				}
				return f, -1, true
			}
		}
		if !c.bundled || !isLetter(w[k]) {
			break
		}
	}
	return nil, 0, false
}

// asks reports whether w, a word of the command, is a password flag
// alone that asks for the password and takes no value (attached: mysql
// -p, mysql --password), so that the next word shows, which flagRE and
// Args would take for the value of a flag that names a secret.
func (c pwCommand) asks(w string) bool {
	for _, f := range c.flags {
		if f.attached && (f.long != "" && w == "--"+f.long || f.short != "" && w == "-"+f.short) {
			return true
		}
	}
	return false
}

// askFlags returns where, in text, the names of the flags that ask for
// a password (asks) start, after their "--" or "-": flagRE leaves the
// word after them.
func askFlags(text string) map[int]bool {
	at := map[int]bool{}
	end := 0 // of the last command
	for _, m := range passwordCommand.FindAllStringSubmatchIndex(text, -1) {
		if m[0] < end {
			continue // inside the last command
		}
		cmd := commandFlagsOf(strings.ToLower(text[m[2]:m[3]]))
		for last := false; !last; {
			var start int
			start, end, last = nextWord(text, max(end, m[1]))
			if w := text[start:end]; cmd.asks(w) {
				at[start+len(w)-len(strings.TrimLeft(w, "-"))] = true
			}
		}
	}
	return at
}

// isLetter reports whether c is an ASCII letter.
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// appendValue appends to masks where the password in v, a value at
// start in the text, is, without the quote that ends it if that is open
// (the quotes that opened the word around it), unless it is empty or
// xxxxx. Any other quote goes with the value: the one that stays must
// still close. With after, the password is what follows the first after
// in v, and the quote that closes one before it stays
// ('admin:xxxxx'), unless it holds a quote of its own; a value without
// after holds none.
func appendValue(masks [][2]int, v string, start int, open string, after byte) [][2]int {
	if k := quoteAt(v, open); k >= 0 && after == 0 {
		// The quote that closes the word's stays where it falls ('-ppw',
		// '-p'pw, '-pp'w: FuzzPairs), and the value's pieces on either
		// side of it go: taken with the value, it left the quote open and
		// the next pass hid more.
		for _, piece := range [][2]int{{start, start + k}, {start + k + 1, start + len(v)}} {
			if w := v[piece[0]-start : piece[1]-start]; w != "" && w != Masked {
				masks = append(masks, piece)
			}
		}
		return masks
	}
	switch {
	case open != "" && strings.HasPrefix(v, open[:1]):
		// '-p'pw: the quote closes before the value, which follows it.
		v, start = v[1:], start+1
	case open != "":
		v = strings.TrimSuffix(v, open[:1])
	}
	if after != 0 {
		k := strings.IndexByte(v, after)
		if k < 0 {
			return masks
		}
		pw := v[k+1:]
		if q := openQuote(v[:k]); q != 0 {
			pw = strings.TrimSuffix(pw, string(q))
		}
		if !strings.ContainsAny(pw, `'"`) {
			v, start = pw, start+k+1
		} // else the whole value goes: the quotes left must still close
	}
	if v == "" || v == Masked {
		return masks
	}
	return append(masks, [2]int{start, start + len(v)})
}

// quoteAt returns where in v the quote that open (the quotes before a
// flag) starts with is, -1 when open is empty or v holds none.
func quoteAt(v, open string) int {
	if open == "" {
		return -1
	}
	return strings.IndexByte(v, open[0])
}

// openQuote returns the quote that s leaves open, or 0.
func openQuote(s string) byte {
	var q byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case c == q:
			q = 0
		}
	}
	return q
}

// nextWord returns the next word of a command line in text from i: it
// skips blanks, and runs to a blank, a newline, or one of | ; & outside
// quotes. A quote runs to its closing quote or the end of the line. last
// says that the command ends with the word (a newline, |, ; or & after
// it, or the end of text); start == stop when there is no word left.
func nextWord(text string, i int) (start, stop int, last bool) {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
		i++
	}
	start = i
	for i < len(text) {
		switch c := text[i]; c {
		case ' ', '\t':
			return start, i, false
		case '\n', '\r', '|', ';', '&':
			return start, i, true
		case '\'', '"':
			if q := strings.IndexAny(text[i+1:], string(c)+"\n"); q >= 0 && text[i+1+q] == c {
				i += q + 2
				continue
			}
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				return start, len(text), true
			}
			return start, i + end, true
		}
		i++
	}
	return start, i, true
}
