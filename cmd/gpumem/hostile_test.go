package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Every command that reads a trace survives the hostile inputs kept in
// testdata/hostile (each once crashed a command: a text trace asking for
// 1 PB under expandable segments, a pickle whose event list belongs to no
// device, ...): it succeeds, or exits 1 or 2 with one error line and
// nothing on stdout; never a panic.
func TestHostileInputsEveryCommand(t *testing.T) {
	files, _ := filepath.Glob("testdata/hostile/*")
	if len(files) < 3 {
		t.Fatalf("found %d hostile inputs", len(files))
	}
	for _, f := range files {
		out := filepath.Join(t.TempDir(), "out")
		for _, args := range [][]string{
			{"replay", f, "-o", "json"},
			{"replay", f, "--html", out + ".html"},
			{"replay", f, "-o", "torch-summary", "--alloc-conf", "max_split_size_mb:64,expandable_segments:True"},
			{"replay", f, "--device-memory", "1GiB", "--ignore-addresses"},
			{"sweep", f, "-j", "2", "-o", "json"},
			{"fragcheck", f, "--max-frag", "50%"},
			{"diff", f, f, "-o", "json"},
			{"summary", "--trace", f},
			{"convert", f, out + ".trace"},
		} {
			stdout, errs, code := gm(t, args...)
			switch code {
			case 0:
			case exitFailure, exitUsage:
				first, _, _ := strings.Cut(errs, "\n")
				if !strings.HasPrefix(first, "gpumem: error: ") && !strings.Contains(errs, "\ngpumem: error: ") {
					t.Errorf("gpumem %v: exit %d without an error line: %q", args, code, errs)
				}
				// fragcheck's report lists every case, this one as could not run
				if code == exitUsage && stdout != "" && (args[0] != "fragcheck" || !strings.Contains(stdout, "could not run")) {
					t.Errorf("gpumem %v: exit %d with output on stdout", args, code)
				}
			default:
				t.Errorf("gpumem %v: exit %d: %s", args, code, errs)
			}
		}
	}
}
