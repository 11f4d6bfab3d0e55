// Package schema generates the JSON Schemas in docs/schema from gpumem's
// Go types: the budget file (gpumem.yaml) and the JSON documents whose
// shape is a Go type (sweep, version). A test regenerates them and
// compares, so the files cannot drift from the code.
package schema

import (
	"encoding/json"

	"github.com/invopop/jsonschema"

	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/output"
	"github.com/gpumem/gpumem/pkg/version"
)

// base is where the schemas are published, for their $id.
const base = "https://github.com/gpumem/gpumem/raw/main/docs/schema/"

// Files maps each file in docs/schema to the type it describes.
var Files = []struct {
	Name, Title string
	Type        any
}{
	{"gpumem.schema.json", "gpumem budget file (gpumem.yaml)", &budget.FileDoc{}},
	{"sweep.schema.json", "gpumem sweep -o json", &output.SweepJSON{}},
	{"version.schema.json", "gpumem version -o json", &version.Info{}},
}

// Generate returns the schema of the file called name in docs/schema.
func Generate(name string) ([]byte, error) {
	for _, f := range Files {
		if f.Name != name {
			continue
		}
		r := &jsonschema.Reflector{ExpandedStruct: true, DoNotReference: true}
		s := r.Reflect(f.Type)
		s.ID = jsonschema.ID(base + f.Name)
		s.Title = f.Title
		out, err := json.MarshalIndent(s, "", "  ")
		return append(out, '\n'), err
	}
	return nil, nil
}
