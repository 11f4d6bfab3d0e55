// Package categories says what the memory of a trace is made of: it
// puts every allocation of one device's trace into a category, from what
// a snapshot carries, with or without stacks (docs/categories.md gives
// each rule with its evidence and its known failure cases).
//
// Terms:
//
//   - category: parameter (a model weight), buffer (model state that gets
//     no gradient, such as BatchNorm's running statistics), gradient,
//     optimizer_state (what an optimizer keeps between steps, such as
//     Adam's moments), activation (a forward result kept for backward, or
//     kept past its step), temporary (born and freed within one phase),
//     input (a batch copied to the device), workspace (library scratch
//     kept by the process, such as cuBLAS's) and unknown.
//   - position: the index of an event among the device's alloc and
//     free_requested events, the events that change allocated memory;
//     a block is live from the position of its alloc to that of its
//     free_requested.
//   - step: an optimizer step, an Optimizer.step record_function range
//     of the snapshot's external_annotations; zero_grad likewise.
//   - iteration k: from the end of step k-1 to the end of step k; the
//     first one starts with the trace.
//   - phase: where in its iteration a block was born: setup (before the
//     first forward), forward, backward, optimizer (in a step), zero_grad,
//     or after (past the last step).
//
// [Classify] reads a whole snapshot; a [Builder] takes a device's events
// one by one, for a caller that does not keep them.
package categories
