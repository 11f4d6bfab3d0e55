package main

import (
	"embed"
	"strings"
)

// The commands' long help and examples are text files in help/: they
// read, and change, as the documentation they are, and the Go files keep
// the flags. TestHelpTexts checks that every command's help is there.
//
//go:embed help
var helpFiles embed.FS

// helpText is help/NAME.txt, with each pair of vars (a placeholder such
// as "$DEMO", then its value) put in.
func helpText(name string, vars ...string) string {
	b, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		return "" // TestHelpTexts fails on a missing file
	}
	text := strings.TrimRight(string(b), "\n")
	if len(vars) == 0 { // most texts: no replacer to build at every start
		return text
	}
	return strings.NewReplacer(vars...).Replace(text)
}
