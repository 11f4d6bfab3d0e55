package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeScript(t *testing.T, name, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A script past a limit is bad input: one line naming the file, the line
// and the limit, exit 2.
func TestRunScriptLimits(t *testing.T) {
	path := writeScript(t, "big.gpumem", "repeat 1000000000000 {\n  alloc x 1MiB\n  free x\n}\n")
	_, errs, code := gm(t, "run", path, "--max-ops", "1000")
	want := "gpumem: error: " + path + ":2: more than 1000 operations (the limit; raise it with --max-ops)\n"
	if code != exitUsage || errs != want {
		t.Errorf("exit %d, stderr %q; want %d, %q", code, errs, exitUsage, want)
	}
	if _, errs, code := gm(t, "run", path, "--max-ops", "0"); code != exitUsage {
		t.Errorf("--max-ops 0: exit %d: %s", code, errs)
	}
	// A raised limit lets the same loop, shortened, run.
	path = writeScript(t, "ok.gpumem", "\uFEFFrepeat 1000 {\n  alloc x 1MiB\n  free x\n}\n")
	if _, errs, code := gm(t, "run", path, "--max-ops", "2000"); code != 0 {
		t.Errorf("2000 operations within --max-ops 2000: exit %d: %s", code, errs)
	}
}

// run streams a script's operations; --html makes them all first. The
// report is the same either way, out-of-memory included.
func TestRunScriptStreamed(t *testing.T) {
	path := writeScript(t, "loop.gpumem", `seed 3
repeat 4000 as s {
  phase step
  alloc a rand(1KiB, 64MiB)
  alloc keep[s] 512KiB
  record_stream a stream=1
  alloc b rand(1MiB, 300MiB) stream=s%2
  free a b
}
`)
	// On 2 GiB it runs out of memory after the first batch of operations.
	for _, dev := range []string{"80GiB", "2GiB"} {
		streamed, errs, code := gm(t, "run", path, "-o", "json", "--device-memory", dev)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		whole, errs, code := gm(t, "run", path, "-o", "json", "--device-memory", dev, "--html", filepath.Join(t.TempDir(), "r.html"))
		if code != 0 {
			t.Fatalf("--html: exit %d: %s", code, errs)
		}
		if hasOOM := strings.Contains(streamed, `"oom": {`); hasOOM != (dev == "2GiB") {
			t.Errorf("--device-memory %s: out of memory %v", dev, hasOOM)
		}
		if streamed != whole {
			t.Errorf("--device-memory %s: the streamed report differs from the one of all operations", dev)
		}
	}
}
