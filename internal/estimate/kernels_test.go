package estimate

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The kernel scratch rules (gpumem_estimate_kernels.py: Reduce.cuh's
// global reduction, memory-efficient attention's backward) against every
// call scripts/estimate/kernel_scratch_probe.py recorded on the H200
// (testdata/kernel_scratch_h200.json: 244 calls of sum, mean, amax, var,
// linalg_vector_norm and the attention backward, fp32 and bf16, from the
// programs and sweeps): each call's blocks, in order, to the byte.
func TestKernelScratchRulesMatchH200(t *testing.T) {
	t.Parallel()
	py := python(t)
	var out bytes.Buffer
	c := exec.Command(py, filepath.Join("testdata", "kernel_rules.py"), ".",
		filepath.Join("testdata", "kernel_scratch_h200.json"))
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "kernel rules: 244 ok, 0 wrong") {
		t.Errorf("%s", out.String())
	}
}

// A linear layer's bias gradient on the H200 (132 SMs, 2048 threads an
// SM): sum over the 4096 rows of a 4096 x 512 fp32 gradient takes
// Reduce.cuh's global path, 64 blocks an output column group, and
// allocates a 16 MiB staging buffer and 16 bytes of semaphores after its
// 2 KiB output (kernel_scratch_h200.json's call
// aten.sum.dim_IntList(T[4096, 512]..., [0], True)). The peak is the
// input's 8 MiB, the output's 2048 bytes and the scratch's 16 MiB + 512.
func TestLinearBackwardStaging(t *testing.T) {
	t.Parallel()
	res, out, _ := estimateScript(t, "reduce_scratch.py", "")
	if res.Err != nil {
		t.Fatalf("%v\n%s", res.Err, out)
	}
	want := fmt.Sprintf("peak %d allocations 3", 8388608+2048+16777216+512)
	if !strings.Contains(out, want) {
		t.Errorf("want %q, the script said:\n%s", want, out)
	}
}

// A GPT training step under expandable segments (scripts/estimate/
// programs.py gpt_expandable) against its H200 run: both peaks to the
// byte, and the alloc/free sequence is the H200 snapshot's. Without the
// reductions' staging buffers reserved was 1.2 % low; without the
// autograd engine's in-place gradient accumulation (which PyTorch skips
// for fake tensors) each layer's backward took two 8 MiB blocks more.
func TestGPTExpandableMatchesH200(t *testing.T) {
	t.Parallel()
	res := recordOnH200(t, "gpt_expandable", "expandable_segments:True")
	// max_memory_allocated and max_memory_reserved of the H200's run
	const alloc, reserved = 1711969280, 1755316224
	if a, r := res.Stats.AllocatedBytes[0].Peak, res.Stats.ReservedBytes[0].Peak; a != alloc || r != reserved {
		t.Errorf("peak allocated %d, reserved %d; the H200: %d and %d", a, r, alloc, reserved)
	}
}
