package main

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"gpumem": func() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScript runs the end-to-end scripts in testdata/script. $PYTORCH is
// the repository's directory of real PyTorch snapshots; scripts copy what
// they use into their work directory, so that no machine path reaches
// the output.
func TestScript(t *testing.T) {
	pytorch, err := filepath.Abs(filepath.Join("..", "..", "testdata", "pytorch"))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(e *testscript.Env) error {
			e.Setenv("PYTORCH", pytorch)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode": cmdExitcode,
			"junit":    cmdJUnit,
			"compress": cmdCompress,
		},
	})
}

// cmdExitcode runs a program and checks its exact exit status:
//
//	exitcode 2 gpumem fragcheck -o xml
//
// Its stdout and stderr are then checked as after exec.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %q is not a number", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// cmdCompress writes a gzip or zstd copy of a file:
//
//	compress zstd trace.pickle trace.pickle.zst
func cmdCompress(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: compress gzip|zstd IN OUT")
	}
	data, err := os.ReadFile(ts.MkAbs(args[1]))
	ts.Check(err)
	var out []byte
	switch args[0] {
	case "gzip":
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, err = w.Write(data)
		ts.Check(err)
		ts.Check(w.Close())
		out = b.Bytes()
	case "zstd":
		enc, err := zstd.NewWriter(nil)
		ts.Check(err)
		out = enc.EncodeAll(data, nil)
	default:
		ts.Fatalf("compress: unknown compression %q", args[0])
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[2]), out, 0o644))
}

// cmdJUnit parses a JUnit XML report and checks its counts and the
// status of named cases:
//
//	junit report.xml tests=3 failures=1 errors=1 gpt2=pass seed_frag=failure:max_frag broken=error
//
// A case's status is pass, failure (optionally with its type) or error.
func cmdJUnit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: junit FILE [tests=N] [failures=N] [errors=N] [CASE=STATUS...]")
	}
	var doc struct {
		XMLName  xml.Name
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Suites   []struct {
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Type string `xml:"type,attr"`
				} `xml:"failure"`
				Error *struct{} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	data := ts.ReadFile(args[0])
	if err := xml.Unmarshal([]byte(data), &doc); err != nil {
		ts.Fatalf("%s: not XML: %v", args[0], err)
	}
	if doc.XMLName.Local != "testsuites" || len(doc.Suites) != 1 {
		ts.Fatalf("%s: root <%s> with %d suites, want <testsuites> with one", args[0], doc.XMLName.Local, len(doc.Suites))
	}
	status := map[string]string{}
	for _, c := range doc.Suites[0].Cases {
		switch {
		case c.Error != nil:
			status[c.Name] = "error"
		case c.Failure != nil:
			status[c.Name] = "failure:" + c.Failure.Type
		default:
			status[c.Name] = "pass"
		}
	}
	counts := map[string]int{"tests": doc.Tests, "failures": doc.Failures, "errors": doc.Errors}
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			ts.Fatalf("junit: %q is not KEY=VALUE", a)
		}
		if n, isCount := counts[k]; isCount {
			if strconv.Itoa(n) != v {
				ts.Fatalf("%s: %s=%d, want %s", args[0], k, n, v)
			}
			continue
		}
		got, found := status[k]
		if !found {
			ts.Fatalf("%s: no test case %q", args[0], k)
		}
		if got != v && !(v == "failure" && strings.HasPrefix(got, "failure:")) {
			ts.Fatalf("%s: case %s is %s, want %s", args[0], k, got, v)
		}
	}
}
