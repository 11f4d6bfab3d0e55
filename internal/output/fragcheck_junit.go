package output

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/units"
)

// The JUnit XML schema as CI systems read it (Jenkins, GitLab, the GitHub
// test-report actions): a testsuites root holding one testsuite, a
// testcase per case with a failure or error child. No timestamps or
// durations, so that the report is the same on every run.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name       string         `xml:"name,attr"`
	Classname  string         `xml:"classname,attr"`
	File       string         `xml:"file,attr,omitempty"`
	Line       int            `xml:"line,attr,omitempty"`
	Properties *junitProps    `xml:"properties,omitempty"`
	Failure    *junitProblem  `xml:"failure,omitempty"`
	Error      *junitProblem  `xml:"error,omitempty"`
	SystemOut  *junitCharData `xml:"system-out,omitempty"`
}

type junitProps struct {
	Props []junitProp `xml:"property"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitCharData struct {
	Text string `xml:",chardata"`
}

// JUnitSuite is the name of the test suite in JUnit reports.
const JUnitSuite = "gpumem fragcheck"

// fragcheckJUnit writes rs as a JUnit XML report: failing cases as failures,
// cases that could not run as errors, warnings in each case's system-out
// (JUnit has no warnings; with Checker.Strict they are failures).
func fragcheckJUnit(w io.Writer, rs []budget.Result, _ Options) error {
	s := budget.Summarize(rs)
	suite := junitSuite{Name: JUnitSuite, Tests: s.Cases, Failures: s.Fail, Errors: s.Error}
	for i := range rs {
		r := &rs[i]
		c := junitCase{Name: r.Case.Name, Classname: "fragcheck", File: r.Case.File, Line: r.Case.Line}
		var out strings.Builder
		fmt.Fprintf(&out, "source: %s\n", r.Case.Source())
		if r.Err != nil {
			c.Error = &junitProblem{Message: r.Err.Error(), Type: "input", Text: r.Err.Error()}
		} else {
			c.Properties = &junitProps{Props: figureProps(r)}
			var fails []string
			for _, f := range r.Findings {
				if f.Status == budget.Fail {
					fails = append(fails, f.Limit+": "+f.Message)
				}
				fmt.Fprintf(&out, "%s: %s: %s\n", f.Status, orDash(f.Limit), f.Message)
			}
			if len(fails) > 0 {
				c.Failure = &junitProblem{Message: fails[0], Type: strings.Join(r.Crossed(), ","), Text: strings.Join(fails, "\n")}
			}
		}
		c.SystemOut = &junitCharData{Text: out.String()}
		suite.Cases = append(suite.Cases, c)
	}
	doc := junitSuites{Name: JUnitSuite, Tests: s.Cases, Failures: s.Fail, Errors: s.Error, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// figureProps are a result's figures as JUnit properties.
func figureProps(r *budget.Result) []junitProp {
	l := r.Case.Limits
	p := []junitProp{
		{"status", r.Status().String()},
		{"metric", string(l.Metric)},
		{"fragmentation", units.FormatRatio(r.Fragmentation())},
		{"peak_reserved", fmt.Sprint(r.Figures.PeakReserved)},
		{"peak_allocated", fmt.Sprint(r.Figures.PeakAllocated)},
		{"warn_frag", units.FormatRatio(l.WarnFrag)},
		{"max_frag", units.FormatRatio(l.MaxFrag)},
	}
	if l.MaxReserved > 0 {
		p = append(p, junitProp{"max_reserved", fmt.Sprint(l.MaxReserved)})
	}
	if l.MustFit > 0 {
		p = append(p, junitProp{"must_fit", fmt.Sprint(l.MustFit)})
	}
	return p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
