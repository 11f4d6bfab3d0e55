package alloc

/*
#include "gm_devlog.h"
*/
import "C"

import (
	"slices"
	"unsafe"
)

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

// DeviceLog returns the device calls made since LogDevice (or the last
// DrainDeviceLog), in order; nil when logging was not started.
func (a *Allocator) DeviceLog() []DeviceCall { return a.DeviceLogFrom(0) }

// DeviceLogFrom returns the device calls after the first k of DeviceLog:
// a caller that follows the log as it grows reads each call once.
func (a *Allocator) DeviceLogFrom(k int) []DeviceCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deviceLog(nil, k)
}

// DrainDeviceLog appends the calls of DeviceLog to calls, empties the
// log and returns calls: a caller that reads the log after each Run
// keeps it, here and in C, as small as one Run's calls.
func (a *Allocator) DrainDeviceLog(calls []DeviceCall) []DeviceCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	calls = a.deviceLog(calls, 0)
	C.gm_devlog_clear(a.c)
	return calls
}

// deviceLog appends the logged calls after the first k to out; nil when
// out is nil and there are none.
func (a *Allocator) deviceLog(out []DeviceCall, k int) []DeviceCall {
	var ev *C.gm_devlog_event_t
	n := int(C.gm_devlog_events(a.c, &ev))
	if n <= k {
		return out
	}
	out = slices.Grow(out, n-k)
	for _, e := range unsafe.Slice(ev, n)[k:] {
		out = append(out, DeviceCall{Op: int(e.op), Kind: DeviceCallKind(e.kind), Addr: uint64(e.addr), Size: uint64(e.size)})
	}
	return out
}
