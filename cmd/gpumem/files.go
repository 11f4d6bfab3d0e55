package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The files commands write besides stdout: --html reports, converted
// traces, baselines.

// writeHTML creates path, writes a report into it with write, and says so
// on stderr.
func writeHTML(a *app, path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s\n", path)
	return nil
}

// writeFileAtomic writes path through a temporary file in the same folder,
// so a failed write never leaves a partial file behind.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	w := bufio.NewWriterSize(f, 1<<20)
	err = f.Chmod(0o644) // CreateTemp makes it private
	if err == nil {
		err = write(w)
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
