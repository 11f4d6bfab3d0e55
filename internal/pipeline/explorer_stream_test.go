package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/htmlreport"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// The explorer packed as the stepped replay makes it (Detail with a
// packer) and as the replay that makes the report steps through it
// (Source.Pack, what `replay --html` does) is the page the whole explorer
// makes (Detail(nil), packed at the end), byte for byte, with the same
// report: with every band and with most aggregated, through an
// out-of-memory, with several devices, with private pools, with a trace's
// start state rebuilt, with expandable segments.
func TestExplorerStreamedPage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		card  uint64
		bands int
		conf  string
	}{
		{"gpt2_varlen_stacks.pickle", 0, 0, ""},
		{"gpt2_varlen_stacks.pickle", 0, 40, ""},
		{"multistream.pickle", 0, 0, ""},
		{"seed_frag.pickle", 0, 0, ""},
		{"graph_convnet.pickle", 0, 0, ""},
		{"gpt2_varlen.pickle", 16 << 30, 0, ""},
		{"ddp/ddp_gpt2.rank0.pickle", 0, 0, ""},
		{"mempool_single.pickle", 0, 0, ""},
		{"compile_reduce_overhead.pickle", 0, 0, ""},
		{"gpt2_varlen_stacks.pickle", 0, 0, "expandable_segments:True"},
	} {
		t.Run(fmt.Sprint(tc.name, tc.card, tc.bands, tc.conf), func(t *testing.T) {
			var report []byte
			page := func(pack figures.ExplorerPacker, inReplay bool) []byte {
				src := Source{Trace: pytorchFixture(tc.name), Keep: KeepDetail}
				if inReplay {
					src.Pack = pack
				}
				st := setup.Setup{Card: tc.card}
				if tc.conf != "" {
					c, err := alloc.ParseConfig(tc.conf)
					if err != nil {
						t.Fatal(err)
					}
					st.Config = &c
				}
				run, err := Replay(context.Background(), src, Settings{Setup: st, Points: 2000})
				if err != nil {
					t.Fatal(err)
				}
				rep, err := json.Marshal(run.Report)
				if err != nil {
					t.Fatal(err)
				}
				if report == nil {
					report = rep
				} else if !bytes.Equal(rep, report) {
					t.Fatalf("the report differs:\n%s\n%s", rep, report)
				}
				d, err := run.Detail(pack)
				if err != nil {
					t.Fatal(err)
				}
				if n := len(d.Explorers) + len(d.Packed); n == 0 {
					t.Fatal("no explorer")
				}
				var b bytes.Buffer
				if err := htmlreport.Write(&b, run.Report, htmlreport.Extra{Detail: d, MaxBands: tc.bands}); err != nil {
					t.Fatal(err)
				}
				return b.Bytes()
			}
			whole := page(nil, false)
			for _, inReplay := range []bool{false, true} {
				streamed := page(htmlreport.NewExplorerPacker(tc.bands), inReplay)
				if !bytes.Equal(whole, streamed) {
					i := 0
					for i < min(len(whole), len(streamed)) && whole[i] == streamed[i] {
						i++
					}
					t.Fatalf("in the replay %v: pages differ at byte %d of %d/%d:\nwhole    %.200q\nstreamed %.200q", inReplay, i, len(whole), len(streamed),
						whole[max(0, i-40):], streamed[max(0, i-40):])
				}
			}
		})
	}
}

// againSink is a collector whose Finish asks for the ops once more.
type againSink struct {
	collector
	passes int
}

func (s *againSink) Finish() error {
	if s.passes++; s.passes == 1 {
		return figures.ErrExplorerAgain
	}
	return nil
}

// A sink that asks for the ops again gets them all again, from Detail's
// replay, when the report's replay stepped through them first: the same
// explorer as the whole one.
func TestExplorerAgainAfterReplay(t *testing.T) {
	src := Source{Trace: pytorchFixture("gpt2_varlen_stacks.pickle"), Keep: KeepDetail}
	run, err := Replay(context.Background(), src, Settings{Points: 2000})
	if err != nil {
		t.Fatal(err)
	}
	want, err := run.Detail(nil)
	if err != nil {
		t.Fatal(err)
	}
	var sink *againSink
	pack := func() figures.ExplorerSink {
		if sink == nil {
			sink = &againSink{}
		}
		return sink
	}
	src.Pack = pack
	if run, err = Replay(context.Background(), src, Settings{Points: 2000}); err != nil {
		t.Fatal(err)
	}
	if sink == nil || sink.passes != 1 {
		t.Fatal("the report's replay did not step through the ops")
	}
	got, err := run.Detail(pack)
	if err != nil {
		t.Fatal(err)
	}
	if sink.passes != 2 || len(got.Packed) != 1 || got.Packed[0] != sink {
		t.Fatalf("the sink finished %d times, %d packed", sink.passes, len(got.Packed))
	}
	if !reflect.DeepEqual(sink.e, want.Explorers[0]) || !reflect.DeepEqual(got.PeakSegments, want.PeakSegments) ||
		!reflect.DeepEqual(got.Sites, want.Sites) {
		t.Fatal("the explorer differs from the whole one")
	}
}

// A trace whose peak rises too often for copies of its list is left to
// Detail's replay, with the same page.
func TestExplorerPeakCopiesOverBudget(t *testing.T) {
	defer func(v int) { peakCopySlack = v }(peakCopySlack)
	peakCopySlack = -1 << 30
	src := Source{Trace: pytorchFixture("gpt2_varlen_stacks.pickle"), Keep: KeepDetail}
	page := func(run *Run, pack figures.ExplorerPacker) []byte {
		d, err := run.Detail(pack)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := htmlreport.Write(&b, run.Report, htmlreport.Extra{Detail: d}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	run, err := Replay(context.Background(), src, Settings{Points: 2000})
	if err != nil {
		t.Fatal(err)
	}
	want := page(run, nil)
	src.Pack = htmlreport.NewExplorerPacker(0)
	if run, err = Replay(context.Background(), src, Settings{Points: 2000}); err != nil {
		t.Fatal(err)
	}
	if run.ex != nil {
		t.Fatal("the report's replay kept its explorer past the budget")
	}
	if !bytes.Equal(page(run, src.Pack), want) {
		t.Fatal("the page differs")
	}
}
