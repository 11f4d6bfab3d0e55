package record

import (
	_ "embed"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Under a launcher (torchrun, accelerate, deepspeed) the ranks are Python
// processes gpumem does not start itself. Each records itself instead:
// record_site.py, put on PYTHONPATH as sitecustomize.py, runs in every
// Python process; those with a RANK call gpumem_hooks._launcher_start,
// which writes NAME.rank{R}.pickle at exit, at the first OOM, on SIGUSR1
// and every Options.Every.

// HooksPy is the trainer hooks module (gpumem hooks writes it out);
// python/gpumem_hooks.py is a link to it.
//
//go:embed gpumem_hooks.py
var HooksPy []byte

//go:embed record_site.py
var recordSitePy []byte

// launcherModules are the python -m names of launchers.
var launcherModules = []string{"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch", "deepspeed.launcher.runner"}

// IsLauncher reports whether argv starts a distributed launcher rather
// than one Python script.
func IsLauncher(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	switch filepath.Base(argv[0]) {
	case "torchrun", "accelerate", "deepspeed":
		return true
	}
	if !pythonName().MatchString(filepath.Base(argv[0])) {
		return false
	}
	for i := 1; i < len(argv); i++ {
		switch a := argv[i]; {
		case a == "-m" && i+1 < len(argv):
			return slices.Contains(launcherModules, argv[i+1])
		case strings.HasPrefix(a, "-m"):
			return slices.Contains(launcherModules, a[2:])
		case !strings.HasPrefix(a, "-"):
			return false
		}
	}
	return false
}

// launcherEnv writes the hooks and the sitecustomize into dir and returns
// the environment that makes every rank record itself.
func launcherEnv(dir string, o Options, env []string) ([]string, error) {
	if err := os.WriteFile(filepath.Join(dir, "gpumem_hooks.py"), HooksPy, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sitecustomize.py"), recordSitePy, 0o600); err != nil {
		return nil, err
	}
	snapshot, err := filepath.Abs(o.Snapshot)
	if err != nil {
		return nil, err
	}
	path := dir
	var out []string
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "PYTHONPATH="):
			if old := strings.TrimPrefix(kv, "PYTHONPATH="); old != "" {
				path += string(os.PathListSeparator) + old
			}
		case strings.HasPrefix(kv, "GPUMEM_RECORD"):
			// ours below; a stale GPUMEM_RECORDING_PID would stop every rank
		default:
			out = append(out, kv)
		}
	}
	return append(out, "PYTHONPATH="+path,
		"GPUMEM_RECORD_SNAPSHOT="+snapshot,
		"GPUMEM_RECORD_MAX_ENTRIES="+strconv.Itoa(o.MaxEntries),
		"GPUMEM_RECORD_STACKS="+o.Stacks,
		"GPUMEM_RECORD_EVERY="+strconv.FormatFloat(o.Every.Seconds(), 'g', -1, 64),
	), nil
}

// rankSnapshots lists the NAME.rank{R}.pickle files written since start,
// in rank order, and the glob that replays them.
func rankSnapshots(snapshot string, start time.Time) ([]string, string) {
	base := strings.TrimSuffix(snapshot, ".pickle")
	glob := base + ".rank*.pickle"
	m, _ := filepath.Glob(glob)
	rank := func(p string) (int, error) {
		return strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, base+".rank"), ".pickle"))
	}
	var out []string
	for _, p := range m {
		if _, err := rank(p); err != nil {
			continue // NAME.rank0.step10.pickle from a callback
		}
		if writtenSince(p, start) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		ra, _ := rank(a)
		rb, _ := rank(b)
		return ra - rb
	})
	return out, glob
}
