package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	fix := sweepFixture("gpt2_varlen_stacks.pickle")
	out, errs, code := gm(t, "diff", fix, "--alloc-conf-b", "expandable_segments:True")
	for _, want := range []string{"settings expandable_segments:True", "peak reserved  │ 17.98 GiB │ 16.30 GiB │  -1.68 GiB │  -9.3%",
		"│ Optimizer.step#AdamW.step           │     8 │    4.51 GiB │    4.48 GiB │", "Allocation sites at each run's peak"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("table lacks %q (exit %d, %s):\n%s", want, code, errs, out)
		}
	}

	out, _, code = gm(t, "diff", fix, sweepFixture("gpt2_varlen.pickle"), "-o", "json")
	var doc struct {
		A     map[string]any   `json:"a"`
		B     map[string]any   `json:"b"`
		Delta map[string]any   `json:"delta"`
		Sites []map[string]any `json:"sites"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if doc.A["memory_stats"] == nil || doc.B["source"] == nil || doc.Delta["peak_reserved"] != 0.0 || doc.Sites == nil || len(doc.Sites) != 0 {
		t.Errorf("json: a %v…, delta %v, sites %v (b has no stacks: none compared)", doc.A["source"], doc.Delta, doc.Sites)
	}

	// B (the defaults) reserves 10.3% more than A (expandable segments)
	grow := []string{"diff", fix, "--alloc-conf", "expandable_segments:True", "--alloc-conf-b", ""}
	if _, errs, code := gm(t, append(grow, "--fail-if-grows", "5%")...); code != 1 || !strings.Contains(errs, "peak reserved grew 10.3%") {
		t.Errorf("--fail-if-grows 5%%: exit %d, %s", code, errs)
	}
	if _, errs, code := gm(t, append(grow, "--fail-if-grows", "15")...); code != 0 {
		t.Errorf("--fail-if-grows 15: exit %d, %s", code, errs)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"diff", fix}, "diff needs two runs"},
		{[]string{"diff", fix, fix, fix}, "diff compares two runs, not 3\ngpumem: hint: quote a glob"},
		{[]string{"diff", fix, "--alloc-conf-b", "frobnicate:1"}, "--alloc-conf-b:"},
		{[]string{"diff", fix, fix, "--fail-if-grows", "lots"}, "--fail-if-grows: want a percentage"},
		{[]string{"diff", fix, "missing*.pickle"}, "missing*.pickle: no file matches"},
	} {
		if _, errs, code := gm(t, c.args...); code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, %s; want exit 2 and %q", c.args, code, errs, c.want)
		}
	}
}
