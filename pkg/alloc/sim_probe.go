package alloc

/*
#include <stdlib.h>
#include "gm_alloc.h"
*/
import "C"

import "unsafe"

// openSimProbe opens the simulated device below the allocator, for
// sim_model_test.go (a Go test file cannot use cgo). ignore: use only the
// first malloc's hint; kernels: model a process that runs kernels (most
// driver experiments ran none).
func openSimProbe(ignore, kernels bool) *cudaProbe {
	b := (*C.gm_backend_t)(C.calloc(1, C.sizeof_gm_backend_t))
	flags := C.int(0)
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
