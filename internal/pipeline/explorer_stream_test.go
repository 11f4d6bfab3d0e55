package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/htmlreport"
	"github.com/gpumem/gpumem/internal/setup"
)

// The explorer packed as the stepped replay makes it (Detail with a
// packer, what `replay --html` does) is the page the whole explorer makes
// (Detail(nil), packed at the end), byte for byte: with every band and
// with most aggregated, through an out-of-memory, with several devices.
func TestExplorerStreamedPage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		card  uint64
		bands int
	}{
		{"gpt2_varlen_stacks.pickle", 0, 0},
		{"gpt2_varlen_stacks.pickle", 0, 40},
		{"multistream.pickle", 0, 0},
		{"seed_frag.pickle", 0, 0},
		{"graph_convnet.pickle", 0, 0},
		{"gpt2_varlen.pickle", 16 << 30, 0},
		{"ddp/ddp_gpt2.rank0.pickle", 0, 0},
	} {
		t.Run(fmt.Sprint(tc.name, tc.card, tc.bands), func(t *testing.T) {
			page := func(pack figures.ExplorerPacker) []byte {
				run, err := Replay(context.Background(), Source{Trace: pytorchFixture(tc.name), Keep: KeepDetail},
					Settings{Setup: setup.Setup{Card: tc.card}, Points: 2000})
				if err != nil {
					t.Fatal(err)
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
			whole, streamed := page(nil), page(htmlreport.NewExplorerPacker(tc.bands))
			if !bytes.Equal(whole, streamed) {
				i := 0
				for i < min(len(whole), len(streamed)) && whole[i] == streamed[i] {
					i++
				}
				t.Fatalf("pages differ at byte %d of %d/%d:\nwhole    %.200q\nstreamed %.200q", i, len(whole), len(streamed),
					whole[max(0, i-40):], streamed[max(0, i-40):])
			}
		})
	}
}
