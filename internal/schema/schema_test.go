package schema

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/schema")

// The schemas in docs/schema are what the Go types generate.
func TestSchemasUpToDate(t *testing.T) {
	for _, f := range Files {
		got, err := Generate(f.Name)
		if err != nil || len(got) == 0 {
			t.Fatalf("%s: %v", f.Name, err)
		}
		path := filepath.Join("..", "..", "docs", "schema", f.Name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./internal/schema -update writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: go test ./internal/schema -update", path)
		}
	}
}
