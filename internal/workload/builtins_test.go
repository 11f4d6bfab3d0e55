package workload

import (
	"bufio"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// liveAtEnd is how many allocations each builtin documents leaving live.
var liveAtEnd = map[string]int{
	"free-but-fails": 9, // eight halves and the request that fails
	"transformer":    3, // cuBLAS workspaces
}

func TestBuiltins(t *testing.T) {
	bs := Builtins()
	if len(bs) < 8 {
		t.Fatalf("%d builtins", len(bs))
	}
	if !slices.IsSortedFunc(bs, func(a, b Builtin) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("builtins not sorted by name")
	}
	for _, b := range bs {
		t.Run(b.Name, func(t *testing.T) {
			if b.Description == "" || strings.Contains(b.Description, "\n") {
				t.Errorf("description %q is not one line", b.Description)
			}
			w, err := b.Build(nil)
			if err != nil {
				t.Fatal(err)
			}
			if w.Name != b.Name || len(w.Ops) == 0 {
				t.Errorf("workload %q with %d ops", w.Name, len(w.Ops))
			}
			s, err := checkOps(w.Ops)
			if err != nil {
				t.Fatal(err)
			}
			if s.finalLen != liveAtEnd[b.Name] {
				t.Errorf("%d allocations live at the end, want %d", s.finalLen, liveAtEnd[b.Name])
			}
			checkPhases(t, w)
			if _, err := b.Build(map[string]string{"nosuch": "1"}); err == nil {
				t.Error("unknown parameter accepted")
			}
		})
	}
}

func checkPhases(t *testing.T, w *Workload) {
	t.Helper()
	if len(w.Phases) == 0 {
		t.Error("no phases")
	}
	for i, p := range w.Phases {
		if p.Name == "" || p.Op < 0 || p.Op > len(w.Ops) || (i > 0 && p.Op < w.Phases[i-1].Op) {
			t.Errorf("phase %d = %+v out of order or range", i, p)
		}
	}
}

// recorded reads an alloc/free sequence extracted by testdata/extract.py.
type recordedOp struct {
	alloc  bool
	size   uint64 // alloc
	stream uint64 // alloc
	n      int    // free: which allocation, counting from 0
}

func readRecorded(t *testing.T, name string) []recordedOp {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var ops []recordedOp
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		var r recordedOp
		switch {
		case len(fs) == 3 && fs[0] == "alloc":
			r.alloc = true
			r.size, err = strconv.ParseUint(fs[1], 10, 64)
			if err == nil {
				r.stream, err = strconv.ParseUint(fs[2], 10, 64)
			}
		case len(fs) == 2 && fs[0] == "free":
			r.n, err = strconv.Atoi(fs[1])
		default:
			t.Fatalf("%s: bad line %q", name, sc.Text())
		}
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ops
}

// asRecorded turns ops into the recorded form: frees name allocations by
// ordinal, a block counts as freed when it completes.
func asRecorded(ops []alloc.Op) []recordedOp {
	var out []recordedOp
	ordinal := map[uint32]int{}
	n := 0
	for _, op := range ops {
		switch op.Kind {
		case alloc.OpAlloc:
			ordinal[op.ID] = n
			n++
			out = append(out, recordedOp{alloc: true, size: op.Size, stream: op.Stream})
		case alloc.OpFree:
			out = append(out, recordedOp{n: ordinal[op.ID]})
		}
	}
	return out
}

func TestFragDemoMatchesRecording(t *testing.T) {
	want := readRecorded(t, "seed_frag.seq.gz")
	w, err := Lookup("frag-demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := asRecorded(w.Ops)
	if !slices.Equal(got, want) {
		t.Fatalf("frag-demo makes %d alloc/free events, the recording %d, or they differ", len(got), len(want))
	}
	// empty_cache comes right after the 4 MiB tensor is freed.
	i := slices.IndexFunc(w.Ops, func(op alloc.Op) bool { return op.Kind == alloc.OpEmptyCache })
	if i < 2 || w.Ops[i-2].Size != 4<<20 || w.Ops[i-1].Kind != alloc.OpFree {
		t.Errorf("empty_cache at op %d, not after the 4 MiB tensor", i)
	}
}

func TestTransformerMatchesRecording(t *testing.T) {
	want := readRecorded(t, "gpt2_varlen.seq.gz")
	w, err := Lookup("transformer", map[string]string{"seq": "512,1024,256,768,1024,384,896,640"})
	if err != nil {
		t.Fatal(err)
	}
	got := asRecorded(w.Ops)
	if len(got) != len(want) {
		t.Fatalf("%d alloc/free events, the recording has %d", len(got), len(want))
	}
	sizeDiffs := 0
	for i := range got {
		g, r := got[i], want[i]
		if g.alloc != r.alloc || g.n != r.n || g.stream != r.stream {
			t.Fatalf("event %d = %+v, recorded %+v", i, g, r)
		}
		if g.size != r.size {
			// Only the embedding backward's sort scratch is data dependent.
			if max(g.size, r.size)-min(g.size, r.size) > 4096 || g.size > 1<<20 {
				t.Fatalf("event %d: size %d, recorded %d", i, g.size, r.size)
			}
			sizeDiffs++
		}
	}
	if sizeDiffs > 2 {
		t.Errorf("%d sizes differ from the recording", sizeDiffs)
	}
}

func TestTransformerVariants(t *testing.T) {
	peak := func(params map[string]string) uint64 {
		t.Helper()
		w, err := Lookup("transformer", params)
		if err != nil {
			t.Fatal(err)
		}
		s, err := checkOps(w.Ops)
		if err != nil {
			t.Fatalf("%v: %v", params, err)
		}
		if s.finalLen != 3 {
			t.Errorf("%v: %d live at the end, want the 3 cuBLAS workspaces", params, s.finalLen)
		}
		return s.peak
	}
	small := func(kv ...string) map[string]string {
		p := map[string]string{"layers": "4", "hidden": "256", "heads": "4", "seq": "512", "batch": "4", "vocab": "1000", "steps": "2"}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i]] = kv[i+1]
		}
		return p
	}
	base := peak(small())
	if ck := peak(small("checkpoint", "true")); ck >= base {
		t.Errorf("checkpointing peak %d, not below %d", ck, base)
	}
	if bf := peak(small("dtype", "bf16")); bf >= base {
		t.Errorf("bf16 peak %d, not below fp32 %d", bf, base)
	}
	if ea := peak(small("attention", "eager")); ea <= base {
		t.Errorf("eager attention peak %d, not above sdpa %d", ea, base)
	}
	if sgd := peak(small("optimizer", "sgd")); sgd >= base {
		t.Errorf("sgd peak %d, not below adamw %d", sgd, base)
	}
	for _, p := range []map[string]string{
		small("dropout", "false"),
		small("dtype", "bf16", "checkpoint", "on", "attention", "eager", "dropout", "off"),
		small("seq", "100,200,300", "steps", "5"),
	} {
		peak(p)
	}
}

func TestTransformerParamErrors(t *testing.T) {
	for _, p := range []map[string]string{
		{"dtype": "fp16"},
		{"hidden": "100", "heads": "3"},
		{"seq": "2048"},
		{"seq": "1,,2"},
		{"layers": "0"},
		{"checkpoint": "maybe"},
		{"optimizer": "lion"},
		{"attention": "flash"},
		{"batch": "65536", "vocab": "4194304", "positions": "4194304", "seq": "4194304"},
	} {
		if _, err := Lookup("transformer", p); err == nil {
			t.Errorf("%v: no error", p)
		} else if !strings.HasPrefix(err.Error(), "transformer: ") {
			t.Errorf("%v: error %q does not name the workload", p, err)
		}
	}
}

func TestStrategies(t *testing.T) {
	peak := map[string]uint64{}
	for _, name := range []string{"strategy-default", "strategy-free-early", "strategy-empty-cache", "strategy-pool", "strategy-warmup"} {
		w, err := Lookup(name, map[string]string{"steps": "8"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := checkOps(w.Ops)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		peak[name] = s.peak
		caches := 0
		for _, op := range w.Ops {
			if op.Kind == alloc.OpEmptyCache {
				caches++
			}
		}
		if want := map[string]int{"strategy-empty-cache": 1}[name]; caches != want {
			t.Errorf("%s: %d empty_cache calls, want %d", name, caches, want)
		}
	}
	if peak["strategy-free-early"] >= peak["strategy-default"] {
		t.Errorf("freeing early peaks at %d, default at %d", peak["strategy-free-early"], peak["strategy-default"])
	}
	if _, err := Lookup("strategy-default", map[string]string{"steps": "0"}); err == nil {
		t.Error("steps=0 accepted")
	}
}

func TestFreeButFails(t *testing.T) {
	w, err := Lookup("free-but-fails", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkOps(w.Ops[:len(w.Ops)-1])
	if err != nil {
		t.Fatal(err)
	}
	last := w.Ops[len(w.Ops)-1]
	var live uint64
	for _, size := range s.live {
		live += size
	}
	if w.Limit != 8<<30 || live != 4<<30 || last.Kind != alloc.OpAlloc || last.Size != 2<<30 {
		t.Errorf("limit %d, live %d before a last request of %d", w.Limit, live, last.Size)
	}
}

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "two.wl")
	if err := os.WriteFile(path, []byte("param n = 1\nrepeat n {\nalloc t[i] 1MiB\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Lookup(path, map[string]string{"n": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "two" || len(w.Ops) != 2 {
		t.Errorf("got %q with %d ops", w.Name, len(w.Ops))
	}
	if _, err := Lookup("no-such-workload", nil); err == nil || !strings.Contains(err.Error(), `no builtin workload or file named "no-such-workload"`) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := Lookup(filepath.Join(dir, "missing.wl"), nil); err == nil {
		t.Error("missing file: no error")
	}
	bad := filepath.Join(dir, "bad.wl")
	os.WriteFile(bad, []byte("alloc a 1\nfree b\n"), 0o644)
	if _, err := ParseFile(bad); err == nil || err.Error() != bad+":2: free of b, which is not allocated" {
		t.Errorf("bad script: %v", err)
	}
}
