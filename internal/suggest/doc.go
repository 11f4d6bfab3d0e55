// Package suggest finds what a user probably meant when a command line
// names something that does not exist: a flag (--polcy for --policy) or a
// command, whose suggestions cobra prints after its first error line.
//
// A name is suggested when it is within two edits (insertions, deletions,
// substitutions; Levenshtein distance, case-insensitive) of what was
// typed, or when what was typed is a prefix of it, as cobra suggests
// commands.
package suggest
