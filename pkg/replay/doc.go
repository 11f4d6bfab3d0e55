// Package replay turns a recorded allocation trace into allocator
// operations ([Build]) and runs them through a fresh allocator ([Run]).
//
// A PyTorch trace names blocks by address; the allocator under other
// settings puts them elsewhere, so Build renames every allocation with a
// small integer id that stays valid whatever the addresses become. It also
// recovers what a trace does not mark: empty_cache calls, frees that wait
// on other streams, and out-of-memory requests (see [Build]).
package replay
