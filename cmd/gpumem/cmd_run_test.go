package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/workload"
)

// Every built-in workload runs on the simulated device with its report.
func TestRunEveryBuiltin(t *testing.T) {
	for _, b := range workload.Builtins() {
		t.Run(b.Name, func(t *testing.T) {
			out, errs, code := gm(t, "run", b.Name)
			if code != 0 {
				t.Fatalf("gpumem run %s: exit %d: %s", b.Name, code, errs)
			}
			for _, want := range []string{"Replay", b.Name, "reserved", "Fragmentation"} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestRunList(t *testing.T) {
	out, errs, code := gm(t, "run", "--list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, b := range workload.Builtins() {
		if !strings.Contains(out, b.Name+" ") || !strings.Contains(out, b.Description) {
			t.Errorf("--list lacks %s: %q", b.Name, b.Description)
		}
	}
	// every parameter with its default and its constraints: the one that
	// 'run transformer --param hidden=1024' breaks among them
	for _, want := range []string{"--param hidden=768  ", "a multiple of heads", "--param heads=12 ", "--param maxseq=2048 ", "128 to 1048576", "--param steps  "} {
		if !strings.Contains(out, want) {
			t.Errorf("--list lacks %q:\n%s", want, out)
		}
	}
}

// The "4 GiB free, yet a 2 GiB request fails" demo ends in a fragmentation
// out-of-memory on its 8 GiB card, and says so.
func TestRunFreeButFails(t *testing.T) {
	out, errs, code := gm(t, "run", "free-but-fails", "--device-memory", "8GiB", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		OOM *struct {
			Size    uint64 `json:"size"`
			Verdict string `json:"verdict"`
		} `json:"oom"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OOM == nil || doc.OOM.Size != 2<<30 || doc.OOM.Verdict != "fragmentation" {
		t.Fatalf("oom %+v, want a fragmentation OOM of a 2 GiB request", doc.OOM)
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run", "no-such-workload"}, exitUsage, `no builtin workload or file named "no-such-workload"`},
		{[]string{"run"}, exitUsage, "accepts 1 arg"},
		{[]string{"run", "frag-demo", "--param", "x"}, exitUsage, `--param "x": want name=value`},
		{[]string{"run", "transformer", "--param", "layers=zero"}, exitUsage, "layers"},
		{[]string{"run", "frag-demo", "--backend", "tpu"}, exitUsage, `unknown backend "tpu"`},
	} {
		_, errs, code := gm(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.msg) || !strings.HasPrefix(errs, "gpumem: error: ") {
			t.Errorf("gpumem %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.msg)
		}
	}
}
