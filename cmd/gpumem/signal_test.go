package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gpumemExe is the test binary under the name "gpumem": TestMain runs it
// as the CLI (testscript dispatches on the program's name).
func gpumemExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "gpumem")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// bigTextTrace writes a text trace of n alloc/free pairs: seconds of
// decoding and replay.
func bigTextTrace(t *testing.T, dir string, n int) string {
	t.Helper()
	path := filepath.Join(dir, "big.trace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("# gpumem-trace v1\n")
	for i := 0; i < n; i++ {
		addr := 0x7f0000000000 + uint64(i%64)*(32<<20)
		fmt.Fprintf(w, "alloc %#x %d\nfree %#x\n", addr, 1<<20+512*(i%97), addr)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// Every long command stops within a second of SIGINT or SIGTERM, exits
// 130 or 143, prints no result, and leaves no file behind: while it reads
// a trace, replays it, runs a workload, or writes a file.
func TestInterruptStopsEveryCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 40 MB trace")
	}
	exe := gpumemExe(t)
	data := t.TempDir()
	big := bigTextTrace(t, data, 1_000_000)
	script := filepath.Join(data, "long.gpumem")
	os.WriteFile(script, []byte("repeat 100000000 {\n  alloc x 1MiB\n  free x\n}\n"), 0o644)
	for _, c := range []struct {
		name string
		args []string
		sig  syscall.Signal
		code int
	}{
		{"replay", []string{"replay", big, "-o", "json"}, syscall.SIGINT, exitInterrupt},
		{"replay-html", []string{"replay", big, "--html", "OUT/r.html"}, syscall.SIGTERM, exitTerminated},
		{"run", []string{"run", script, "--max-ops", "1000000000"}, syscall.SIGINT, exitInterrupt},
		{"convert", []string{"convert", big, "OUT/big2.trace"}, syscall.SIGINT, exitInterrupt},
		{"sweep", []string{"sweep", big, "--grid", "defaults"}, syscall.SIGTERM, exitTerminated},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			args := make([]string, len(c.args))
			for i, a := range c.args {
				args[i] = strings.ReplaceAll(a, "OUT", out)
			}
			cmd := exec.Command(exe, args...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			busy(t, cmd.Process.Pid, 200*time.Millisecond)
			cmd.Process.Signal(c.sig)
			sent := time.Now()
			err := cmd.Wait()
			took := time.Since(sent)
			code := cmd.ProcessState.ExitCode()
			// the exit status says it stopped on the signal rather than
			// finishing; how long it took is logged, not judged (no
			// wall-clock limit in a test: a loaded machine is slower, and
			// a hang is go test's -timeout)
			t.Logf("stopped %v after the signal", took)
			if code != c.code {
				t.Errorf("exit %d after %v (want %d): %v\nstderr: %s", code, took, c.code, err, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("an interrupted run printed %d bytes of result", stdout.Len())
			}
			if es, _ := os.ReadDir(out); len(es) != 0 {
				t.Errorf("files left behind: %v", es)
			}
		})
	}
}

// busy waits until process pid has used cpu of CPU time, well past its
// start-up (where the signal handler is installed) on a loaded machine
// too, where a fixed sleep may end before the process has run at all.
// Without /proc it sleeps four times cpu.
func busy(t *testing.T, pid int, cpu time.Duration) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			time.Sleep(4 * cpu)
			return
		}
		// utime and stime, in clock ticks (100 a second), follow the
		// command name, which may hold spaces but ends at the last ')'
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		var user, sys int
		if len(f) > 12 {
			fmt.Sscan(f[11], &user)
			fmt.Sscan(f[12], &sys)
		}
		if time.Duration(user+sys)*10*time.Millisecond >= cpu {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d used less than %v of CPU in 20 s", pid, cpu)
}
