package budget

// FileDoc is the shape of a budget file (gpumem.yaml) for its JSON Schema
// (docs/schema/gpumem.schema.json), which editors use to complete and
// check the file. Parse reads the file itself; a test keeps the two in
// step (the same keys at every level).
type FileDoc struct {
	Version   int         `json:"version,omitempty" jsonschema:"enum=1,description=The budget file format: 1"`
	Defaults  *SettingDoc `json:"defaults,omitempty" jsonschema:"description=Settings every case inherits"`
	Baseline  string      `json:"baseline,omitempty" jsonschema:"description=Baseline file of recorded figures (relative to this file)"`
	Tolerance any         `json:"tolerance,omitempty" jsonschema:"oneof_type=string;number,description=Regression tolerance against the baseline: 0.05 or 5%"`
	Cases     []CaseDoc   `json:"cases" jsonschema:"minItems=1,description=The cases to check"`
}

// SettingDoc is what defaults and every case may set.
type SettingDoc struct {
	Metric         string `json:"metric,omitempty" jsonschema:"enum=peaks,enum=at_peak,enum=end,enum=holes,description=Fragmentation ratio the limits use"`
	WarnFrag       any    `json:"warn_frag,omitempty" jsonschema:"oneof_type=string;number,description=Warn above this fragmentation: 0.2 or 20% or none"`
	MaxFrag        any    `json:"max_frag,omitempty" jsonschema:"oneof_type=string;number,description=Fail above this fragmentation: 0.3 or 30% or none"`
	MaxReserved    any    `json:"max_reserved,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this peak reserved memory: bytes or 16GiB"`
	MustFit        any    `json:"must_fit,omitempty" jsonschema:"oneof_type=string;integer,description=Fail unless the case fits a card of this size: bytes or 80GiB"`
	AllocConf      string `json:"alloc_conf,omitempty" jsonschema:"description=Allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax"`
	Policy         string `json:"policy,omitempty" jsonschema:"description=Allocation policy: pytorch or another gpumem knows"`
	MemoryFraction any    `json:"memory_fraction,omitempty" jsonschema:"oneof_type=string;number,description=set_per_process_memory_fraction of must_fit"`

	// per-category limits at the peak of allocated memory (docs/categories.md)
	Parameters     any `json:"parameters,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of parameters at the peak of allocated memory: bytes or 6GiB"`
	Buffers        any `json:"buffers,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of module buffers at the peak"`
	Gradients      any `json:"gradients,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of gradients at the peak"`
	OptimizerState any `json:"optimizer_state,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of optimizer state at the peak"`
	Activations    any `json:"activations,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of activations at the peak"`
	Temporaries    any `json:"temporaries,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of temporaries at the peak"`
	Inputs         any `json:"inputs,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of inputs at the peak"`
	Workspace      any `json:"workspace,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of library workspace at the peak"`
	Unknown        any `json:"unknown,omitempty" jsonschema:"oneof_type=string;integer,description=Fail above this many bytes of uncategorised memory at the peak"`
}

// CaseDoc is one case: a trace, several traces (ranks) or a workload,
// and its settings.
type CaseDoc struct {
	Name     string            `json:"name,omitempty" jsonschema:"description=The case's name in reports"`
	Trace    string            `json:"trace,omitempty" jsonschema:"description=A trace file"`
	Traces   []string          `json:"traces,omitempty" jsonschema:"description=Trace files or globs: the ranks of one job"`
	Workload string            `json:"workload,omitempty" jsonschema:"description=A built-in workload or a workload script"`
	Params   map[string]string `json:"params,omitempty" jsonschema:"description=Workload parameters"`
	Device   int               `json:"device,omitempty" jsonschema:"description=Which device's trace"`
	SettingDoc
}

// fileKeys, caseKeys and settingKeysList are the keys Parse knows, for
// the test that keeps FileDoc in step.
var (
	fileKeys        = []string{"version", "defaults", "baseline", "tolerance", "cases"}
	caseKeys        = caseNames
	settingKeysList = settingNames
)
