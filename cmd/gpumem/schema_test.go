package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gpumem/gpumem/internal/schema"
)

// loadSchemas compiles every schema in docs/schema, by file name.
func loadSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	out := map[string]*jsonschema.Schema{}
	for _, f := range schema.Files {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", "schema", f.Name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		id, _ := doc.(map[string]any)["$id"].(string)
		if err := c.AddResource(id, doc); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if out[f.Name], err = c.Compile(id); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
	}
	return out
}

func validate(s *jsonschema.Schema, doc string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// Every JSON output of every command, from the fixtures, is valid against
// its committed schema (which TestSchemasUpToDate keeps equal to the Go
// types): a key the types lose, or gain, or a null where the schema wants
// a value, fails here.
func TestJSONOutputsMatchSchemas(t *testing.T) {
	schemas := loadSchemas(t)
	dir := t.TempDir()
	baseline := filepath.Join(dir, "baseline.json")
	if _, errs, code := gm(t, "fragcheck", sweepFixture("seed_frag.pickle"), "--baseline", baseline, "--update-baseline"); code != 1 {
		t.Fatalf("writing a baseline: exit %d: %s", code, errs)
	}
	stacks := sweepFixture("gpt2_varlen_stacks.pickle")
	ranks := sweepFixture("ddp/ddp_gpt2.rank*.pickle")
	cases := []struct {
		schema string
		args   []string
		code   int
	}{
		{"replay.schema.json", []string{"replay", sweepFixture("seed_frag.pickle")}, 0},
		{"replay.schema.json", []string{"replay", sweepFixture("oom_survive_resnet.pickle")}, 0},   // survived OOMs
		{"replay.schema.json", []string{"replay", sweepFixture("gpt2_varlen_capped95.pickle")}, 0}, // inferred cap
		{"replay.schema.json", []string{"replay", sweepFixture("mempool_single.pickle")}, 0},       // a private pool
		{"replay.schema.json", []string{"replay", sweepFixture("seed_frag.pickle"), "--ignore-addresses"}, 0},
		{"replay.schema.json", []string{"replay", sweepFixture("gpt2_varlen.pickle"), "--alloc-conf", "roundup_power2_divisions:4"}, 0}, // divergence
		{"replay.schema.json", []string{"replay", sweepFixture("seed_frag.pickle"), "--device-memory", "30MiB"}, 0},                     // an OOM ends it
		{"replay.schema.json", []string{"run", "frag-demo"}, 0},
		{"ranks.schema.json", []string{"replay", ranks}, 0},
		{"diff.schema.json", []string{"diff", stacks, "--alloc-conf-b", "expandable_segments:True"}, 0}, // sites and phases
		{"diff.schema.json", []string{"diff", sweepFixture("seed_frag.pickle"), sweepFixture("oom_survive_resnet.pickle")}, 0},
		{"fragcheck.schema.json", []string{"fragcheck", sweepFixture("seed_frag.pickle"), filepath.Join(dir, "missing.pickle"), "--baseline", baseline}, 2},
		{"fragcheck.schema.json", []string{"fragcheck", "--workload", "frag-demo", "--max-reserved", "1GiB", "--must-fit", "80GiB"}, 1},
		{"summary.schema.json", []string{"summary", "--backend", "sim"}, 0},
		{"summary.schema.json", []string{"summary", "--trace", ranks}, 0},
		{"sweep.schema.json", []string{"sweep", sweepFixture("seed_frag.pickle")}, 0},
		{"version.schema.json", []string{"version"}, 0},
	}
	used := map[string]bool{"gpumem.schema.json": true} // a YAML file's, not an output's
	for _, c := range cases {
		used[c.schema] = true
		var out, errs string
		var code int
		if c.args[0] == "summary" { // the fake H200 with a process that publishes its allocator's stats, one that does not
			lib, spool := publishing(t, os.Getpid(), 2<<30, 1<<30)
			out, errs, code = summaryWith(t, lib, append(c.args[1:], "--spool", spool, "-o", "json")...)
		} else {
			out, errs, code = gm(t, append(c.args, "-o", "json")...)
		}
		if code != c.code {
			t.Errorf("gpumem %v: exit %d, want %d: %s", c.args, code, c.code, errs)
			continue
		}
		if err := validate(schemas[c.schema], out); err != nil {
			t.Errorf("gpumem %v -o json against %s: %v", c.args, c.schema, err)
		}
	}
	// estimate's documents need a Python with torch to come from the
	// command: TestEstimateJSON checks those, TestEstimateRenderers the
	// renderers' output without one
	used["estimate.schema.json"], used["estimate-vary.schema.json"] = true, true
	for _, f := range schema.Files {
		if !used[f.Name] {
			t.Errorf("no output is checked against %s", f.Name)
		}
	}
}

// The schemas are strict enough to catch a drift: a document with a key
// too many, one too few, or a value of the wrong type fails.
func TestSchemasRejectDrift(t *testing.T) {
	schemas := loadSchemas(t)
	out, errs, code := gm(t, "diff", sweepFixture("seed_frag.pickle"), sweepFixture("oom_survive_resnet.pickle"), "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	s := schemas["diff.schema.json"]
	if err := validate(s, out); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(doc map[string]any){
		"unknown key":          func(doc map[string]any) { doc["delta"].(map[string]any)["new_figure"] = 1 },
		"missing key":          func(doc map[string]any) { delete(doc["a"].(map[string]any), "peak_op") },
		"wrong type":           func(doc map[string]any) { doc["b"].(map[string]any)["ops"] = "12" },
		"null for an object":   func(doc map[string]any) { doc["a"] = nil },
		"other schema version": func(doc map[string]any) { doc["schema_version"] = 2 },
	} {
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		mutate(doc)
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if validate(s, string(b)) == nil {
			t.Errorf("%s: the schema accepts it", name)
		}
	}
}
