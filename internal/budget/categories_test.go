package budget

import (
	"strings"
	"testing"
)

func TestParseCategoryLimits(t *testing.T) {
	f, err := Parse("gpumem.yaml", []byte(`version: 1
defaults:
  activations: 6GiB
  unknown: 1MiB
cases:
  - trace: a.pickle
    optimizer_state: 2GiB
    activations: 8GiB
  - trace: b.pickle
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Cases[0].Limits.Categories, f.Cases[1].Limits.Categories
	if a[4] != 8<<30 || a[3] != 2<<30 || a[8] != 1<<20 || a[0] != 0 {
		t.Errorf("case a: %v", a)
	}
	if b[4] != 6<<30 || b[3] != 0 || b[8] != 1<<20 {
		t.Errorf("case b (the defaults): %v", b)
	}
	for _, bad := range []string{"activations: lots", "gradients: 0", "inputs: -1GiB"} {
		_, err := Parse("gpumem.yaml", []byte("cases:\n  - trace: a.pickle\n    "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), strings.Split(bad, ":")[0]) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestCheckCategoryLimits(t *testing.T) {
	c := Case{Name: "x", Limits: DefaultLimits()}
	c.Limits.Categories[4] = 1 << 30 // activations
	c.Limits.Categories[2] = 1 << 20 // gradients
	f := Figures{PeakReserved: 4 << 30, PeakAllocated: 3 << 30,
		Categories: map[string]uint64{"activation": 2 << 30, "gradient": 1 << 20}}
	var k Checker
	r := k.Check(c, f)
	if r.Status() != Fail || len(r.Findings) != 1 || r.Findings[0].Limit != "activations" ||
		!strings.Contains(r.Findings[0].Message, "activations: 2.00 GiB at the peak of allocated memory, above the limit of 1.00 GiB") {
		t.Errorf("%+v", r.Findings)
	}
	f.Categories = nil // a workload: not measured
	r = k.Check(c, f)
	if r.Status() != Warn || len(r.Findings) != 2 || !strings.Contains(r.Findings[0].Message, "not measured") {
		t.Errorf("%+v", r.Findings)
	}
}
