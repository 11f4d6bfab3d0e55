package estimate

import (
	"os"
	"path/filepath"
)

// TestInterpreter is the Python with torch 2.11 that scripts/pyenv.sh
// prepares for the tests: $GPUMEM_TEST_PYTHON, or the venv under the
// cache folder. ok is false when it is not there.
func TestInterpreter() (path string, ok bool) {
	py := os.Getenv("GPUMEM_TEST_PYTHON")
	if py == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		py = filepath.Join(cache, "gpumem", "venv-torch-2.11.0", "bin", "python")
	}
	_, err := os.Stat(py)
	return py, err == nil
}
