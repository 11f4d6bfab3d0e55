package pipeline

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/sweep"
)

// A sweep given a progress writer draws one labelled bar over its
// replays, counted to the last, and clears it.
func TestSweepProgress(t *testing.T) {
	grid, err := sweep.ParseGrid("defaults;expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	path := pytorchFixture("seed_frag.pickle")
	if _, err := Sweep(context.Background(), SweepInput{Source: Source{Trace: path, Progress: &buf}, Grid: grid,
		Cards: []uint64{1 << 30, 2 << 30}, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "replaying "+path+", 4 replays") || !strings.Contains(out, "/4)") || strings.Trim(out[strings.LastIndex(out, "\r"):], "\r ") != "" {
		t.Errorf("no labelled bar of 4 replays, cleared at the end: %q", out)
	}
}

// Each pass over a trace read in several says what it does.
func TestReadPhaseLabels(t *testing.T) {
	var buf bytes.Buffer
	for _, c := range []struct {
		w    io.Writer
		want string
	}{{inPhase(&buf, "planning"), "planning"}, {&buf, "reading"}, {inPhase(inPhase(&buf, "x"), "planning"), "planning"}} {
		got, verb := phaseOf(c.w)
		if got != io.Writer(&buf) || verb != c.want {
			t.Errorf("phaseOf: %v %q, want the buffer and %q", got, verb, c.want)
		}
	}
	if inPhase(nil, "planning") != nil {
		t.Error("no writer, yet a phase")
	}
}
