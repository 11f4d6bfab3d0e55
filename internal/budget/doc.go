// Package budget holds memory budgets and checks replays against them:
// the cases of `gpumem fragcheck`, read from a budget file, the verdict on
// each case, committed baselines to compare with, and the reports CI
// systems read (a text table, JSON, JUnit XML and GitHub Actions
// annotations).
//
// # Budget files
//
// A budget file (gpumem.yaml or .gpumem.yaml, found by [Find] from a
// directory upward) is YAML:
//
//	defaults:              # apply to every case; each case may override
//	  metric: peaks        # which fragmentation ratio the limits use
//	  warn_frag: 20%       # a warning above this fragmentation
//	  max_frag: 30%        # a failure above this fragmentation
//	baseline: fragcheck-baseline.json  # optional; see below
//	tolerance: 5%          # how far a case may regress from its baseline
//	cases:
//	  - name: gpt2
//	    trace: testdata/pytorch/gpt2_varlen.pickle
//	    max_reserved: 20GiB
//	  - name: gpt2-expandable
//	    trace: testdata/pytorch/gpt2_varlen.pickle
//	    alloc_conf: expandable_segments:True
//	    must_fit: 24GiB
//	  - name: toy
//	    workload: transformer
//	    params: {layers: 4}
//	    max_frag: none
//
// A case replays a trace (a PyTorch memory snapshot pickle) or a workload
// (a builtin name or a script file). Relative paths are relative to the
// budget file's directory. The keys of a case are:
//
//   - name: unique; defaults to the trace file's or workload's base name.
//   - trace or workload (exactly one); params (workload parameters);
//     device (which device's trace, default 0).
//   - alloc_conf (PYTORCH_CUDA_ALLOC_CONF syntax; default: the settings
//     the trace was recorded with), policy (any name of alloc.Policies,
//     `gpumem replay --help` lists them; default pytorch),
//     memory_fraction (of the must_fit card).
//   - metric, warn_frag, max_frag: fragmentation limits, ratios written
//     as 0.3 or 30%, or none.
//   - max_reserved: the most peak reserved memory allowed, in bytes or
//     with a unit (20GiB, 21.5GB).
//   - must_fit: replay on a card of this size; an out-of-memory error
//     fails the case.
//
// # Fragmentation metrics
//
// Each limit names the ratio it applies to (computed in package figures):
//
//   - peaks (the default): 1 − peak allocated / peak reserved
//   - at_peak: 1 − allocated / reserved, when reserved memory peaked
//   - end: 1 − allocated / reserved, at the end
//   - holes: 1 − largest free block / cached free bytes, at the end
//
// # Verdicts
//
// A case passes, warns (a warning limit crossed), fails (a limit crossed,
// an out-of-memory error under must_fit, or a regression from its
// baseline) or errs (its input could not be read or replayed). A
// [Checker] with Strict set turns warnings into failures.
//
// # Baselines
//
// A baseline is a JSON file of each case's figures, written by
// [WriteBaseline] without timestamps or machine paths so that it diffs
// cleanly under version control. A case regresses when its peak reserved
// memory grows by more than the tolerance times its baseline value, or
// its fragmentation ratio by more than the tolerance in absolute terms
// (5% = five percentage points).
package budget
