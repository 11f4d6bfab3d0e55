package estimate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestRankEnv(t *testing.T) {
	env := RankEnv([]string{"PATH=/bin", "RANK=7", "MASTER_PORT=1", "OMP_NUM_THREADS=4"}, 1, 2)
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("%s twice", k)
		}
		got[k] = v
	}
	for k, v := range map[string]string{"PATH": "/bin", "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
		"LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "OMP_NUM_THREADS": "4"} {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	if e := RankEnv(nil, 0, 2); !strings.Contains(strings.Join(e, " "), "OMP_NUM_THREADS=1") {
		t.Errorf("torchrun sets OMP_NUM_THREADS=1 for several ranks: %v", e)
	}
}

func TestWorst(t *testing.T) {
	rank := func(reserved, allocated int64, ooms int) *Result {
		r := &Result{OOMs: make([]OOM, ooms)}
		r.Stats.ReservedBytes[0].Peak, r.Stats.AllocatedBytes[0].Peak = reserved, allocated
		return r
	}
	for _, c := range []struct {
		rs   []*Result
		want int
	}{
		{[]*Result{rank(10, 5, 0), rank(20, 1, 0)}, 1},
		{[]*Result{rank(20, 5, 0), rank(20, 6, 0), rank(20, 6, 0)}, 1},
		{[]*Result{rank(30, 5, 0), rank(2, 1, 1)}, 1}, // out of memory early: still the worst
		{[]*Result{rank(3, 3, 0)}, 0},
	} {
		if got := Worst(c.rs); got != c.want {
			t.Errorf("%v: worst %d, want %d", c.rs, got, c.want)
		}
	}
}

func TestRankTracePath(t *testing.T) {
	for in, want := range map[string]string{"estimate.trace": "estimate.rank1.trace", "out/x": "out/x.rank1",
		"a.b/run": "a.b/run.rank1"} {
		if got := RankTracePath(in, 1); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

// runRanks runs testdata/NAME as n ranks and returns each rank's result,
// output and trace.
func runRanks(t *testing.T, name string, n int) ([]*Result, string, []string) {
	t.Helper()
	py := python(t)
	set, err := NewSettings("H200", "", "", 0, n)
	if err != nil {
		t.Fatal(err)
	}
	set.Check = true
	traces := make([]*bytes.Buffer, n)
	ws := make([]io.Writer, n)
	for r := range traces {
		traces[r] = &bytes.Buffer{}
		ws[r] = traces[r]
	}
	var mu sync.Mutex
	var out bytes.Buffer
	lw := lockedWriter{&mu, &out}
	res, err := RunRanks(set.Options, []string{py, filepath.Join("testdata", name)}, os.Environ(), ws,
		runnerTo(lw))
	if err != nil {
		t.Fatal(err)
	}
	ts := make([]string, n)
	for r, b := range traces {
		ts[r] = b.String()
	}
	return res, out.String(), ts
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// event is an alloc or a free of a trace: its block's size and stream.
type event struct {
	free   bool
	size   int64
	stream string
}

func events(t *testing.T, trace string) []event {
	t.Helper()
	var out []event
	sizes := map[string]event{}
	for _, line := range strings.Split(trace, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "alloc":
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatalf("trace line %q", line)
			}
			e := event{size: n, stream: strings.TrimPrefix(f[3], "stream=")}
			sizes[f[1]] = e
			out = append(out, e)
		case len(f) == 2 && f[0] == "free":
			e := sizes[f[1]]
			e.free = true
			out = append(out, e)
		}
	}
	return out
}

// subsequence says whether want occurs in es in order (other events may
// come between), from index from; it returns the index after the match.
func subsequence(es []event, from int, want ...event) (int, bool) {
	i := from
	for _, w := range want {
		for i < len(es) && es[i] != w {
			i++
		}
		if i == len(es) {
			return i, false
		}
		i++
	}
	return i, true
}

func round512(n int64) int64 { return (n + 511) / 512 * 512 }

// Two ranks of DDP: each rank's allocations follow DDP's buckets as
// PyTorch 2.11 makes them, computed here from the parameters' sizes.
func TestDDPTwoRanks(t *testing.T) {
	t.Parallel()
	res, out, traces := runRanks(t, "ddp_ranks.py", 2)
	const mib = 1 << 20
	// Linear(256, 1024), Linear(1024, 1024), Linear(1024, 256), fp32
	w1, b1, w2, b2, w3, b3 := int64(256*1024*4), int64(1024*4), int64(1024*1024*4), int64(1024*4), int64(1024*256*4), int64(256*4)
	all := w1 + b1 + w2 + b2 + w3 + b3
	// buckets rebuilt after the first step, in the order gradients became
	// ready (last layer first, its bias before its weight): the first
	// bucket closes once it holds 1 MiB, the next ones at 25 MiB
	first := b3 + w3
	if first < mib {
		t.Fatal("the test's first bucket must reach 1 MiB")
	}
	rest := b2 + w2 + b1 + w1
	for r, x := range res {
		gathered := fmt.Sprintf("rank %d of 2 ok, gathered [{'rank': %d}, {'rank': %d}]", r, r, r)
		if x.Err != nil || !strings.Contains(out, gathered) {
			t.Fatalf("rank %d: %v\n%s", r, x.Err, out)
		}
		es := events(t, traces[r])
		// DDP(): the parameters broadcast from rank 0 through one flat
		// buffer, freed; then one gradient bucket of them all (the first
		// iteration's, bucket_cap_mb not given)
		at, ok := subsequence(es, 0, event{size: all, stream: "0x0"}, event{free: true, size: all, stream: "0x0"},
			event{size: all, stream: "0x0"})
		if !ok {
			t.Fatalf("rank %d: no broadcast buffer then bucket of %d bytes:\n%v", r, all, es)
		}
		// the second forward frees that bucket and makes the rebuilt ones
		if _, ok := subsequence(es, at, event{free: true, size: all, stream: "0x0"},
			event{size: round512(first), stream: "0x0"}, event{size: round512(rest), stream: "0x0"}); !ok {
			t.Errorf("rank %d: the buckets are not rebuilt as [%d, %d] bytes:\n%v", r, first, rest, es[at:])
		}
	}
	if w := Worst(res); w != 1 || res[1].Stats.AllocatedBytes[0].Peak <= res[0].Stats.AllocatedBytes[0].Peak {
		t.Errorf("worst rank %d; peaks allocated %d, %d: rank 1 trains on twice the rows", w,
			res[0].Stats.AllocatedBytes[0].Peak, res[1].Stats.AllocatedBytes[0].Peak)
	}
}

// Two ranks of FSDP2: the sharded parameters, the all-gather and
// reduce-scatter buffers on their streams, computed from the shapes.
func TestFSDP2TwoRanks(t *testing.T) {
	t.Parallel()
	res, out, traces := runRanks(t, "fsdp2_ranks.py", 2)
	// weights of 1001x1000 and 1000x1001, sharded on dim 0 across 2 ranks:
	// 1001 rows in shards of 501 (the second padded), 1000 rows in 500s
	shard0, shard1 := int64(501*1000*4), int64(500*1001*4)
	want := fmt.Sprintf("sharded %d", round512(shard0)+round512(shard1))
	// AdamW's states follow a rank's own rows, unpadded: rank 1 has 500
	// of the first weight's
	states0 := fmt.Sprintf("states %d", 2*(round512(shard0)+round512(shard1)))
	states1 := fmt.Sprintf("states %d", 2*(round512(500*1000*4)+round512(shard1)))
	if strings.Count(out, want) != 2 || !strings.Contains(out, states0) || !strings.Contains(out, states1) {
		t.Fatalf("want each rank to print %q, and %q (rank 0) and %q (rank 1):\n%s", want, states0, states1, out)
	}
	for r, x := range res {
		if x.Err != nil {
			t.Fatalf("rank %d: %v\n%s", r, x.Err, out)
		}
		es := events(t, traces[r])
		var agStream, rsStream string
		for i, e := range es {
			// the all-gather output of the padded shards, on FSDP2's
			// all-gather stream, then the unsharded parameter's storage
			// (world size x padded shard) on the default one
			if !e.free && e.size == round512(2*shard0) && e.stream != "0x0" && i+1 < len(es) &&
				es[i+1] == (event{size: round512(2 * shard0), stream: "0x0"}) {
				agStream = e.stream
			}
			// the reduce-scatter output (a shard) on its stream
			if !e.free && e.size == round512(shard1) && e.stream != "0x0" {
				rsStream = e.stream
			}
		}
		if agStream == "" || rsStream == "" || agStream == rsStream {
			t.Errorf("rank %d: all-gather stream %q, reduce-scatter stream %q:\n%v", r, agStream, rsStream, es)
		}
		// a step allocates world size x padded shard of the first weight
		// on the default stream three times: its unsharded storage in the
		// forward and again in the backward (resharded after the forward:
		// storage.resize_), and its gradient's reduce-scatter input
		n := 0
		for _, e := range es {
			if !e.free && e == (event{size: round512(2 * shard0), stream: "0x0"}) {
				n++
			}
		}
		if n != 3*2 {
			t.Errorf("rank %d: %d blocks of %d bytes on the default stream in 2 steps, want 6", r, n, round512(2*shard0))
		}
	}
}

// RunWithTrace of two ranks: a trace file a rank, the report of the worst
// rank (the one holding more) with both rows, and the failed rank's exit
// status for the whole.
func TestRanksWithTrace(t *testing.T) {
	t.Parallel()
	py := python(t)
	set, err := NewSettings("H200", "", "", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "e.trace")
	var out bytes.Buffer
	var mu sync.Mutex
	lw := lockedWriter{&mu, &out}
	rep, res, err := RunWithTrace(context.Background(), set, []string{py, filepath.Join("testdata", "ranks_exit.py")},
		os.Environ(), path, runnerTo(lw))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if code, ok := ExitCode(res.Err); !ok || code != 3 {
		t.Errorf("exit status %v, want rank 1's 3", res.Err)
	}
	if rep.Rank != 1 || len(rep.Ranks) != 2 || rep.Replay == nil || rep.Trace != RankTracePath(path, 1) {
		t.Fatalf("report of rank %d, %d rows, trace %s", rep.Rank, len(rep.Ranks), rep.Trace)
	}
	for r, row := range rep.Ranks {
		if _, err := os.Stat(RankTracePath(path, r)); err != nil {
			t.Error(err)
		}
		if row.PeakAllocated != int64(r+1)<<20 || row.OK != (r == 0) {
			t.Errorf("rank %d: %+v", r, row)
		}
	}
	if got := rep.Replay.Stats.AllocatedBytes[0].Peak; got != 2<<20 {
		t.Errorf("the report's peak allocated is %d, not rank 1's 2 MiB", got)
	}
}
