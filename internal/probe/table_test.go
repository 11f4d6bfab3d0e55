package probe

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test -update to accept)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func probeTwoGPUs(t *testing.T) *System {
	t.Helper()
	lib, _ := twoGPUs()
	sys, err := Prober{Lib: lib, ProcName: procNames}.Probe()
	if err != nil {
		t.Fatal(err)
	}
	return sys
}

func TestWriteTableGolden(t *testing.T) {
	sys := probeTwoGPUs(t)
	for _, tc := range []struct {
		file  string
		color bool
	}{{"two_gpus.txt", false}, {"two_gpus_color.txt", true}} {
		var buf bytes.Buffer
		if err := WriteTable(&buf, sys, tc.color); err != nil {
			t.Fatal(err)
		}
		if got := buf.String(); strings.Contains(got, "\x1b[") != tc.color {
			t.Errorf("%s: colour escapes present = %v, want %v", tc.file, !tc.color, tc.color)
		}
		golden(t, tc.file, buf.Bytes())
	}
}

func TestWriteJSONGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, probeTwoGPUs(t)); err != nil {
		t.Fatal(err)
	}
	golden(t, "two_gpus.json", buf.Bytes())
}

func TestWriteJSONEmptyLists(t *testing.T) {
	for _, s := range []*System{{}, {GPUs: []GPU{{Name: "x"}}}} {
		var buf bytes.Buffer
		if err := WriteJSON(&buf, s); err != nil {
			t.Fatal(err)
		}
		if got := buf.String(); strings.Contains(got, "null") {
			t.Errorf("WriteJSON(%+v) has null:\n%s", s, got)
		}
		var back System
		if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if len(back.GPUs) != len(s.GPUs) {
			t.Errorf("round trip has %d gpus, want %d", len(back.GPUs), len(s.GPUs))
		}
	}
}

func TestWriteTableNoGPUsNoProcesses(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, &System{DriverVersion: "580.65.06"}, false); err != nil {
		t.Fatal(err)
	}
	if want := "Driver 580.65.06  CUDA -\n\nno gpus found\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}

	buf.Reset()
	if err := WriteTable(&buf, &System{GPUs: []GPU{{Name: "NVIDIA H200", MemoryTotal: 1 << 30}}}, false); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); !strings.HasSuffix(got, "\nno running processes\n") {
		t.Errorf("table without processes does not say so:\n%s", got)
	}
}

func TestWriteNil(t *testing.T) {
	if err := WriteTable(&bytes.Buffer{}, nil, false); err == nil {
		t.Error("WriteTable(nil) succeeded")
	}
	if err := WriteJSON(&bytes.Buffer{}, nil); err == nil {
		t.Error("WriteJSON(nil) succeeded")
	}
}

func TestFill(t *testing.T) {
	const (
		green  = "\x1b[32m"
		yellow = "\x1b[33m"
		red    = "\x1b[31m"
	)
	for _, tc := range []struct {
		used, total uint64
		text, esc   string
	}{
		{0, 100, "0%", green},
		{699, 1000, "69%", green}, // 69.9% is still below the threshold
		{70, 100, "70%", yellow},
		{899, 1000, "89%", yellow},
		{90, 100, "90%", red},
		{100, 100, "100%", red},
		{5, 0, "-", ""},
	} {
		if got := fill(tc.used, tc.total, false); got != tc.text {
			t.Errorf("fill(%d, %d, plain) = %q, want %q", tc.used, tc.total, got, tc.text)
		}
		got := fill(tc.used, tc.total, true)
		if !strings.HasPrefix(got, tc.esc) || !strings.Contains(got, tc.text) {
			t.Errorf("fill(%d, %d, colour) = %q, want %q in %q", tc.used, tc.total, got, tc.text, tc.esc)
		}
	}
}

func TestHuman(t *testing.T) {
	for b, want := range map[uint64]string{0: "0 MiB", 300 << 20: "300 MiB", 1<<30 - 1: "1023 MiB", 1 << 30: "1.0 GiB", 135<<30 - 300<<20: "134.7 GiB"} {
		if got := human(b); got != want {
			t.Errorf("human(%d) = %q, want %q", b, got, want)
		}
	}
}
