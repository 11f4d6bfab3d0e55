package output

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestWriteJSONIndent checks that writeJSON writes what an indenting
// json.Encoder writes.
func TestWriteJSONIndent(t *testing.T) {
	type inner struct {
		Name  string         `json:"name"`
		List  []int          `json:"list"`
		Empty []int          `json:"empty"`
		Map   map[string]any `json:"map"`
	}
	docs := []any{
		0, "s", nil, []int{}, map[string]int{},
		[]any{1, "a,b:{c}[d]", `quote " and \ backslash`, "<module> & more", "ünï\u2028code\n\ttabs", 1.5e-9, true, nil},
		inner{Name: `{"nested": [1, 2]}`, List: []int{1, 2, 3}, Empty: []int{}, Map: map[string]any{"a": []any{}, "b": map[string]any{}, "c": [][]int{{}, {1}}}},
		[]inner{{}, {Name: "x"}},
	}
	for _, html := range []bool{false, true} {
		for _, doc := range docs {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(html)
			if err := enc.Encode(doc); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := writeJSON(&got, doc, html); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("writeJSON(%#v, %v):\n%s\nwant\n%s", doc, html, got.String(), want.String())
			}
		}
	}
}
