package budget

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within runs f, failing the test if it takes over 20 s (a FIFO read
// would wait for good).
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no answer in 20 s", what)
		return nil
	}
}

// Budget and baseline files that are not regular files (a FIFO, a link
// to /dev/zero) are refused at once, without a read; a file over the cap
// is refused after reading no more than the cap.
func TestFilesNotRegularRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "gpumem.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs:", err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	os.Symlink("/dev/zero", zero)
	for _, p := range []string{fifo, zero} {
		err := within(t, p, func() error { _, err := ReadFile(p); return err })
		if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.HasPrefix(err.Error(), p) {
			t.Errorf("ReadFile(%s): %v", p, err)
		}
		err = within(t, p, func() error { _, err := ReadBaseline(p); return err })
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ReadBaseline(%s): %v", p, err)
		}
	}
	big := filepath.Join(dir, "big.json")
	f, _ := os.Create(big)
	f.Truncate(maxBaselineSize + 1)
	f.Close()
	if _, err := ReadBaseline(big); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("ReadBaseline of %d bytes: %v", maxBaselineSize+1, err)
	}
}

// A small file whose cases alias one long list expands to far more than
// its text: the expanded size is bounded too.
func TestAliasExpansionBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("cases:\n  - name: c0\n    traces: &t\n")
	for i := range 10000 {
		fmt.Fprintf(&b, "      - t%d.pickle\n", i)
	}
	for i := 1; i < 500; i++ {
		fmt.Fprintf(&b, "  - {name: c%d, traces: *t}\n", i)
	}
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "expands to more than") {
		t.Fatalf("err %v", err)
	}
}

// Rewriting a baseline keeps the entries of cases that did not run this
// time (a run of some cases only), as it keeps those that failed.
func TestNewBaselineKeepsCasesNotRun(t *testing.T) {
	old := &Baseline{Cases: map[string]Entry{"other": {Source: "other.pickle", PeakReserved: 7}, "gpt2": {PeakReserved: 1}}}
	k := &Checker{}
	b := NewBaseline([]Result{k.Check(testCase("gpt2", DefaultLimits()), gpt2)}, old)
	if len(b.Cases) != 2 || b.Cases["other"].PeakReserved != 7 || b.Cases["gpt2"].PeakReserved != gpt2.PeakReserved {
		t.Errorf("baseline %+v: want gpt2 new and other kept", b.Cases)
	}
}
