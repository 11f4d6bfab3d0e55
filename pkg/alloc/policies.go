package alloc

/*
#include "gm_alloc.h"
*/
import "C"

import (
	"fmt"
	"strings"
)

// PolicyInfo describes a policy. The table of policies is the C one
// (gm_policies.h): each policy's file names and describes it, so a new
// policy needs no Go change.
type PolicyInfo struct {
	Name Policy
	// Summary is one line for help text.
	Summary string
	// Settable: PYTORCH_CUDA_ALLOC_CONF selects it (PyTorch's own allocator).
	Settable bool
	// KeepsCache: empty_cache returns no memory to the device.
	KeepsCache bool
	// PyTorchKnobs: it reads max_split_size and expandable_segments.
	PyTorchKnobs bool
	note         string // why a sweep does not advise it; "" = the generic reason
	id           C.int  // GM_POLICY_*
}

// policyTable is every policy, in the order reports show them.
var policyTable = loadPolicies()

func loadPolicies() []PolicyInfo {
	var t []PolicyInfo
	for i := C.int(0); i < C.GM_POLICY_COUNT; i++ {
		var ci C.gm_policy_info_t
		if C.gm_policy_info(i, &ci) != C.GM_OK {
			panic(fmt.Sprintf("alloc: policy %d has no usable table row", i)) // a build defect, caught by every test
		}
		info := PolicyInfo{
			Name:         Policy(C.GoString(ci.name)),
			Summary:      C.GoString(ci.summary),
			Settable:     ci.traits&C.GM_TRAIT_SETTABLE != 0,
			KeepsCache:   ci.traits&C.GM_TRAIT_KEEPS_CACHE != 0,
			PyTorchKnobs: ci.traits&C.GM_TRAIT_PYTORCH_KNOBS != 0,
			id:           i,
		}
		if ci.note != nil {
			info.note = C.GoString(ci.note)
		}
		t = append(t, info)
	}
	return t
}

// Policies lists every policy, in the order reports show them.
func Policies() []Policy {
	ps := make([]Policy, len(policyTable))
	for i, p := range policyTable {
		ps[i] = p.Name
	}
	return ps
}

// PolicyInfos describes every policy, in the order of [Policies].
func PolicyInfos() []PolicyInfo { return append([]PolicyInfo(nil), policyTable...) }

// Info describes p; ok is false for an unknown policy.
func (p Policy) Info() (info PolicyInfo, ok bool) {
	for _, i := range policyTable {
		if i.Name == p {
			return i, true
		}
	}
	return PolicyInfo{}, false
}

// NotAdvisedBecause says why a sweep does not advise the policy, given the
// run's number of device allocations as the report writes counts; "" when
// the policy has no reason of its own.
func (i PolicyInfo) NotAdvisedBecause(deviceAllocs string) string {
	return strings.ReplaceAll(i.note, "{device_allocs}", deviceAllocs)
}

// ParsePolicy checks a policy name.
func ParsePolicy(s string) (Policy, error) {
	if i, ok := Policy(s).Info(); ok {
		return i.Name, nil
	}
	return "", fmt.Errorf("unknown policy %q (known: %s)", s, PolicyNames())
}

// PolicyNames is every policy's name, comma separated, for help text.
func PolicyNames() string {
	names := make([]string, len(policyTable))
	for i, p := range policyTable {
		names[i] = string(p.Name)
	}
	return strings.Join(names, ", ")
}
