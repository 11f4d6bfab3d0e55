package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
)

func withCategories() *figures.Replay {
	r := completed()
	r.Categories = &figures.Categories{Op: 7, Total: 3 << 20, Method: "lifetimes and annotations", Steps: 2,
		Shares: []figures.CategoryShare{
			{Name: "parameter", Bytes: 1 << 20, Sites: []figures.Site{{Frames: "to (train.py:3)\nmain (train.py:9)", Bytes: 1 << 20, Count: 2}}},
			{Name: "activation", Bytes: 2 << 20, Sites: []figures.Site{{Frames: "(no stack) backward, no Python frame (autograd engine): activation", Bytes: 2 << 20, Count: 1}}},
			{Name: "unknown"},
		},
		Remedies:     []figures.Remedy{{Name: "activation checkpointing", Bytes: 2 << 20, Basis: "every activation"}},
		KeptPastStep: 3 << 19}
	return r
}

func TestCategoriesTable(t *testing.T) {
	var b bytes.Buffer
	if err := Table(&b, withCategories(), Options{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"At the peak of allocated memory (3.00 MiB, op 7), by category (lifetimes and annotations):",
		"  parameter          1.00 MiB   33.3%", "to (train.py:3)",
		"  activation         2.00 MiB   66.7%", "(no stack) backward, no Python frame (autograd engine): activation",
		"activation checkpointing", "Upper bounds from the categories",
		"1.50 MiB  kept past the step that made them (results held with their graphs: a leak?)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "  unknown ") {
		t.Error("a category that held nothing is listed")
	}
}

func TestCategoriesJSON(t *testing.T) {
	var b bytes.Buffer
	if err := JSON(&b, withCategories()); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Categories    map[string]uint64 `json:"categories"`
		Method        string            `json:"categories_method"`
		CategorySites []struct {
			Category string `json:"category"`
			Sites    []struct{ Frames string }
		} `json:"category_sites"`
		Remedies []struct {
			Bytes uint64 `json:"at_most_bytes"`
		} `json:"remedies"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Categories) != 9 || doc.Categories["activation"] != 2<<20 || doc.Categories["parameter"] != 1<<20 {
		t.Errorf("categories %v", doc.Categories)
	}
	if doc.Method != "lifetimes and annotations" || len(doc.CategorySites) != 3 || doc.CategorySites[0].Sites[0].Frames == "" {
		t.Errorf("method %q, sites %+v", doc.Method, doc.CategorySites)
	}
	if len(doc.Remedies) != 1 || doc.Remedies[0].Bytes != 2<<20 {
		t.Errorf("remedies %+v", doc.Remedies)
	}
}

func TestCategoriesMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, withCategories(), Options{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"### By category at the peak of allocated memory", "| activation | 2.00 MiB | 66.7%",
		"`(no stack) backward, no Python frame (autograd engine): activation`"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
