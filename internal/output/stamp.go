package output

import (
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
func writeJSON(w io.Writer, doc any, escapeHTML bool) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(escapeHTML)
	return enc.Encode(doc)
}
