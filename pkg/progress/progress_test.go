package progress

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// No writer, no bar: every method is safe on the nil Phase.
func TestNilPhase(t *testing.T) {
	p := Count(nil, "x", 3)
	if p != nil {
		t.Fatal("a phase without a writer")
	}
	p.Tick()
	Tick(WithPhase(context.Background(), p))
	r := strings.NewReader("abc")
	if p.Reader(r) != io.Reader(r) {
		t.Error("the nil phase wraps its reader")
	}
	p.Done()
}

// A bar shows its label and progress, and is cleared at the end: the last
// thing written leaves the line blank.
func TestBarsLabelledAndCleared(t *testing.T) {
	for name, run := range map[string]func(w io.Writer){
		"bytes": func(w io.Writer) {
			p := Bytes(w, "reading", "big.pickle", 4<<20)
			io.Copy(io.Discard, p.Reader(bytes.NewReader(make([]byte, 4<<20))))
			p.Done()
		},
		"count": func(w io.Writer) {
			p := Count(w, "replaying 3 settings", 3)
			ctx := WithPhase(context.Background(), p)
			for range 3 {
				Tick(ctx)
			}
			p.Done()
		},
		"spinner": func(w io.Writer) {
			p := Spinner(w, "building the HTML report")
			time.Sleep(3 * throttle)
			p.Done()
		},
	} {
		var buf bytes.Buffer
		run(&buf)
		out := buf.String()
		label := map[string]string{"bytes": "reading big.pickle (4.00 MiB)", "count": "replaying 3 settings", "spinner": "building the HTML report"}[name]
		if !strings.Contains(out, label) {
			t.Errorf("%s: no label %q in %q", name, label, out)
		}
		last := out[max(strings.LastIndex(out, "\r"), 0):]
		if strings.Trim(last, "\r ") != "" {
			t.Errorf("%s: the bar is not cleared: ends %q", name, last)
		}
		if strings.Contains(out, "/s") {
			t.Errorf("%s: a speed is shown: %q", name, out)
		}
	}
}
