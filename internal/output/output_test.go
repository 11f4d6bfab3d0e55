package output

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the list of formats in docs/architecture.md")

func TestRegistry(t *testing.T) {
	if got := FragcheckFormats.Help(); got != "output format: table, json or junit" {
		t.Errorf("Help() = %q", got)
	}
	if got := SummaryFormats.Help(); got != "output format: table or json" {
		t.Errorf("Help() = %q", got)
	}
	if d := ReplayFormats.Default(); d != Table {
		t.Errorf("Default() = %q", d)
	}
	_, err := SweepFormats.Lookup("junit")
	if err == nil || err.Error() != `unknown format "junit" (want table, json or markdown)` {
		t.Errorf("Lookup(junit): %v", err)
	}
	var buf bytes.Buffer
	if err := SweepFormats.Render(&buf, "xml", nil, Options{}); err == nil || buf.Len() > 0 {
		t.Errorf("Render(xml): %v, wrote %q", err, &buf)
	}
	// Names are unique within a kind.
	for _, names := range [][]string{ReplayFormats.Names(), SweepFormats.Names(), FragcheckFormats.Names(), SummaryFormats.Names()} {
		seen := map[string]bool{}
		for _, n := range names {
			if seen[n] {
				t.Errorf("format %q twice in %v", n, names)
			}
			seen[n] = true
		}
	}
}

// TestFormatsDoc keeps the list of formats in docs/architecture.md the
// registries' own.
func TestFormatsDoc(t *testing.T) {
	const path = "../../docs/architecture.md"
	const begin, end = "<!-- formats: generated from the registries by output.Doc -->\n", "<!-- end of formats -->"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated list of formats", path)
	}
	want := doc[:i+len(begin)] + Doc() + doc[j:]
	if *updateDoc {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Errorf("%s lists other formats than the registries; run go test ./internal/output -update-doc", path)
	}
}
