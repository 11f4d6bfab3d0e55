package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
)

// A replay that went past out-of-memory errors the program survived, in a
// program with a private pool: the human reports say both in a line, and
// JSON lists them, its "oom" being the first OOM when none stopped the
// replay (the index the fidelity check compares).
func TestPoolsAndSurvivedOOMs(t *testing.T) {
	r := &figures.Replay{
		Source: "t.pickle", Policy: "pytorch", Ops: 100,
		Stats: statsWith(map[string]int64{"num_ooms": 2, "reserved_bytes.all.peak": 3 * GiB}),
		Pools: []string{"private pool 1 (id (1,0)): 3 segments, 9 allocations, alive at the end; inferred from snapshot"},
		OOMs: []*figures.OOM{
			{OpIndex: 40, Size: 2 * GiB, Rounded: 2 * GiB, AllocSize: 2 * GiB, Reserved: 3 * GiB, Recorded: true},
			{OpIndex: 41, Size: GiB, Rounded: GiB, AllocSize: GiB, Reserved: 3 * GiB, Recorded: true},
		},
	}
	var table bytes.Buffer
	if err := Table(&table, r, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pools       private pool 1 (id (1,0))",
		"completed; went past the 2 out-of-memory errors the program survived (first at operation 40)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "Out of memory") {
		t.Errorf("table diagnoses an OOM the replay went past:\n%s", table.String())
	}
	var js bytes.Buffer
	if err := JSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OOM *struct {
			OpIndex  int  `json:"op_index"`
			Recorded bool `json:"recorded"`
		} `json:"oom"`
		OOMs []struct {
			OpIndex  int    `json:"op_index"`
			Size     uint64 `json:"size"`
			Recorded bool   `json:"recorded"`
		} `json:"ooms"`
		Pools []string `json:"pools"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OOM == nil || doc.OOM.OpIndex != 40 || !doc.OOM.Recorded {
		t.Errorf("oom %+v, want the first recorded one, at 40", doc.OOM)
	}
	if len(doc.OOMs) != 2 || doc.OOMs[1].OpIndex != 41 || doc.OOMs[1].Size != GiB || !doc.OOMs[1].Recorded {
		t.Errorf("ooms %+v", doc.OOMs)
	}
	if len(doc.Pools) != 1 || doc.Pools[0] != r.Pools[0] {
		t.Errorf("pools %q", doc.Pools)
	}
}

// PyTorch's message counts free blocks of private pools as allocated in
// them (docs/pytorch-allocator.md §6).
func TestTorchOOMMessagePrivatePools(t *testing.T) {
	o := &figures.OOM{AllocSize: 80 * MiB, DeviceTotal: 100 * MiB, DeviceFree: 10 * MiB, Allocated: 40 * MiB,
		Reserved: 90 * MiB, PrivatePools: 30 * MiB}
	want := "Of the allocated memory 70.00 MiB is allocated by PyTorch, with 30.00 MiB allocated in private pools " +
		"(e.g., CUDA Graphs), and 20.00 MiB is reserved by PyTorch but unallocated."
	if got := TorchOOMMessage(0, o); !strings.Contains(got, want) {
		t.Errorf("message %q lacks %q", got, want)
	}
}
