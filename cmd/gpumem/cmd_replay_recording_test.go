package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type recordingDoc struct {
	Allowed     uint64           `json:"allowed"`
	MemoryStats map[string]int64 `json:"memory_stats"`
	InferredCap *struct {
		Low, High uint64
		From      string
	} `json:"inferred_cap"`
	Divergence *struct {
		Op       int  `json:"op"`
		Event    *int `json:"event"`
		Recorded string
		Replayed string
		Cause    string
	} `json:"divergence"`
}

func replayDoc(t *testing.T, args ...string) (recordingDoc, string) {
	t.Helper()
	out, errs, code := gm(t, append([]string{"replay"}, append(args, "-o", "json")...)...)
	if code != 0 {
		t.Fatalf("gpumem replay %v: exit %d: %s", args, code, errs)
	}
	var doc recordingDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	return doc, errs
}

// With no card or fraction, the capped recording replays under the cap it
// shows, says so on stderr, and gives PyTorch's figures; given a card and
// fraction, the replay runs under those.
func TestReplayInfersCap(t *testing.T) {
	doc, errs := replayDoc(t, sweepFixture("gpt2_varlen_capped95.pickle"))
	if doc.InferredCap == nil || doc.Allowed != doc.InferredCap.Low || doc.Divergence != nil {
		t.Fatalf("allowed %d, inferred cap %+v, divergence %+v", doc.Allowed, doc.InferredCap, doc.Divergence)
	}
	if !strings.HasPrefix(errs, "gpumem: note: ") || !strings.Contains(errs, "recorded under a cap of about 16.67 GiB") ||
		!strings.Contains(errs, "override with --device-memory/--memory-fraction") || strings.Count(errs, "\n") != 1 {
		t.Errorf("stderr %q", errs)
	}
	want := truthOf(t, "gpt2_varlen_capped95").MemoryStats
	for k, v := range want {
		if doc.MemoryStats[k] != v {
			t.Errorf("%s = %d, PyTorch reported %d", k, doc.MemoryStats[k], v)
		}
	}
	doc, _ = replayDoc(t, sweepFixture("gpt2_varlen_capped95.pickle"), "--device-memory", "150109880320", "--memory-fraction", "0.5")
	if doc.InferredCap != nil || doc.Allowed != 150109880320/2 {
		t.Errorf("with a fraction given: allowed %d, inferred %+v", doc.Allowed, doc.InferredCap)
	}
	// an uncapped recording shows no cap and follows its recording: nothing on stderr
	doc, errs = replayDoc(t, sweepFixture("gpt2_varlen.pickle"))
	if doc.InferredCap != nil || doc.Allowed != 0 || doc.Divergence != nil || errs != "" {
		t.Errorf("uncapped: allowed %d, inferred %+v, divergence %+v, stderr %q", doc.Allowed, doc.InferredCap, doc.Divergence, errs)
	}
}

// A replay under other settings than the recording's, or on a card too
// small for what the recording cached, leaves it: the JSON says where and
// why, while stderr and the report say nothing of an answer to the
// question the user asked.
func TestReplayReportsDivergence(t *testing.T) {
	for _, what := range [][]string{{"--alloc-conf", "roundup_power2_divisions:4"}, {"--device-memory", "16GiB"}} {
		args := append([]string{sweepFixture("gpt2_varlen.pickle")}, what...)
		doc, errs := replayDoc(t, args...)
		d := doc.Divergence
		if d == nil || d.Event == nil || !strings.Contains(d.Cause, map[string]string{"--alloc-conf": "roundup_power2_divisions", "--device-memory": "smaller card"}[what[0]]) {
			t.Fatalf("%v: divergence %+v", what, d)
		}
		if errs != "" {
			t.Errorf("%v: stderr %q", what, errs)
		}
		out, _, code := gm(t, append([]string{"replay"}, args...)...)
		if code != 0 || strings.Contains(out, "divergence") {
			t.Errorf("%v: exit %d, the table tells of the divergence:\n%s", what, code, out)
		}
	}
}

// An RMM log records no segments: nothing to compare, nothing said.
func TestReplayRMMHasNoDivergence(t *testing.T) {
	in := filepath.Join(t.TempDir(), "rmm.csv")
	if err := os.WriteFile(in, []byte("Thread,Time,Action,Pointer,Size,Stream\n"+
		"1,10:00:00.000001,allocate,0x7f0000000000,1048576,0x0\n"+
		"1,10:00:00.000002,allocate failure,(nil),1099511627776,0x0\n"+
		"1,10:00:00.000003,free,0x7f0000000000,1048576,0x0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc, errs := replayDoc(t, in)
	if doc.Divergence != nil || doc.InferredCap != nil || errs != "" {
		t.Errorf("divergence %+v, cap %+v, stderr %q", doc.Divergence, doc.InferredCap, errs)
	}
}
