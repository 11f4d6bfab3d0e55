package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/budget"
)

func pytorchFixture(name string) string {
	return filepath.Join("..", "..", "testdata", "pytorch", name)
}

func TestFragcheckOutcome(t *testing.T) {
	k := &budget.Checker{}
	pass := k.Check(budget.Case{Name: "p", Limits: budget.DefaultLimits()}, budget.Figures{PeakReserved: 10, PeakAllocated: 9})
	fragmented := budget.Figures{PeakReserved: 10, PeakAllocated: 1}
	fragmented.Fragmentation.Peaks = 0.9
	fail := k.Check(budget.Case{Name: "f", Limits: budget.DefaultLimits()}, fragmented)
	broken := k.Failed(budget.Case{Name: "b", Trace: "b.pickle"}, errors.New("b.pickle: byte 0: not a pickle"))
	for _, tc := range []struct {
		rs     []budget.Result
		code   int
		stderr string
	}{
		{[]budget.Result{pass}, exitOK, ""},
		{[]budget.Result{pass, fail}, exitFailure, "gpumem: error: 1 of 2 cases over budget\n"},
		{[]budget.Result{fail, broken, pass}, exitUsage, "gpumem: error: case b: b.pickle: byte 0: not a pickle\n"},
	} {
		var stderr bytes.Buffer
		a := &app{stderr: &stderr}
		code := printError(&stderr, fragcheckOutcome(a, tc.rs))
		if code != tc.code || stderr.String() != tc.stderr {
			t.Errorf("code %d stderr %q, want %d %q", code, stderr.String(), tc.code, tc.stderr)
		}
	}
}

// The budget file fragcheck --help shows passes as pasted at the
// repository's root: its trace exists, its workload fits its card, and a
// first run with no baseline is not an error.
func TestFragcheckHelpExampleRuns(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(mustAbs(t, filepath.Join("..", "..", "testdata")), filepath.Join(dir, "testdata")); err != nil {
		t.Fatal(err)
	}
	var yaml strings.Builder
	for _, line := range strings.Split(strings.TrimRight(budget.Example, "\n"), "\n") {
		yaml.WriteString(strings.TrimPrefix(line, "  ") + "\n") // the help indents it by two
	}
	config := filepath.Join(dir, "gpumem.yaml")
	if err := os.WriteFile(config, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := gpumem(t, "fragcheck", "--config", config)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "2 cases: 2 passed") {
		t.Errorf("stdout:\n%s", out)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
