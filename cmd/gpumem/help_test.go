package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// Every command has its long help, from help/, and every file in help/ is
// some command's.
func TestHelpTexts(t *testing.T) {
	root := newRootCmd(&app{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv})
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || c.Name() == "version" {
			continue
		}
		if strings.TrimSpace(c.Long) == "" {
			t.Errorf("%s has no long help", c.Name())
		}
	}
	var sources strings.Builder
	files, _ := os.ReadDir(".")
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".go") && !strings.HasSuffix(f.Name(), "_test.go") {
			b, _ := os.ReadFile(f.Name())
			sources.Write(b)
		}
	}
	texts, err := helpFiles.ReadDir("help")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range texts {
		name := strings.TrimSuffix(f.Name(), ".txt")
		if !strings.Contains(sources.String(), `helpText("`+name+`"`) {
			t.Errorf("help/%s is no command's help", f.Name())
		}
		if helpText(name) == "" {
			t.Errorf("help/%s is empty", f.Name())
		}
	}
}

// Each command's entry in subcommands has its name, and a command made
// alone (its name first in the arguments) helps, and fails on a bad flag,
// as it does among all the others (a flag first makes them all).
func TestSubcommandsAlone(t *testing.T) {
	a := &app{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv}
	for _, c := range subcommands {
		if got := c.make(a).Name(); got != c.name {
			t.Errorf("subcommands has %q for the command %q", c.name, got)
		}
		if n := len(newRootCmd(a, c.name).Commands()); n != 2 { // and completion
			t.Errorf("%s alone: %d commands", c.name, n)
		}
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "--no-such-flag"}} {
			code, stdout, stderr := gpumem(t, args...)
			code2, stdout2, stderr2 := gpumem(t, append([]string{"--no-color"}, args...)...)
			if code != code2 || stdout != stdout2 || stderr != stderr2 {
				t.Errorf("gpumem %s: alone %d %q %q, among all %d %q %q", strings.Join(args, " "), code, stdout, stderr, code2, stdout2, stderr2)
			}
		}
	}
}
