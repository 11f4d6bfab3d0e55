package output

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/figures"
)

// gpt2 are the figures of gpt2_varlen.pickle replayed under its recorded
// settings.
var gpt2 = budget.Figures{
	PeakReserved:  19304284160,
	PeakAllocated: 17442141184,
	Fragmentation: figures.Fragmentation{End: 0.9965, AtPeak: 0.0965, Peaks: 0.0965, Holes: 0.9143},
}

func testCase(name string, l budget.Limits) budget.Case {
	return budget.Case{Name: name, Trace: name + ".pickle", Limits: l}
}

// sampleResults are one case of each status.
func sampleResults() []budget.Result {
	k := &budget.Checker{}
	warn, fail := gpt2, gpt2
	warn.Fragmentation.Peaks = 0.25
	fail.Fragmentation.Peaks = 0.3935
	fromFile := testCase("seed_frag", budget.DefaultLimits())
	fromFile.File, fromFile.Line = "ci/gpumem.yaml", 12
	return []budget.Result{
		k.Check(testCase("gpt2", budget.DefaultLimits()), gpt2),
		k.Check(testCase("resnet", budget.DefaultLimits()), warn),
		k.Check(fromFile, fail),
		k.Failed(testCase("broken", budget.DefaultLimits()), errors.New("broken.pickle: byte 2: FRAME runs past the end <&>")),
	}
}

func TestWriteJUnit(t *testing.T) {
	var buf bytes.Buffer
	if err := FragcheckFormats.Render(&buf, JUnit, sampleResults(), Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), `<?xml version="1.0" encoding="UTF-8"?>`) {
		t.Errorf("no XML header:\n%s", buf.String())
	}
	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Tests int    `xml:"tests,attr"`
			Cases []struct {
				Name    string `xml:"name,attr"`
				File    string `xml:"file,attr"`
				Line    int    `xml:"line,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Type    string `xml:"type,attr"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
				Props []struct {
					Name  string `xml:"name,attr"`
					Value string `xml:"value,attr"`
				} `xml:"properties>property"`
				Out string `xml:"system-out"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("the report is not XML: %v\n%s", err, buf.String())
	}
	if doc.Tests != 4 || doc.Failures != 1 || doc.Errors != 1 || len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != 4 {
		t.Fatalf("tests %d failures %d errors %d, suites %d; want 4, 1, 1 in one suite", doc.Tests, doc.Failures, doc.Errors, len(doc.Suites))
	}
	cs := doc.Suites[0].Cases
	if cs[0].Name != "gpt2" || cs[0].Failure != nil || cs[0].Error != nil {
		t.Errorf("gpt2 should pass: %+v", cs[0])
	}
	if cs[1].Failure != nil || !strings.Contains(cs[1].Out, "warn: warn_frag: fragmentation 25.0%") {
		t.Errorf("a warning is not a failure but shows in system-out: %+v", cs[1])
	}
	if f := cs[2].Failure; f == nil || f.Type != "max_frag" || !strings.Contains(f.Message, "39.4% is above the limit of 30.0%") {
		t.Errorf("seed_frag failure = %+v", f)
	}
	if cs[2].File != "ci/gpumem.yaml" || cs[2].Line != 12 {
		t.Errorf("seed_frag at %s:%d, want ci/gpumem.yaml:12", cs[2].File, cs[2].Line)
	}
	props := map[string]string{}
	for _, p := range cs[2].Props {
		props[p.Name] = p.Value
	}
	if props["peak_reserved"] != "19304284160" || props["fragmentation"] != "39.4%" || props["status"] != "fail" {
		t.Errorf("seed_frag properties %v", props)
	}
	if e := cs[3].Error; e == nil || e.Message != "broken.pickle: byte 2: FRAME runs past the end <&>" {
		t.Errorf("broken error = %+v", e)
	}
	if strings.Contains(buf.String(), "time") {
		t.Errorf("the report holds times:\n%s", buf.String())
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := FragcheckFormats.Render(&buf, JSON, sampleResults(), Options{}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Status  string         `json:"status"`
		Summary map[string]int `json:"summary"`
		Cases   []struct {
			Name          string   `json:"name"`
			Status        string   `json:"status"`
			Error         *string  `json:"error"`
			Fragmentation *float64 `json:"fragmentation"`
			PeakReserved  *int64   `json:"peak_reserved"`
			Crossed       []string `json:"crossed"`
			Limits        struct {
				MaxFrag     *float64 `json:"max_frag"`
				MaxReserved *uint64  `json:"max_reserved"`
			} `json:"limits"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	if doc.Status != "error" || doc.Summary["pass"] != 1 || doc.Summary["warn"] != 1 || doc.Summary["fail"] != 1 || doc.Summary["error"] != 1 {
		t.Errorf("status %q summary %v", doc.Status, doc.Summary)
	}
	c := doc.Cases[2]
	if c.Status != "fail" || c.Fragmentation == nil || *c.Fragmentation != 0.3935 || *c.PeakReserved != 19304284160 ||
		len(c.Crossed) != 1 || c.Crossed[0] != "max_frag" || *c.Limits.MaxFrag != 0.3 || c.Limits.MaxReserved != nil {
		t.Errorf("seed_frag = %+v", c)
	}
	b := doc.Cases[3]
	if b.Status != "error" || b.Error == nil || b.Fragmentation != nil || b.PeakReserved != nil {
		t.Errorf("broken = %+v", b)
	}
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := FragcheckFormats.Render(&buf, Table, sampleResults(), Options{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"│ Case", "Limit crossed",
		"│ gpt2      │ pass   │          9.7% │     17.98 GiB │      16.24 GiB │ -               │",
		"│ resnet    │ warn   │         25.0% │",
		"warn_frag 20.0%",
		"max_frag 30.0%",
		"│ broken    │ error  │             - │",
		"seed_frag: fail: fragmentation 39.4% is above the limit of 30.0% (peaks: 1 − peak allocated / peak reserved)",
		"broken: error: broken.pickle: byte 2",
		"fragmentation (peaks) = 1 − peak allocated / peak reserved",
		"4 cases: 1 passed, 1 warned, 1 failed, 1 could not run",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colour escapes without colour:\n%q", out)
	}
	buf.Reset()
	if err := FragcheckFormats.Render(&buf, Table, sampleResults(), Options{Color: true}); err != nil || !strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("no colour escapes with colour (%v)", err)
	}
}

func TestWriteAnnotations(t *testing.T) {
	var buf bytes.Buffer
	if err := GitHubAnnotations(&buf, sampleResults()); err != nil {
		t.Fatal(err)
	}
	want := `::warning title=gpumem fragcheck%3A resnet::fragmentation 25.0%25 is above the warning level of 20.0%25 (peaks: 1 − peak allocated / peak reserved)
::error file=ci/gpumem.yaml,line=12,title=gpumem fragcheck%3A seed_frag::fragmentation 39.4%25 is above the limit of 30.0%25 (peaks: 1 − peak allocated / peak reserved)
::error title=gpumem fragcheck%3A broken::broken.pickle: byte 2: FRAME runs past the end <&>
`
	if buf.String() != want {
		t.Errorf("annotations:\n%s\nwant:\n%s", buf.String(), want)
	}
	if got := escapeData("a%b\nc\r"); got != "a%25b%0Ac%0D" {
		t.Errorf("escapeData = %q", got)
	}
	if got := escapeProperty("a,b:c"); got != "a%2Cb%3Ac" {
		t.Errorf("escapeProperty = %q", got)
	}
}
