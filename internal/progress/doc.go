// Package progress draws the progress bars gpumem shows on a terminal
// while it works: one bar per phase of the work, labelled with what the
// phase does ("reading big.pickle", "planning big.pickle", "replaying 32
// settings and cards", "building the HTML report"), cleared when the phase
// ends.
//
// A Phase is made for a writer the caller chose: nil (not a terminal,
// NO_COLOR, a test) makes a Phase that draws nothing, so that the code
// doing the work never asks. Three kinds:
//
//   - Bytes: a file read, its bar the share of the file read so far, the
//     time since the phase began and, once half a second has passed, the
//     read's average speed since it began (the rolling rate of its first
//     buffers, which come from the page cache, read 255 GB/s);
//   - Count: a number of like jobs, done in any order (Tick);
//   - Spinner: work of unknown length.
//
// A phase in a context (WithPhase) lets a library that runs jobs count
// them (Tick) without taking a writer of its own.
package progress
