package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// settings are the replay flags the fidelity check passes for the fixture.
func (tr replayTruth) settings() []string {
	args := []string{"--alloc-conf", tr.AllocConf, "--device", strconv.Itoa(tr.Device)}
	if tr.Fraction != 0 {
		args = append(args, "--device-memory", strconv.FormatUint(tr.RecordedWith.DeviceTotal, 10),
			"--memory-fraction", strconv.FormatFloat(tr.Fraction, 'g', -1, 64))
	}
	return args
}

// What-if replays: gpt2_varlen's trace under the settings of the runs
// recorded with them gives the memory_summary PyTorch printed for those runs.
// Their inactive-split and non-releasable rows depend on where the driver
// placed the segments the recording never had.
func TestReplayWhatIfSummaries(t *testing.T) {
	for _, name := range []string{"gpt2_varlen_pow2div4", "gpt2_varlen_capped95"} {
		tr := truthOf(t, name)
		args := append([]string{"replay", sweepFixture(tr.Replay), "-o", "torch-summary"}, tr.settings()...)
		out, errs, code := gm(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errs)
		}
		if out != tr.MemorySummary {
			t.Errorf("%s: memory_summary differs from PyTorch's:\n%s\nwant:\n%s", name, out, tr.MemorySummary)
		}
	}
}

// --ignore-addresses keeps the first segment's recorded address and models
// the others; the report says so. seed_frag's segments are where the model
// puts them, so its statistics stay PyTorch's.
func TestReplayIgnoreAddresses(t *testing.T) {
	type addrs struct {
		Chosen       string `json:"chosen"`
		ModelledFrom *int   `json:"modelled_from"`
		Segments     int    `json:"segments"`
		Recorded     int    `json:"recorded"`
		Matched      int    `json:"at_recorded_address"`
	}
	replay := func(extra ...string) (addrs, map[string]int64) {
		t.Helper()
		out, errs, code := gm(t, append([]string{"replay", sweepFixture("seed_frag.pickle"), "-o", "json"}, extra...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		var doc struct {
			Addresses   *addrs           `json:"addresses"`
			MemoryStats map[string]int64 `json:"memory_stats"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Addresses == nil {
			t.Fatalf("%v: no addresses in the JSON report", extra)
		}
		return *doc.Addresses, doc.MemoryStats
	}
	rec, _ := replay()
	if rec.Chosen != "recorded" || rec.ModelledFrom != nil || rec.Segments != 13 || rec.Matched != rec.Recorded {
		t.Errorf("following the recording: %+v", rec)
	}
	mod, stats := replay("--ignore-addresses")
	if mod.Chosen != "modelled" || mod.ModelledFrom == nil || *mod.ModelledFrom != 1 || mod.Segments != 13 {
		t.Errorf("--ignore-addresses: %+v", mod)
	}
	if mod.Matched != mod.Recorded {
		t.Errorf("--ignore-addresses: %d of %d segments at their recorded address, want all", mod.Matched, mod.Recorded)
	}
	for k, v := range truthOf(t, "seed_frag").MemoryStats {
		if stats[k] != v {
			t.Errorf("--ignore-addresses: %s = %d, PyTorch reported %d", k, stats[k], v)
		}
	}
	table, _, _ := gm(t, "replay", sweepFixture("seed_frag.pickle"), "--ignore-addresses")
	if !strings.Contains(table, "addresses") || !strings.Contains(table, "the other 12 modelled") {
		t.Errorf("the table does not say how addresses were chosen:\n%s", table)
	}
	_, errs, code := gm(t, "replay", sweepFixture("seed_frag.pickle"), "--ignore-addresses", "--backend", "cuda")
	if code != exitUsage || !strings.Contains(errs, "--ignore-addresses") {
		t.Errorf("--backend cuda --ignore-addresses: exit %d, %q", code, errs)
	}
}

// Every fixture replayed with --ignore-addresses gives the statistics
// PyTorch reported (the keys and rule of the fidelity check): a what-if
// replay has no recorded addresses, so the driver model must order the
// segments as the driver did wherever best fit breaks a tie by address.
func TestReplayIgnoreAddressesFidelity(t *testing.T) {
	// Known misses, with why (docs/pytorch-allocator.md, "Where the CUDA
	// driver places segments"): tenants the trace does not show moved the
	// frontier, or kernels freed the start-up range later than the model
	// opens it.
	known := map[string]string{
		"ddp/ddp_gpt2.rank0": "a 416 MiB frontier jump put its 56 MiB segment below later ones",
		"ddp/ddp_gpt2.rank1": "a 416 MiB frontier jump put its 56 MiB segment below later ones",
		"oom_survive_resnet": "tenants moved its frontier (256 MiB before its fourth segment) and its start-up range opened after five chunks, not one",
	}
	peaks := []string{"allocated_bytes.all.peak", "reserved_bytes.all.peak", "active_bytes.all.peak",
		"requested_bytes.all.peak", "inactive_split_bytes.all.peak", "segment.all.peak",
		"allocation.all.peak", "num_alloc_retries", "num_ooms"}
	final := []string{"allocated_bytes.all.current", "reserved_bytes.all.current", "segment.all.current",
		"num_device_alloc", "num_device_free", "reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.peak"}
	names := []string{"compile_reduce_overhead", "ddp/ddp_gpt2.rank0", "ddp/ddp_gpt2.rank1", "gpt2_varlen",
		"gpt2_varlen_capped95", "gpt2_varlen_pow2div4", "gpt2_varlen_stacks", "graph_convnet",
		"mempool_single", "multistream", "oom_survive_resnet", "resnet50_fp32", "seed_frag"}
	for _, name := range names {
		if why, ok := known[name]; ok {
			t.Logf("%s: not compared: %s", name, why)
			continue
		}
		tr := truthOf(t, name)
		dir := name[:strings.LastIndex(name, "/")+1] // "ddp/" or ""
		args := append([]string{"replay", sweepFixture(dir + tr.Replay), "--ignore-addresses", "-o", "json"}, tr.settings()...)
		out, errs, code := gm(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errs)
		}
		var doc struct {
			MemoryStats map[string]int64 `json:"memory_stats"`
			OOM         *struct {
				OpIndex int `json:"op_index"`
			} `json:"oom"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		keys := peaks
		if tr.MemoryStats["num_ooms"] == 0 {
			keys = append(append([]string(nil), peaks...), final...)
		}
		for _, k := range keys {
			if got, want := doc.MemoryStats[k], tr.MemoryStats[k]; got != want {
				t.Errorf("%s --ignore-addresses: %s = %d, PyTorch reported %d", name, k, got, want)
			}
		}
		if tr.OOMOpIndex != nil && (doc.OOM == nil || doc.OOM.OpIndex != *tr.OOMOpIndex) {
			t.Errorf("%s --ignore-addresses: oom %+v, PyTorch failed at op %d", name, doc.OOM, *tr.OOMOpIndex)
		}
	}
}
