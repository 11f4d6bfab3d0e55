// Package schema generates the JSON Schemas in docs/schema from gpumem's
// Go types: the budget file (gpumem.yaml) and every JSON document gpumem
// prints. A test regenerates them and compares, so the files cannot drift
// from the code; another validates real outputs against them.
package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/output"
)

// base is where the schemas are published, for their $id.
const base = "https://github.com/gpumem/gpumem/raw/main/docs/schema/"

// Files maps each file in docs/schema to the type it describes.
var Files = []struct {
	Name, Title string
	Type        any
}{
	{"gpumem.schema.json", "gpumem budget file (gpumem.yaml)", &budget.FileDoc{}},
	{"replay.schema.json", "gpumem replay -o json and run -o json", &output.ReplayJSON{}},
	{"ranks.schema.json", "gpumem replay -o json over a set of ranks", &output.RanksJSON{}},
	{"diff.schema.json", "gpumem diff -o json", &output.DiffJSON{}},
	{"fragcheck.schema.json", "gpumem fragcheck -o json", &output.FragcheckJSON{}},
	{"summary.schema.json", "gpumem summary -o json", &output.SummaryJSON{}},
	{"sweep.schema.json", "gpumem sweep -o json", &output.SweepJSON{}},
	{"estimate.schema.json", "gpumem estimate -o json", &output.EstimateJSON{}},
	{"estimate-vary.schema.json", "gpumem estimate --vary or --find-max -o json", &output.VaryJSON{}},
	{"version.schema.json", "gpumem version -o json", &output.VersionJSON{}},
}

// Generate returns the schema of the file called name in docs/schema.
func Generate(name string) ([]byte, error) {
	for _, f := range Files {
		if f.Name != name {
			continue
		}
		r := &jsonschema.Reflector{ExpandedStruct: true, DoNotReference: true, Mapper: mapType}
		s := r.Reflect(f.Type)
		s.ID = jsonschema.ID(base + f.Name)
		s.Title = f.Title
		nullable(reflect.TypeOf(f.Type), s)
		// A document says which version of its keys it has: the schema
		// takes that one only.
		if v, ok := s.Properties.Get("schema_version"); ok {
			v.Const = output.SchemaVersion
			s.Title += fmt.Sprintf(", schema_version %d", output.SchemaVersion)
		}
		out, err := json.MarshalIndent(s, "", "  ")
		return append(out, '\n'), err
	}
	return nil, fmt.Errorf("schema: no file %q", name)
}

// mapType gives the schema of the types that are not what their Go kind
// says in JSON.
func mapType(t reflect.Type) *jsonschema.Schema {
	if t == reflect.TypeFor[budget.Status]() { // an int written as its name
		s := &jsonschema.Schema{Type: "string"}
		for st := budget.Pass; st <= budget.Error; st++ {
			s.Enum = append(s.Enum, st.String())
		}
		return s
	}
	return nil
}

// nullable lets null stand where encoding/json writes it: a pointer that
// is not omitempty, as a field or as an element of a list. The reflector
// leaves that out; s is t's schema, walked alongside.
func nullable(t reflect.Type, s *jsonschema.Schema) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if s.Items != nil {
			nullable(t.Elem(), s.Items)
			if t.Elem().Kind() == reflect.Pointer {
				s.Items = orNull(s.Items)
			}
		}
	case reflect.Map:
		if s.AdditionalProperties != nil {
			nullable(t.Elem(), s.AdditionalProperties)
		}
	case reflect.Struct:
		if s.Properties == nil {
			return
		}
		for f := range t.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" { // embedded: its keys are the struct's own
				nullable(f.Type, s)
				continue
			}
			if name == "" {
				name = f.Name
			}
			p, ok := s.Properties.Get(name)
			if !ok || !f.IsExported() {
				continue
			}
			nullable(f.Type, p)
			if f.Type.Kind() == reflect.Pointer && !strings.Contains(","+opts+",", ",omitempty,") {
				s.Properties.Set(name, orNull(p))
			}
		}
	}
}

func orNull(s *jsonschema.Schema) *jsonschema.Schema {
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{s, {Type: "null"}}}
}
