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
