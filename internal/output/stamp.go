package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"

	"github.com/gpumem/gpumem/internal/version"
)

// SchemaVersion is the version of every JSON document gpumem prints. It
// goes up when a key is removed or changes meaning; new keys keep it.
const SchemaVersion = 1

// Generator names the program that wrote a JSON document.
type Generator struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// generator is this build of gpumem.
func generator() Generator { return Generator{Name: "gpumem", Version: version.Get().Short()} }

// generatorLine is the generator as a report's header shows it.
func generatorLine() string { g := generator(); return g.Name + " " + g.Version }

// Stamp opens every JSON document gpumem prints, so that a stored result
// says what wrote it. The documents embed it first; the parts that are
// nested in others (a replay's document in a diff) go without.
type Stamp struct {
	SchemaVersion int       `json:"schema_version"`
	Generator     Generator `json:"generator"`
}

func stamp() Stamp { return Stamp{SchemaVersion: SchemaVersion, Generator: generator()} }

// writeJSON writes doc indented by two spaces, with a final newline.
// escapeHTML escapes <, > and & as encoding/json does by default; the
// replay report leaves them as they are, for frames such as "<module>".
//
// The document is encoded compact and indented on its way out (as
// json.Indent would), not indented whole in memory first: a replay
// report of many private pools is megabytes.
func writeJSON(w io.Writer, doc any, escapeHTML bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	writeIndented(bw, buf.Bytes())
	return bw.Flush()
}

// writeIndented writes src, compact JSON as encoding/json writes it, to
// w indented by two spaces as json.Indent does: a newline and the depth's
// indent after each opening bracket, comma and before each closing one,
// a space after each colon, and an empty object or array as {} or [].
// The bytes between those marks (strings, numbers, literals) go out a
// run at a time, and each newline with its indent in one write.
func writeIndented(w *bufio.Writer, src []byte) {
	depth, open := 0, false // open: the last byte opened an object or array
	indent := []byte("\n")
	newline := func() {
		for len(indent) < 1+2*depth {
			indent = append(indent, "  "...)
		}
		w.Write(indent[:1+2*depth])
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if open && c != '}' && c != ']' {
			open = false
			depth++
			newline()
		}
		switch c {
		case '"': // the string whole, its escapes included
			j := i + 1
			for ; j < len(src) && src[j] != '"'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			w.Write(src[i:min(j+1, len(src))])
			i = j
		case '{', '[':
			open = true
			w.WriteByte(c)
		case ',':
			w.WriteByte(c)
			newline()
		case ':':
			w.WriteString(": ")
		case '}', ']':
			if open {
				open = false
			} else {
				depth--
				newline()
			}
			w.WriteByte(c)
		default: // a number or literal, whole
			j := i + 1
			for j < len(src) && !jsonMark[src[j]] {
				j++
			}
			w.Write(src[i:j])
			i = j - 1
		}
	}
}

// jsonMark: the bytes writeIndented acts on.
var jsonMark = [256]bool{'"': true, '{': true, '[': true, ',': true, ':': true, '}': true, ']': true}
