package pipeline

import (
	"errors"
	"testing"
)

// --grid values add up; a setting given twice, even across flags, or one
// that does not parse is a usage error.
func TestParseGrids(t *testing.T) {
	g, err := ParseGrids([]string{"nocache", "expandable_segments:True"})
	if err != nil || len(g) != 2 || g[0].Label == g[1].Label {
		t.Fatalf("%+v, %v", g, err)
	}
	for _, bad := range [][]string{{"nocache", "nocache"}, {"no_such_option:1"}} {
		_, err := ParseGrids(bad)
		var pe *Error
		if !errors.As(err, &pe) || pe.Kind != Usage {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
}
