package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func gpumem(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

// replayJSON replays a trace and returns its JSON report without the
// source path.
func replayJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	code, out, errs := gpumem(t, "replay", path, "-o", "json")
	if code != 0 {
		t.Fatalf("replay %s: exit %d: %s", path, code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "source")
	return m
}

// TestConvertReplaysTheSame converts PyTorch snapshots to text: replaying
// the text must report exactly what replaying the pickle does.
func TestConvertReplaysTheSame(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"gpt2_varlen_capped95", "multistream", "seed_frag"} {
		in := filepath.Join("..", "..", "testdata", "pytorch", name+".pickle")
		out := filepath.Join(dir, name+".trace")
		code, _, errs := gpumem(t, "convert", in, out)
		if code != 0 || !strings.Contains(errs, "gpumem: wrote "+out) {
			t.Fatalf("convert %s: exit %d: %s", name, code, errs)
		}
		if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v, mode %v", out, err, fi.Mode())
		}
		a, b := replayJSON(t, in), replayJSON(t, out)
		// the text format carries no annotations: without the optimizer's
		// marks, the categories are read from lifetimes alone
		if m, _ := b["categories_method"].(string); m != "lifetimes only (no optimizer step marks)" {
			t.Errorf("%s: the text trace's categories were decided by %q", name, m)
		}
		for _, k := range []string{"categories", "categories_method", "category_sites", "activations_kept_past_step", "remedies"} {
			delete(a, k)
			delete(b, k)
		}
		for _, doc := range []map[string]any{a, b} {
			tl, _ := doc["timeline"].([]any)
			for _, p := range tl {
				delete(p.(map[string]any), "categories")
			}
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: the text trace replays differently from the pickle", name)
		}
	}
}

func TestConvertRMM(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "rmm.csv")
	os.WriteFile(in, []byte("Thread,Time,Action,Pointer,Size,Stream\n"+
		"1,10:00:00.000001,allocate,0x7f0000000000,1048576,0x0\n"+
		"1,10:00:00.000002,allocate failure,(nil),1099511627776,0x0\n"+
		"1,10:00:00.000003,free,0x7f0000000000,1048576,0x0\n"), 0o644)
	code, out, errs := gpumem(t, "convert", in, "-")
	want := "# gpumem-trace v1\ndevice 0\n" +
		"alloc 0x7f0000000000 1048576 t=36000000001\n" +
		"oom 1099511627776 t=36000000002\n" +
		"free 0x7f0000000000 1048576 t=36000000003\n"
	if code != 0 || out != want {
		t.Errorf("exit %d\n got %s\nwant %s\nstderr %s", code, out, want, errs)
	}
	// replay reads RMM logs directly
	if code, out, errs := gpumem(t, "replay", in, "-o", "json"); code != 0 || !strings.Contains(out, `"ops": 4`) {
		t.Errorf("replay of an RMM log: exit %d: %s %s", code, out, errs)
	}
}

func TestConvertErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.trace")
	os.WriteFile(bad, []byte("# gpumem-trace v1\nalloc 0x10\n"), 0o644)
	fixture := filepath.Join("..", "..", "testdata", "pytorch", "seed_frag.pickle")
	out := filepath.Join(dir, "out.trace")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"convert", bad, out}, exitUsage, "gpumem: error: " + bad + `:2: want "alloc ADDR SIZE"` + "\n"},
		{[]string{"convert", fixture, out, "--to", "pickle"}, exitUsage, `gpumem: error: --to: unknown format "pickle" (want text)` + "\n"},
		{[]string{"convert", fixture, out, "--device", "3"}, exitUsage, "gpumem: error: --device 3: " + fixture + " has traces for 1 devices\n"},
		{[]string{"convert", fixture, filepath.Join(dir, "no", "such", "dir")}, exitFailure, "gpumem: error: writing " + filepath.Join(dir, "no", "such", "dir") + ": no such file or directory\n"},
		{[]string{"convert", fixture, fixture}, exitUsage, "gpumem: error: " + fixture + " is also an input: refusing to overwrite it\n"},
		{[]string{"convert", fixture}, exitUsage, "gpumem: error: accepts 2 arg(s), received 1\n"},
	} {
		code, _, errs := gpumem(t, c.args...)
		if code != c.code || !strings.HasPrefix(errs, c.want) {
			t.Errorf("%q: exit %d (want %d)\n got %s\nwant %s", c.args, code, c.code, errs, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed conversion left %s behind", out)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(m) > 0 {
		t.Errorf("temporary files left behind: %v", m)
	}
}
