package exporter

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeTorch is the part of torch the spool writers use: GPU 1 of a
// machine, seen by the process as its current device.
const fakeTorch = `
class _Props:
    uuid = "55555555-6666-7777-8888-999999999999"
class cuda:
    @staticmethod
    def current_device(): return 0
    @staticmethod
    def get_device_properties(d): return _Props()
    @staticmethod
    def memory_stats(d=None):
        return {"reserved_bytes.all.current": 8 << 20, "reserved_bytes.all.peak": 8 << 20,
                "allocated_bytes.all.current": 2 << 20, "active_bytes.all.current": 3 << 20,
                "inactive_split_bytes.all.current": 1 << 20, "num_ooms": 1, "num_alloc_retries": 4}
    @staticmethod
    def memory_snapshot():
        return [{"device": 0, "blocks": [{"state": "inactive", "size": 4 << 20},
                                          {"state": "active_allocated", "size": 2 << 20},
                                          {"state": "inactive", "size": 1 << 20}]},
                {"device": 1, "blocks": [{"state": "inactive", "size": 64 << 20}]}]
`

// TestPythonWriters runs python/gpumem_spool.py and the README snippet
// against a fake torch and reads what they wrote as the exporter does.
func TestPythonWriters(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	fake := t.TempDir()
	os.MkdirAll(filepath.Join(fake, "torch"), 0o755)
	if err := os.WriteFile(filepath.Join(fake, "torch", "__init__.py"), []byte(fakeTorch), 0o644); err != nil {
		t.Fatal(err)
	}
	scripts, _ := filepath.Abs("../../python")
	for _, c := range []struct {
		name, code string
		largest    bool
	}{
		// The module: its first write happens in start(); the process then
		// stays alive so the exporter keeps the file.
		{"module", "import gpumem_spool, sys; gpumem_spool.start(interval=60); print('ready', flush=True); sys.stdin.read()", true},
		{"snippet", "exec(open('" + scripts + "/examples/spool_snippet.py').read())\nimport sys, time\ntime.sleep(0.5); print('ready', flush=True); sys.stdin.read()", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			spool := filepath.Join(t.TempDir(), "spool")
			cmd := exec.Command("python3", "-c", c.code)
			// the Kubernetes variables count inside a pod only: the snippet
			// runs outside, with a CONTAINER_NAME that is not Kubernetes'
			k8s := "KUBERNETES_SERVICE_HOST="
			if c.largest {
				k8s += "10.0.0.1"
			}
			cmd.Env = append(os.Environ(), "PYTHONPATH="+fake+":"+scripts, "GPUMEM_SPOOL="+spool, "RANK=5", k8s,
				"POD_NAMESPACE=ml", "POD_NAME=trainer-0", "CONTAINER_NAME=train")
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("writer did not start: %q %v", line, err)
			}
			pid := cmd.Process.Pid

			st, err := os.Stat(spool)
			if err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("spool folder: %v %v, want mode 0700", st.Mode(), err)
			}
			// <pid>-<16 random hex digits>.json, and nothing else but the
			// writer thread's temporary file of the moment (.NAME.…tmp)
			files, _ := filepath.Glob(filepath.Join(spool, "[^.]*"))
			if len(files) != 1 || !spoolName().MatchString(filepath.Base(files[0])) ||
				!strings.HasPrefix(filepath.Base(files[0]), strconv.Itoa(pid)+"-") {
				t.Fatalf("spool holds %q, want one %d-TOKEN.json", files, pid)
			}
			path := files[0]
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("%s: %v, want mode 0600", path, err)
			}
			lib, _ := twoGPUs()
			e, err := New(Options{NVML: lib, Spool: spool, Hostname: "node7"})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			// gpu="1": the UUID places the process's device 0 on NVML's GPU 1.
			labels := []string{"rank", "5", "gpu", "1", "UUID", uuid1}
			if c.largest { // the module; the snippet has no Kubernetes labels
				labels = append(labels, "namespace", "ml", "pod", "trainer-0", "container", "train")
			}
			if got := value(t, e, "gpumem_torch_process_info", append(labels, "pid", strconv.Itoa(pid))...); got != 1 {
				t.Errorf("process info = %g", got)
			}
			for _, w := range []struct {
				name string
				want float64
			}{
				{"gpumem_torch_reserved_bytes", 8 << 20},
				{"gpumem_torch_allocated_bytes", 2 << 20},
				{"gpumem_torch_fragmentation_ratio", 0.75},
				{"gpumem_torch_ooms_total", 1},
				{"gpumem_torch_alloc_retries_total", 4},
			} {
				if got := value(t, e, w.name, labels...); got != w.want {
					t.Errorf("%s = %g, want %g", w.name, got, w.want)
				}
			}
			if rec, _, _, err := readRecord(path); err != nil || rec.PIDNamespace != ownPIDNamespace() {
				t.Errorf("the record's pid namespace is %d (%v), this process's %d", rec.PIDNamespace, err, ownPIDNamespace())
			}
			if c.largest {
				// 4 MiB of the 5 MiB free in device 0's cache are one block.
				if got := value(t, e, "gpumem_torch_largest_free_block_ratio", labels...); got != 0.8 {
					t.Errorf("largest free block ratio = %g, want 0.8", got)
				}
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			// The module removes its file at exit; the snippet's file goes
			// when the exporter sees the process gone.
			value(t, e, "gpumem_spool_processes")
			entries, _ := os.ReadDir(spool)
			var left []string
			for _, en := range entries {
				left = append(left, en.Name())
			}
			if len(left) != 0 {
				t.Errorf("spool after exit holds %s", strings.Join(left, " "))
			}
			if got := value(t, e, "gpumem_spool_processes"); got != 0 {
				t.Errorf("%g processes after exit, want 0", got)
			}
		})
	}
}

// The largest free block (torch.cuda.memory_snapshot(), costly with a long
// history) is measured at most LARGEST_FREE_BLOCK_SHARE of the time: a
// snapshot taking 20 ms is not taken again within 10 s.
func TestLargestFreeBlockSampling(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	fake := t.TempDir()
	os.MkdirAll(filepath.Join(fake, "torch"), 0o755)
	slow := fakeTorch + `
import time
calls = []
_snapshot = cuda.memory_snapshot
def _slow():
    calls.append(1)
    time.sleep(0.02)
    return _snapshot()
cuda.memory_snapshot = staticmethod(_slow)
`
	if err := os.WriteFile(filepath.Join(fake, "torch", "__init__.py"), []byte(slow), 0o644); err != nil {
		t.Fatal(err)
	}
	scripts, _ := filepath.Abs("../../python")
	cmd := exec.Command("python3", "-c", `import gpumem_spool, json, torch
p = gpumem_spool.publisher(interval=0.01)
recs = [json.load(open(p.write_once())) for _ in range(5)]
print(len(torch.calls), [r["largest_free_block"] for r in recs] == [4 << 20] * 5)`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+fake+":"+scripts, "GPUMEM_SPOOL="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "1 True\n" {
		t.Errorf("%v: %s (want one snapshot for five writes, its figure in each)", err, out)
	}
}
