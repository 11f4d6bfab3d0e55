//go:build unix

package pipeline

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// eventSink keeps the events a stream hands over, with their lists.
type eventSink struct {
	lists  []int
	events []trace.Event
}

func (s *eventSink) sink() trace.PickleSink {
	return trace.PickleSink{Event: func(list int, e *trace.Event) error {
		s.lists, s.events = append(s.lists, list), append(s.events, *e)
		return nil
	}}
}

// A pickle read in place, a window at a time, decodes as one read: the
// same snapshot and events, with windows of a page (moved as often as
// they can be) or of the usual size.
func TestMappedReadsAsRead(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		least int64
	}{{synthetic, mapWindow}, {"../../testdata/pytorch/gpt2_varlen.pickle", mapWindow}, {"../../testdata/pytorch/gpt2_varlen.pickle", 1}} {
		name := c.name
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		want := &eventSink{}
		wsnap, wlists, werr := trace.StreamPickle(struct{ io.Reader }{f}, name, fi.Size(), want.sink())
		f.Close()
		if werr != nil {
			t.Fatal(werr)
		}
		m, ok := openMapped(ctx, name)
		if !ok {
			t.Fatalf("%s: not mapped", name)
		}
		m.least = c.least
		got := &eventSink{}
		var gsnap *trace.Snapshot
		var glists []int
		err = readMapped(m, func(r io.Reader) error {
			var err error
			gsnap, glists, err = trace.StreamPickle(r, name, m.size, got.sink())
			return err
		})
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(want.events) == 0 || !reflect.DeepEqual(gsnap, wsnap) || !reflect.DeepEqual(glists, wlists) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read in place differs from read (%d events, want %d)", name, len(got.events), len(want.events))
		}
	}
}

// Files read the usual way: not regular, empty, or not a pickle as it
// is (compressed).
func TestMappedDeclines(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pickle")
	gz := filepath.Join(dir, "x.pickle.gz")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(gz, []byte{0x1f, 0x8b, 8, 0}, 0o644)
	for _, p := range []string{Stdin, dir, empty, gz, filepath.Join(dir, "missing")} {
		if m, ok := openMapped(context.Background(), p); ok {
			m.Close()
			t.Errorf("%s: mapped", p)
		}
	}
}

// A file cut short while it is mapped faults where its pages went: the
// read ends with an error, not a crash.
func TestMappedFileCutShort(t *testing.T) {
	data, err := os.ReadFile("../../testdata/pytorch/gpt2_varlen.pickle")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "cut.pickle")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, ok := openMapped(context.Background(), p)
	if !ok {
		t.Fatal("not mapped")
	}
	defer m.Close()
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	err = readMapped(m, func(r io.Reader) error {
		_, _, err := trace.StreamPickle(r, p, m.size, (&eventSink{}).sink())
		return err
	})
	if !errors.Is(err, errFileChanged) {
		t.Errorf("read of a file cut short: %v, want %v", err, errFileChanged)
	}
}

// An interrupt stops a read in place at its next window.
func TestMappedStopsAtInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, ok := openMapped(ctx, "../../testdata/pytorch/gpt2_varlen.pickle")
	if !ok {
		t.Fatal("not mapped")
	}
	defer m.Close()
	events := 0
	sink := trace.PickleSink{Event: func(int, *trace.Event) error { events++; cancel(); return nil }}
	err := readMapped(m, func(r io.Reader) error {
		_, _, err := trace.StreamPickle(r, "x", m.size, sink)
		return err
	})
	if !errors.Is(err, context.Canceled) || events == 0 {
		t.Errorf("read interrupted at its first event (of %d): %v", events, err)
	}
}

// A fault outside the mapped window is a bug, not a file cut short: it
// stays a panic.
func TestMappedFaultElsewherePanics(t *testing.T) {
	m, ok := openMapped(context.Background(), "../../testdata/pytorch/gpt2_varlen.pickle")
	if !ok {
		t.Fatal("not mapped")
	}
	defer m.Close()
	if _, err := m.Window(0, 1); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("a fault outside the window was not a panic")
		}
	}()
	// a page mapped and given back: reading it faults, outside the window
	gone, err := syscall.Mmap(-1, 0, os.Getpagesize(), syscall.PROT_READ, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Munmap(gone); err != nil {
		t.Fatal(err)
	}
	err = readMapped(m, func(io.Reader) error {
		faulted = gone[0] // a read the compiler keeps
		return nil
	})
	t.Errorf("readMapped returned %v after a fault outside its window", err)
}

// faulted is where TestMappedFaultElsewherePanics puts what it reads.
var faulted byte
