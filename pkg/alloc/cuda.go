package alloc

/*
#include "gm_alloc.h"
*/
import "C"

import (
	"errors"
	"fmt"
)

// ErrNoCUDA means no usable CUDA driver or device was found.
var ErrNoCUDA = errors.New("no usable cuda device")

type cudaDevice struct{ index int }

// CUDA returns device index of the machine's GPUs, driven through the CUDA
// driver API (libcuda.so.1, loaded at run time). Opening it fails with an
// error wrapping ErrNoCUDA when there is no driver or no such device.
func CUDA(index int) Device { return cudaDevice{index} }

func (d cudaDevice) open(b *C.gm_backend_t) error {
	var msg [256]C.char
	if rc := C.gm_cuda_backend(C.int(d.index), b, &msg[0], C.size_t(len(msg))); rc != C.GM_OK {
		return fmt.Errorf("%w: %s", ErrNoCUDA, C.GoString(&msg[0]))
	}
	return nil
}
