package budget

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/units"
)

// FuzzParse checks that any input either parses into cases that satisfy
// the parser's promises or fails with a *FileError naming the file.
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodFile))
	f.Add([]byte("cases:\n  - workload: frag-demo\n"))
	f.Add([]byte("cases:\n  - &a {trace: x.pickle}\n  - *a\n"))
	f.Add([]byte("defaults: {max_frag: 10%, warn_frag: 5%}\ncases: [{trace: a, max_frag: none}]\n"))
	f.Add([]byte("cases:\n  - trace: a\n    params: {x: 1}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("cases: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("f.yaml", data)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error %q (%T) is not a *FileError naming the file", err, err)
			}
			return
		}
		if len(file.Cases) == 0 {
			t.Fatal("parsed with no cases")
		}
		if file.Tolerance < 0 || file.Tolerance > 1 {
			t.Fatalf("tolerance %v", file.Tolerance)
		}
		seen := map[string]bool{}
		for _, c := range file.Cases {
			if c.Name == "" || seen[c.Name] {
				t.Fatalf("empty or repeated name %q", c.Name)
			}
			seen[c.Name] = true
			if (c.Trace == "") == (c.Workload == "") {
				t.Fatalf("case %q: trace %q workload %q, want exactly one", c.Name, c.Trace, c.Workload)
			}
			if err := c.Limits.Validate(); err != nil {
				t.Fatalf("case %q: invalid limits passed: %v", c.Name, err)
			}
			if c.Setup.Fraction != 0 && c.Limits.MustFit == 0 {
				t.Fatalf("case %q: memory fraction without a card", c.Name)
			}
		}
	})
}

// FuzzParseBaseline checks that a baseline either fails cleanly or
// survives a write and a second parse unchanged.
func FuzzParseBaseline(f *testing.F) {
	f.Add([]byte(`{"version": 1, "cases": {"gpt2": {"source": "gpt2.pickle", "peak_reserved": 19304284160, "peak_allocated": 17442141184, "fragmentation": {"peaks": 0.0965}, "oom": false}}}`))
	f.Add([]byte(`{"version": 1, "cases": {}}`))
	f.Add([]byte(`{"version": 1, "cases": {"a": null}}`))
	f.Add([]byte(`{"version": 1, "cases": {"a": {"fragmentation": {"peaks": 1e400}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBaseline("b.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "b.json: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for name, e := range b.Cases {
			for m, v := range e.Fragmentation {
				if math.IsNaN(v) || v < -1 || v > 1 {
					t.Fatalf("case %q: %s = %v accepted", name, m, v)
				}
			}
		}
		var buf bytes.Buffer
		if err := WriteBaseline(&buf, b); err != nil {
			t.Fatalf("writing a parsed baseline: %v", err)
		}
		b2, err := ParseBaseline("b.json", buf.Bytes())
		if err != nil {
			t.Fatalf("reparsing a written baseline: %v\n%s", err, buf.String())
		}
		var buf2 bytes.Buffer
		if err := WriteBaseline(&buf2, b2); err != nil || buf2.String() != buf.String() {
			t.Fatalf("the baseline changed on a second round trip (%v):\n%s\n%s", err, buf.String(), buf2.String())
		}
	})
}

// FuzzParseUnits checks that sizes and ratios are never accepted out of
// range.
func FuzzParseUnits(f *testing.F) {
	for _, s := range []string{"20GiB", "21.5 GB", "30%", "0.3", "none", "1e308TiB", "-0", "0x1p3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := units.ParseSize(s); err == nil && n > math.MaxInt64 {
			t.Fatalf("units.ParseSize(%q) = %d", s, n)
		}
		if r, err := units.ParseRatio(s); err == nil && (math.IsNaN(r) || r < 0 || (r > 1 && !math.IsInf(r, 1))) {
			t.Fatalf("units.ParseRatio(%q) = %v", s, r)
		}
	})
}
