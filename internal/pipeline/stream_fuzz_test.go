package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzLeanReplay replays mutated snapshot pickles the lean way (streamed,
// in one read or two) and the usual way: neither may panic, both fail or
// both succeed, and then with the same report.
func FuzzLeanReplay(f *testing.F) {
	for _, seed := range []string{"../../pkg/trace/pickle/testdata/seed_frag_segments.pickle", pytorchFixture("mempool_single.pickle"),
		pytorchFixture("seed_frag.pickle"), pytorchFixture("multistream.pickle")} {
		data, err := os.ReadFile(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "fuzz.pickle")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s := Settings{Points: 200}
		var runs [2]*Set
		var errs [2]error
		for i, lean := range []bool{false, true} {
			runs[i], errs[i] = ReplaySet(context.Background(), SetSource{Paths: []string{path}, Keep: keepOf(lean)}, s)
		}
		if (errs[0] == nil) != (errs[1] == nil) {
			t.Fatalf("usual: %v; lean: %v", errs[0], errs[1])
		}
		if errs[0] != nil {
			return
		}
		if len(runs[0].Runs) != len(runs[1].Runs) {
			t.Fatalf("%d runs the usual way, %d lean", len(runs[0].Runs), len(runs[1].Runs))
		}
		for i := range runs[0].Runs {
			u, l := runs[0].Runs[i], runs[1].Runs[i]
			if !reflect.DeepEqual(l.Report, u.Report) || !reflect.DeepEqual(l.Notes, u.Notes) {
				t.Fatalf("run %d: lean report differs:\n got %+v %q\nwant %+v %q", i, l.Report, l.Notes, u.Report, u.Notes)
			}
		}
	})
}
