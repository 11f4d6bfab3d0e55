package alloc

/*
#include <stdlib.h>
#include "gm_alloc.h"
*/
import "C"

import "unsafe"

// openSimProbe opens the simulated device below the allocator, for
// sim_model_test.go (a Go test file cannot use cgo). ignore: use only the
// first malloc's hint.
func openSimProbe(ignore bool) *cudaProbe {
	b := (*C.gm_backend_t)(C.calloc(1, C.sizeof_gm_backend_t))
	ig := C.int(0)
	if ignore {
		ig = 1
	}
	if C.gm_sim_backend_opts(0, ig, b) != C.GM_OK {
		C.free(unsafe.Pointer(b))
		return nil
	}
	return &cudaProbe{b}
}
