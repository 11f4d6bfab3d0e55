package main

import (
	"bytes"
	"errors"
	"path/filepath"
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
