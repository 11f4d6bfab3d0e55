package alloc

/*
#include "gm_alloc.h"
*/
import "C"

import "sort"

// Stat is one torch.cuda.memory_stats() counter family.
type Stat struct {
	Current, Peak, Allocated, Freed int64
}

// Pool indexes the per-pool arrays of Stats.
const (
	All   = 0
	Large = 1
	Small = 2
)

// Stats mirrors torch.cuda.memory_stats(); arrays are indexed All, Large, Small.
type Stats struct {
	Allocation, Segment, Active, InactiveSplit  [3]Stat
	AllocatedBytes, ReservedBytes, ActiveBytes  [3]Stat
	InactiveSplitBytes, RequestedBytes          [3]Stat
	OversizeAllocations, OversizeSegments       Stat
	NumAllocRetries, NumOOMs, NumSyncAllStreams int64
	NumDeviceAlloc, NumDeviceFree               int64
	MaxSplitSize                                int64 // -1 = unlimited
}

func goStat(s C.gm_stat_t) Stat {
	return Stat{int64(s.current), int64(s.peak), int64(s.allocated), int64(s.freed)}
}

func goStats3(s [3]C.gm_stat_t) [3]Stat {
	return [3]Stat{goStat(s[0]), goStat(s[1]), goStat(s[2])}
}

// Stats returns the allocator's statistics.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	var s C.gm_stats_t
	C.gm_get_stats(a.c, &s)
	return Stats{
		Allocation: goStats3(s.allocation), Segment: goStats3(s.segment),
		Active: goStats3(s.active), InactiveSplit: goStats3(s.inactive_split),
		AllocatedBytes: goStats3(s.allocated_bytes), ReservedBytes: goStats3(s.reserved_bytes),
		ActiveBytes: goStats3(s.active_bytes), InactiveSplitBytes: goStats3(s.inactive_split_bytes),
		RequestedBytes:      goStats3(s.requested_bytes),
		OversizeAllocations: goStat(s.oversize_allocations), OversizeSegments: goStat(s.oversize_segments),
		NumAllocRetries: int64(s.num_alloc_retries), NumOOMs: int64(s.num_ooms),
		NumSyncAllStreams: int64(s.num_sync_all_streams), NumDeviceAlloc: int64(s.num_device_alloc),
		NumDeviceFree: int64(s.num_device_free), MaxSplitSize: int64(s.max_split_size),
	}
}

// Map returns the statistics under torch.cuda.memory_stats()'s 122 keys.
func (s Stats) Map() map[string]int64 {
	m := make(map[string]int64, 122)
	put := func(name string, st Stat) {
		m[name+".current"] = st.Current
		m[name+".peak"] = st.Peak
		m[name+".allocated"] = st.Allocated
		m[name+".freed"] = st.Freed
	}
	pools := [3]string{"all", "large_pool", "small_pool"}
	arrays := []struct {
		name string
		st   [3]Stat
	}{
		{"allocation", s.Allocation}, {"segment", s.Segment}, {"active", s.Active},
		{"inactive_split", s.InactiveSplit}, {"allocated_bytes", s.AllocatedBytes},
		{"reserved_bytes", s.ReservedBytes}, {"active_bytes", s.ActiveBytes},
		{"inactive_split_bytes", s.InactiveSplitBytes}, {"requested_bytes", s.RequestedBytes},
	}
	for _, a := range arrays {
		for i, p := range pools {
			put(a.name+"."+p, a.st[i])
		}
	}
	put("oversize_allocations", s.OversizeAllocations)
	put("oversize_segments", s.OversizeSegments)
	m["num_alloc_retries"] = s.NumAllocRetries
	m["num_ooms"] = s.NumOOMs
	m["num_sync_all_streams"] = s.NumSyncAllStreams
	m["num_device_alloc"] = s.NumDeviceAlloc
	m["num_device_free"] = s.NumDeviceFree
	m["max_split_size"] = s.MaxSplitSize
	return m
}

// Keys returns the memory_stats keys in PyTorch's (sorted) order.
func (s Stats) Keys() []string {
	m := s.Map()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
