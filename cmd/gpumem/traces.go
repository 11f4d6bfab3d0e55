package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/gpumem/gpumem/pkg/trace"
)

// progressFrom is the trace size from which reading it shows a progress
// bar: smaller ones read in well under a second.
const progressFrom = 64 << 20

// openTrace reads a trace in any format. On a terminal, a big one shows a
// progress bar on stderr, cleared when done; elsewhere nothing is drawn.
func openTrace(a *app, path string) (*trace.Snapshot, error) {
	fi, err := os.Stat(path)
	if err != nil || !a.errColor || !fi.Mode().IsRegular() || fi.Size() < progressFrom {
		return trace.Open(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bar := progressbar.NewOptions64(fi.Size(),
		progressbar.OptionSetWriter(a.stderr),
		progressbar.OptionSetDescription("reading "+path),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	r := progressbar.NewReader(f, bar)
	defer bar.Finish()
	return trace.OpenReader(&r, path, fi.Size())
}
