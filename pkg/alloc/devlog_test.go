package alloc

import (
	"slices"
	"testing"
)

// The device log names each cudaMalloc, cudaFree, map and unmap with the
// operation it happened in; release steps of a failing allocation land on
// that allocation, and a stream resumed after it keeps its indexes.
func TestDeviceLog(t *testing.T) {
	const mib = 1 << 20
	a := newChecked(t, Options{Allowed: 64 * mib})
	if got := a.DeviceLog(); got != nil {
		t.Fatalf("log before LogDevice: %v", got)
	}
	if err := a.LogDevice(); err != nil {
		t.Fatal(err)
	}
	if err := a.LogDevice(); err != nil { // twice is harmless
		t.Fatal(err)
	}
	ops := []Op{
		{Kind: OpAlloc, ID: 0, Size: 40 * mib}, // op 0: a 40 MiB segment
		{Kind: OpAlloc, ID: 1, Size: 4 * mib},  // op 1: a 20 MiB segment
		{Kind: OpFree, ID: 1},                  // op 2
		{Kind: OpAlloc, ID: 2, Size: 30 * mib}, // op 3: releases the 20 MiB one, then fails
	}
	res, err := a.Run(ops, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OOM == nil || res.Done != 3 {
		t.Fatalf("want an out-of-memory at op 3, got done %d oom %+v", res.Done, res.OOM)
	}
	// the stream goes on after the failing op: ops 4 and 5
	if _, err := a.Run([]Op{{Kind: OpFree, ID: 0}, {Kind: OpEmptyCache}}, 4, nil); err != nil {
		t.Fatal(err)
	}
	log := a.DeviceLog()
	kinds := make([]DeviceCallKind, len(log))
	at := make([]int, len(log))
	for i, c := range log {
		kinds[i], at[i] = c.Kind, c.Op
	}
	if want := []DeviceCallKind{DeviceMalloc, DeviceMalloc, DeviceFree, DeviceFree}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	if want := []int{0, 1, 3, 5}; !slices.Equal(at, want) {
		t.Errorf("ops %v, want %v", at, want)
	}
	if log[0].Size != 40*mib || log[1].Size != 20*mib || log[2].Addr != log[1].Addr || log[3].Addr != log[0].Addr {
		t.Errorf("log %+v", log)
	}
}

// Expandable segments log their maps and unmaps, not the reservation.
func TestDeviceLogExpandable(t *testing.T) {
	const mib = 1 << 20
	a := newChecked(t, Options{Config: mustParse(t, "expandable_segments:True")})
	if err := a.LogDevice(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, a, Op{Kind: OpAlloc, ID: 0, Size: 30 * mib}, Op{Kind: OpFree, ID: 0}, Op{Kind: OpEmptyCache})
	log := a.DeviceLog()
	if len(log) != 2 || log[0].Kind != DeviceMap || log[1].Kind != DeviceUnmap || log[0].Op != 0 || log[1].Op != 2 ||
		log[0].Size != 40*mib || log[1].Size != 40*mib {
		t.Errorf("log %+v", log)
	}
}

// Draining the log hands over each call once, in order, and the log goes
// on from there.
func TestDrainDeviceLog(t *testing.T) {
	const mib = 1 << 20
	a := newChecked(t, Options{})
	if got := a.DrainDeviceLog(nil); got != nil {
		t.Fatalf("drained before LogDevice: %v", got)
	}
	if err := a.LogDevice(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, a, Op{Kind: OpAlloc, ID: 0, Size: 40 * mib}, Op{Kind: OpAlloc, ID: 1, Size: 30 * mib})
	first := a.DrainDeviceLog(nil)
	if len(first) != 2 || first[0].Size != 40*mib || first[1].Size != 30*mib {
		t.Fatalf("first drain %+v", first)
	}
	if got := a.DeviceLog(); got != nil {
		t.Fatalf("log after a drain: %+v", got)
	}
	mustRun(t, a, Op{Kind: OpFree, ID: 1}, Op{Kind: OpEmptyCache})
	calls := a.DrainDeviceLog(slices.Clip(first[:1]))
	if len(calls) != 2 || calls[0] != first[0] || calls[1].Kind != DeviceFree || calls[1].Addr != first[1].Addr {
		t.Fatalf("second drain %+v", calls)
	}
}
