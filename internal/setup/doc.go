// Package setup is how one replay runs: the allocator settings, the
// policy, the card, its memory fraction and the backend, typed, checked by
// one set of rules, and resolved once against what a trace recorded.
//
// Terms:
//   - a Setup is parsed at the edge (command-line flags, a budget file's
//     case, a sweep's grid row), checked by [Setup.Check], and carried as
//     it is to the replay; nothing after the edge parses a setting again.
//   - the recorded settings are the allocator settings a snapshot says it
//     ran under ([Recorded]); a Setup without its own Config takes them.
//   - the recorded cap is the per-process cap a recording shows
//     (replay.Cap). Every replay of a trace runs under it when the Setup
//     names no card and no fraction, whatever the command: replay, sweep,
//     fragcheck, diff and run make the same inferences from one trace.
//   - a card is a simulated device of Card bytes; 0 is an unlimited one,
//     or the card the recording's own out-of-memory errors show.
package setup
