package progress

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
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

// slowReader hands out n bytes a read, waiting pause before each.
type slowReader struct {
	left, n int
	pause   time.Duration
}

func (s *slowReader) Read(b []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	n := min(s.n, s.left, len(b))
	s.left -= n
	return n, nil
}

// A read shows its average speed once settle has passed, never the rate
// of its first buffers: whatever the machine's load, the figure cannot
// pass what was read over the time waited before it is shown.
func TestReadSpeed(t *testing.T) {
	var buf bytes.Buffer
	const size = 8 << 20
	p := Bytes(&buf, "reading", "big.pickle", size)
	io.CopyBuffer(struct{ io.Writer }{io.Discard}, p.Reader(&slowReader{left: size, n: 1 << 20, pause: settle / 4}), make([]byte, 1<<20))
	p.Done()
	m := regexp.MustCompile(`big\.pickle \(8\.00 MiB\), ([\d.]+) (B|KiB|MiB|GiB)/s`).FindAllStringSubmatch(buf.String(), -1)
	if len(m) == 0 {
		t.Fatalf("no speed shown: %q", buf.String())
	}
	for _, s := range m {
		v, _ := strconv.ParseFloat(s[1], 64)
		v *= map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[s[2]]
		if v > size/settle.Seconds()*1.01 {
			t.Errorf("speed %s %s/s: more than %d bytes in %v", s[1], s[2], size, settle)
		}
	}
}
