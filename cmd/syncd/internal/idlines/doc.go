// Package idlines reads lists of item IDs, one per line: the files of
// `syncd items --file` (and its standard input) and the configuration's
// items.file. Both go through Parse, so a file one accepts the other
// accepts too, with the same messages.
//
// The rules:
//
//   - A UTF-8 byte order mark at the start is dropped (editors on Windows
//     write one; it would be an invisible part of the first ID). A UTF-16
//     byte order mark is refused: the file must be saved as UTF-8.
//   - Each line holds one ID with the white space around it trimmed, so
//     CRLF line ends read as LF ones.
//   - Blank lines and lines starting with # are skipped.
//   - A line longer than MaxLineLen is reported by its number, never read
//     whole; every other ID goes to the caller's check.
//   - Every bad line is counted; the first MaxListed are listed as
//     "name:line: reason". One bad line and no ID is returned.
//   - An ID repeated is kept once, at its first line.
package idlines
