package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Files that are not regular files, as outputs and as inputs.

const tinyTrace = "# gpumem-trace v1\nalloc 0x7f0000000000 1048576\nalloc 0x7f0000100000 512\nfree 0x7f0000000000\n"

func tinyTraceFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "t.trace")
	if err := os.WriteFile(p, []byte(tinyTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readFIFO makes a FIFO and returns what is written into it until its
// writer closes it (or 20 s pass).
func readFIFO(t *testing.T) (path string, got <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no FIFOs:", err)
	}
	c := make(chan string, 1)
	go func() {
		// a writer that replaced the FIFO instead leaves this open
		// blocked for good: the caller waits 20 s at most
		r, err := os.Open(path)
		if err != nil {
			c <- err.Error()
			return
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		c <- string(b)
	}()
	timeout := make(chan string, 1)
	go func() {
		select {
		case s := <-c:
			timeout <- s
		case <-time.After(20 * time.Second):
			timeout <- "(nothing within 20 s)"
		}
	}()
	return path, timeout
}

// convert into a FIFO and --html into one write into it; the FIFO stays.
func TestOutputsIntoFIFO(t *testing.T) {
	in := tinyTraceFile(t)
	for _, args := range [][]string{
		{"convert", in},
		{"replay", in, "-o", "json", "--html"},
	} {
		fifo, got := readFIFO(t)
		if _, errs, code := gm(t, append(args, fifo)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		s := <-got
		if args[0] == "convert" && !strings.HasPrefix(s, "# gpumem-trace v1") || args[0] == "replay" && !strings.Contains(s, "<html") {
			t.Errorf("%v: the FIFO's reader got %.60q", args, s)
		}
		if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("%v: the FIFO is now %v", args, fi.Mode())
		}
	}
}

// feedFIFO makes a FIFO that gives the file src to whoever opens it,
// once.
func feedFIFO(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip("no FIFOs:", err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.Write(data)
		w.Close()
	}()
	return p
}

// feedPipe is a pipe giving the file src, named as bash names <(cat src).
func feedPipe(t *testing.T, src string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(data)
		w.Close()
	}()
	return "/proc/self/fd/" + strconv.Itoa(int(r.Fd()))
}

// A trace given as a pipe or a FIFO, which can be read only once, replays
// as the file does (a snapshot pickle is otherwise read in several
// passes); a command that would read one twice says so instead of
// waiting for good.
func TestTracesFromPipes(t *testing.T) {
	for _, name := range []string{"seed_frag.pickle", "gpt2_varlen_capped95.pickle"} {
		src := pytorchFixture(name)
		want := replayJSON(t, src)
		for how, path := range map[string]string{"fifo": feedFIFO(t, src), "pipe": feedPipe(t, src)} {
			done := make(chan map[string]any, 1)
			go func() { done <- replayJSONOrNil(path) }()
			select {
			case got := <-done:
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s through a %s: the report differs from the file's", name, how)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s through a %s: no answer in 60 s", name, how)
			}
		}
	}
	fifo := feedFIFO(t, pytorchFixture("seed_frag.pickle"))
	done := make(chan string, 1)
	go func() { _, errs, _ := gm(t, "diff", fifo, fifo, "-o", "json"); done <- errs }()
	select {
	case errs := <-done:
		if !strings.Contains(errs, "read only once") {
			t.Errorf("diff of a FIFO with itself: %s", errs)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("diff of a FIFO with itself: no answer in 60 s")
	}
}

// replayJSONOrNil is replayJSON for a goroutine: nil on failure.
func replayJSONOrNil(path string) map[string]any {
	var o, e bytes.Buffer
	if run([]string{"replay", path, "-o", "json"}, strings.NewReader(""), &o, &e) != 0 {
		return map[string]any{"error": e.String()}
	}
	var m map[string]any
	if json.Unmarshal(o.Bytes(), &m) != nil {
		return nil
	}
	delete(m, "source")
	return m
}

// record with TMPDIR naming a missing folder says which variable is
// wrong, not only "stat /nonexistent".
func TestRecordNamesBadTMPDIR(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "nonexistent"))
	_, errs, code := gm(t, "record", "--", "true")
	if code != exitUsage || !strings.Contains(errs, "(TMPDIR) is not usable: no such file or directory") || !strings.Contains(errs, "gpumem: hint: set TMPDIR") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// A bidi override or a control character in a trace's name never reaches
// an HTML page raw (its <title>, its tables, its data): it shows as
// [U+202E].
func TestHTMLPagesShowBidiControls(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "evil\u202efdp.\x1btrace")
	if err := os.WriteFile(in, []byte(tinyTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", in, "-o", "json"},
		{"diff", in, in, "-o", "json"},
		{"sweep", in, "--grid", "defaults", "-o", "json"},
		{"fragcheck", in},
	} {
		out := filepath.Join(dir, args[0]+".html")
		if _, errs, code := gm(t, append(args, "--html", out)...); code != 0 && (args[0] != "fragcheck" || code != exitFailure) {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		if strings.ContainsAny(page, "\u202e\x1b") {
			t.Errorf("%s: a raw U+202E or ESC is in the page", args[0])
		}
		title, _, _ := strings.Cut(page[strings.Index(page, "<title>"):], "</title>")
		if args[0] != "fragcheck" && !strings.Contains(title, "[U+202E]") {
			t.Errorf("%s: title %q", args[0], title)
		}
	}
}

// An output path that cannot be written (a folder) is refused before any
// work: exit 2, nothing on stdout.
func TestUnwritableOutputRefusedFirst(t *testing.T) {
	in := tinyTraceFile(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"replay", in, "--html", dir},
		{"convert", in, dir},
	} {
		stdout, errs, code := gm(t, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(errs, "gpumem: error: writing "+dir+": is a folder") {
			t.Errorf("%v: exit %d, stdout %q, stderr %s", args, code, stdout, errs)
		}
	}
}
