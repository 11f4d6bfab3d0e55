package estimate

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/categories"
)

// The emulator labels allocations with internal/categories' names, in its
// order: one vocabulary for what memory holds, in estimate and replay.
func TestEmulatorLabelsAreCategories(t *testing.T) {
	m := regexp.MustCompile(`(?s)\nLABELS = \[(.*?)\]`).FindSubmatch(EmulatorPy)
	if m == nil {
		t.Fatal("no LABELS list in gpumem_estimate.py")
	}
	var got []string
	for _, f := range strings.Split(string(m[1]), ",") {
		got = append(got, strings.Trim(strings.TrimSpace(f), `"`))
	}
	var want []string
	for c := categories.Category(0); c < categories.NumCategories; c++ {
		want = append(want, c.String())
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("emulator labels %v, categories %v", got, want)
	}
	if err := checkCategories(map[string]int64{"parameter": 1, "unknown": 2}); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"other", "library_workspace", "optimizer_temporary", "parameters"} {
		if err := checkCategories(map[string]int64{bad: 1}); err == nil {
			t.Errorf("%q accepted as a category", bad)
		}
	}
}
