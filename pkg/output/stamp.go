package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gpumem/gpumem/pkg/version"
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

// stamped makes a JSON renderer's document start with "schema_version"
// and "generator", so that a stored result says what wrote it, for the
// documents that are built in several parts (the replay report's JSON is
// also a part of others). They are indented objects: the keys go after
// the opening brace. (SweepJSON has the two fields itself.)
func stamped[T any](r RenderFunc[T]) RenderFunc[T] {
	return func(w io.Writer, v T, o Options) error {
		var buf bytes.Buffer
		if err := r(&buf, v, o); err != nil {
			return err
		}
		doc := buf.Bytes()
		if !bytes.HasPrefix(doc, []byte("{\n")) {
			return fmt.Errorf("output: a JSON document that is not an indented object: %.20q", doc)
		}
		gen, err := json.MarshalIndent(generator(), "  ", "  ")
		if err != nil {
			return err
		}
		head := fmt.Sprintf("{\n  \"schema_version\": %d,\n  \"generator\": %s", SchemaVersion, gen)
		if rest := doc[2:]; !bytes.HasPrefix(bytes.TrimSpace(rest), []byte("}")) {
			head += ",\n"
		} else {
			head += "\n"
		}
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		_, err = w.Write(doc[2:])
		return err
	}
}
