// Package estimate runs a PyTorch program with CUDA emulated on a virtual
// card: gpumem estimate.
//
// # Terms
//
//   - Emulator: the Python module gpumem_estimate.py, built in here and
//     imported (through a sitecustomize on PYTHONPATH) by the Python
//     process gpumem starts. It makes CUDA tensors fake — torch's
//     FakeTensorMode: shapes, dtypes and storages, no data, no compute —
//     while CPU tensors stay real, and patches torch.cuda so that the
//     program sees a GPU.
//   - Virtual card: a [Session], the allocator replica (package alloc,
//     pytorch policy, a simulated device of the card's size) that serves
//     every allocation and free of a fake CUDA storage, in the order the
//     program makes them: a storage is allocated when an op creates it and
//     freed when its last reference dies (a weak reference's callback), as
//     PyTorch's caching allocator sees them.
//   - Protocol: one request a line from the emulator on one pipe, one
//     reply a line on the other, for the requests that need one
//     ([Session.Serve] lists them): allocate, free, empty_cache,
//     memory_stats, mem_get_info, the memory fraction, the segments (for
//     torch.cuda.memory._snapshot) and the peaks.
//   - Trace: every request the card served, written as a gpumem text
//     trace with the device calls it made and the final segments, so that
//     replay and sweep work on the run. [Build] replays it for the report
//     and checks that the replay reproduces the run.
//   - Composition: what the live CUDA tensors held when allocated memory
//     peaked, by category (internal/categories' names). The emulator
//     labels each allocation when it is made (activation inside a
//     module's forward, temporary in a backward pass or inside
//     optimizer.step, workspace for a library's scratch, unknown
//     elsewhere) and relabels what module and optimizer hooks later find
//     to be a parameter, buffer, gradient, optimizer state or a root
//     module's input.
//   - Stand-in: the value .item() (and so printing) of a fake tensor
//     returns (0.0, 1 or False), counted by script line.
//   - Trial: one run of --vary or --find-max, with {NAME} in the command
//     replaced by a value.
package estimate
