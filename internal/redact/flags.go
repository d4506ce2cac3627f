package redact

import (
	"regexp"
	"strings"
)

// A short flag is a password only to the commands that say so: -p is
// MySQL's, MariaDB's, mongo's and sshpass's password (-phunter2 and
// -p hunter2), but redis-cli's, psql's and ssh's port, mkdir's and cp's
// switch (mkdir -p /var/x), and the start of find's -print and gcc's
// -pthread. So a -p value is hidden only in a command passwordCommand
// names, from its name to the end of the line or of the command (|, ;, &):
// hiding every -p value would garble those, and hiding only what cannot
// be a port would show a numeric MySQL password (-p123456). Elsewhere
// -p's value stays; --password's is hidden anywhere (flagRE).

// passwordCommand finds the name of a command whose short flag takes a
// password (MySQL's and MariaDB's clients, mongo's, sshpass, 7-Zip, RAR,
// redis-cli and its forks), as a word or at the end of a path
// (/usr/bin/mysql, C:\bin\mysql.exe), with a blank after it.
var passwordCommand = regexp.MustCompile(`(?i)(?:^|[\s/\\'"(=` + "`" + `])(mysql[a-z]*|mariadb(?:-[a-z]+)?|mongo(?:sh|dump|restore|export|import|stat|top|files)?|sshpass|7z[ar]?|(?:un)?rar|(?:redis|valkey|keydb)-cli)(?:\.exe)?[ \t]`)

// passwordFlags are the commands of passwordCommand whose password flag
// is not -p: redis-cli's is -a, its -p is the port.
var passwordFlags = map[string]byte{"redis-cli": 'a', "valkey-cli": 'a', "keydb-cli": 'a'}

// optionsFirst are the commands whose options end at the first word
// that is not one: sshpass -p pw ssh -p 2222 host runs ssh, whose -p is
// its port.
var optionsFirst = map[string]bool{"sshpass": true}

// commandFlags returns text with the value of the password flag of each
// command passwordCommand finds replaced with xxxxx: mysql -uroot
// -pxxxxx db, redis-cli -p 6379 -a xxxxx.
func commandFlags(text string) string {
	var out strings.Builder
	done := 0 // text before it is in out
	for _, m := range passwordCommand.FindAllStringSubmatchIndex(text, -1) {
		if m[0] < done {
			continue // inside the last command
		}
		name := strings.ToLower(text[m[2]:m[3]])
		flag, ok := passwordFlags[name]
		if !ok {
			flag = 'p'
		}
		at := done
		var masks [][2]int
		done, masks = flagValues(text, m[1], flag, optionsFirst[name])
		for _, v := range masks {
			out.WriteString(text[at:v[0]])
			out.WriteString(Masked)
			at = v[1]
		}
		out.WriteString(text[at:done])
	}
	if done == 0 {
		return text
	}
	return out.String() + text[done:]
}

// flagValues reads the words of a command from i to the end of its line
// or of the command, and returns where it ended and where the values of
// its flag -f are: -fvalue, -f value, -f'value', '-fvalue' (without the
// closing quote). A value that starts with '-' is the next flag (mysql
// -p -u root asks for the password); one that is xxxxx is hidden
// already. With first, the words end at the first that is not a flag.
func flagValues(text string, i int, f byte, first bool) (end int, masks [][2]int) {
	short := "-" + string(f)
	value := false // the last word was the flag alone
	for {
		start, stop, last := nextWord(text, i)
		if start == stop {
			return stop, masks
		}
		i = stop
		word := text[start:stop]
		w := strings.TrimLeft(word, `'"`)
		off := len(word) - len(w) // quotes before the flag
		switch {
		case value:
			value = false
			if !strings.HasPrefix(w, "-") {
				masks = appendValue(masks, word, start, "")
			}
		case w == short || off > 0 && w == short+word[:1]:
			value = true
		case strings.HasPrefix(w, short) && !strings.HasPrefix(w, "--"):
			// '-fvalue': the quote that closes the word stays.
			masks = appendValue(masks, w[2:], start+off+2, word[:off])
		case first && !strings.HasPrefix(w, "-"):
			return start, masks
		}
		if last {
			return stop, masks
		}
	}
}

// appendValue appends to masks where v, a value at start in the text, is,
// without the quote that ends it if that is open (the quotes that opened
// the word around it), unless it is empty or xxxxx. Any other quote goes
// with the value: the one that stays must still close.
func appendValue(masks [][2]int, v string, start int, open string) [][2]int {
	if open != "" {
		v = strings.TrimSuffix(v, open[:1])
	}
	if v == "" || v == Masked {
		return masks
	}
	return append(masks, [2]int{start, start + len(v)})
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
