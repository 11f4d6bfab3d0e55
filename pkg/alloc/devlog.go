package alloc

/*
#include "gm_devlog.h"
*/
import "C"

import "unsafe"

// DeviceCallKind is what the allocator asked of its device.
type DeviceCallKind uint8

// The device calls a PyTorch trace records, under its names.
const (
	DeviceMalloc DeviceCallKind = C.GM_DEV_MALLOC // segment_alloc
	DeviceFree   DeviceCallKind = C.GM_DEV_FREE   // segment_free
	DeviceMap    DeviceCallKind = C.GM_DEV_MAP    // segment_map
	DeviceUnmap  DeviceCallKind = C.GM_DEV_UNMAP  // segment_unmap
)

func (k DeviceCallKind) String() string {
	switch k {
	case DeviceMalloc:
		return "segment_alloc"
	case DeviceFree:
		return "segment_free"
	case DeviceMap:
		return "segment_map"
	case DeviceUnmap:
		return "segment_unmap"
	}
	return "unknown"
}

// DeviceCall is one successful call to the device.
type DeviceCall struct {
	// Op is the operation it happened in: its index in the stream given
	// to Run (Run's base counts). Single-operation methods continue the
	// count of the last Run.
	Op   int
	Kind DeviceCallKind
	Addr uint64
	Size uint64
}

// LogDevice starts recording the allocator's device calls (see
// DeviceLog). It costs one small record per call, none per operation.
func (a *Allocator) LogDevice() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return statusErr(C.gm_devlog_start(a.c))
}

// DeviceLog returns the device calls made since LogDevice, in order; nil
// when logging was not started.
func (a *Allocator) DeviceLog() []DeviceCall { return a.DeviceLogFrom(0) }

// DeviceLogFrom returns the device calls after the first k of DeviceLog:
// a caller that follows the log as it grows reads each call once.
func (a *Allocator) DeviceLogFrom(k int) []DeviceCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ev *C.gm_devlog_event_t
	n := int(C.gm_devlog_events(a.c, &ev))
	if n <= k {
		return nil
	}
	out := make([]DeviceCall, n-k)
	for i, e := range unsafe.Slice(ev, n)[k:] {
		out[i] = DeviceCall{Op: int(e.op), Kind: DeviceCallKind(e.kind), Addr: uint64(e.addr), Size: uint64(e.size)}
	}
	return out
}
