package htmlreport

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
)

func writeDiff(t *testing.T, p DiffPage) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteDiff(&b, p); err != nil {
		t.Fatalf("WriteDiff: %v", err)
	}
	return b.String()
}

// TestDiffPage draws two runs aligned on a step that b reaches later: the
// step is marked once, where a starts it, and names in the data cannot
// close the script element.
func TestDiffPage(t *testing.T) {
	a, _ := sample()
	b := *a
	b.Source = "b</script>.pickle"
	ma := []figures.Mark{{Name: "</script>", Stage: "START", Op: 30}, {Name: "</script>", Stage: "END", Op: 60}}
	mb := []figures.Mark{{Name: "</script>", Stage: "START", Op: 90}, {Name: "</script>", Stage: "END", Op: 120}}
	p := DiffPage{A: DiffRun{Report: a, Marks: ma}, B: DiffRun{Report: &b, Ranks: 3, Marks: mb},
		Align: figures.Align(ma, mb, a.Ops, b.Ops), Rows: [][]string{{"peak reserved", "1 GiB", "2 GiB", "+1 GiB", "+100.0%"}}}
	got := writeDiff(t, p)
	if strings.Count(got, "</script>") != 3 || !strings.Contains(got, `\u003c/script\u003e`) {
		t.Error("a name closed a script element, or the data lacks the step")
	}
	for _, want := range []string{`data-align="annotations" data-pairs="2"`, `data-phases="1"`, `class="mark phase" data-op="30"`,
		"the worst of 3 ranks: b&lt;/script&gt;.pickle", `<tr data-key="peak-reserved">`, `data-points-a="50" data-peak-reserved-a=`} {
		if !strings.Contains(got, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if again := writeDiff(t, p); again != got {
		t.Error("two writes of one diff differ")
	}

	// no timelines: the figures alone
	a.Timeline, b.Timeline = nil, nil
	got = writeDiff(t, p)
	if !strings.Contains(got, "neither run kept a timeline") || strings.Contains(got, `id="diff-timeline"`) || !strings.Contains(got, "const DATA = null;") {
		t.Error("without timelines: a chart drawn, or no note")
	}
	if err := WriteDiff(&bytes.Buffer{}, DiffPage{A: p.A, B: p.B}); err == nil {
		t.Error("a diff without its alignment written")
	}
}
