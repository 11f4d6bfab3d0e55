package alloc

/*
#include <stdlib.h>
#include "gm_alloc.h"
#include "gm_internal.h"
*/
import "C"

import "unsafe"

// openSimProbe opens the simulated device below the allocator, for
// sim_model_test.go (a Go test file cannot use cgo). ignore: use only the
// first malloc's hint; kernels: model a process that runs kernels (most
// driver experiments ran none).
func openSimProbe(ignore, kernels bool) *cudaProbe { return openSimProbeFlags(ignore, kernels, false) }

// openSimProbeFlags is openSimProbe; signal: as for an emulated run, the
// start-up range opens at kernelsStarted.
func openSimProbeFlags(ignore, kernels, signal bool) *cudaProbe {
	b := (*C.gm_backend_t)(C.calloc(1, C.sizeof_gm_backend_t))
	flags := C.int(0)
	if signal {
		flags |= C.GM_SIM_KERNEL_SIGNAL
	}
	if !kernels {
		flags |= C.GM_SIM_NO_KERNELS
	}
	if ignore {
		flags |= C.GM_SIM_IGNORE_HINTS
	}
	if C.gm_sim_backend_opts(0, flags, b) != C.GM_OK {
		C.free(unsafe.Pointer(b))
		return nil
	}
	return &cudaProbe{b}
}

// kernelsStarted tells a simulator opened with signal that the
// program's first kernel ran.
func (p *cudaProbe) kernelsStarted() int { return int(C.gm_sim_backend_kernels_started(p.b)) }

// tenant tells the simulator that the driver mapped size bytes of its own.
func (p *cudaProbe) tenant(size uint64) int {
	return int(C.gm_sim_backend_tenant(p.b, C.uint64_t(size)))
}

// simCheck runs the simulated device's checker (I7) and returns its
// message, "" when the device's bookkeeping holds.
func (p *cudaProbe) simCheck() string {
	var msg [256]C.char
	if C.gm_sim_check(p.b, &msg[0], C.size_t(len(msg))) != C.GM_OK {
		return C.GoString(&msg[0])
	}
	return ""
}
