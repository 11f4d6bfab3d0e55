package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// signalScript is a training script for record's signal tests: it says it
// is ready in $READY, then waits. On SIGINT it takes 2.5 s to clean up
// (longer than the old 2 s after which gpumem gave up) and exits 7; with
// IGNORE set it ignores SIGINT; SIGTERM is record.py's (exit 143 after the
// snapshot); SIGHUP kills it.
const signalScript = `import os, signal, sys, time
if os.environ.get("IGNORE"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    open(os.environ["READY"], "w").close()
    time.sleep(60)
except KeyboardInterrupt:
    time.sleep(2.5)
    print("cleaned up", flush=True)
    sys.exit(7)
`

// record passes SIGINT, SIGTERM and SIGHUP sent to gpumem alone to the
// script, waits for it however long it takes, exits with its status and
// removes its temporary folder; a script that ignores the signal is
// killed at the third.
func TestRecordForwardsSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Python scripts for seconds")
	}
	dir := python3Dir(t, map[string]string{"train.py": signalScript})
	exe := gpumemExe(t)
	for _, c := range []struct {
		name    string
		sigs    []syscall.Signal
		env     string
		code    int
		stdout  string
		written bool
	}{
		{"sigint", []syscall.Signal{syscall.SIGINT}, "", 7, "cleaned up\n", true},
		{"sigterm", []syscall.Signal{syscall.SIGTERM}, "", 143, "", true},
		{"sighup", []syscall.Signal{syscall.SIGHUP}, "", 128 + int(syscall.SIGHUP), "", false},
		{"ignored", []syscall.Signal{syscall.SIGINT, syscall.SIGINT, syscall.SIGTERM}, "IGNORE=1", 128 + int(syscall.SIGKILL), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp, out := t.TempDir(), t.TempDir()
			ready := filepath.Join(out, "ready")
			snap := filepath.Join(out, "s.pickle")
			cmd := exec.Command(exe, "record", "-f", snap, "--", "python3", filepath.Join(dir, "train.py"))
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "READY="+ready, c.env)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFile(t, ready)
			for _, s := range c.sigs {
				cmd.Process.Signal(s)
				time.Sleep(100 * time.Millisecond)
			}
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != c.code || stdout.String() != c.stdout {
				t.Errorf("exit %d (want %d), stdout %q (want %q)\nstderr: %s", code, c.code, &stdout, c.stdout, &stderr)
			}
			if _, err := os.Stat(snap); (err == nil) != c.written {
				t.Errorf("snapshot written: %v, want %v\nstderr: %s", err == nil, c.written, &stderr)
			}
			if es, _ := os.ReadDir(tmp); len(es) != 0 {
				t.Errorf("left in TMPDIR: %v", es)
			}
		})
	}
}

// As PID 1 of a container (a new pid namespace here), SIGTERM, which is
// what `docker stop` sends, reaches the script, which writes its snapshot
// before gpumem exits with its status.
func TestRecordAsPID1(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Python script")
	}
	if exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").Run() != nil {
		t.Skip("cannot make a pid namespace here (unshare --pid)")
	}
	dir := python3Dir(t, map[string]string{"train.py": signalScript})
	exe := gpumemExe(t)
	tmp, out := t.TempDir(), t.TempDir()
	ready := filepath.Join(out, "ready")
	snap := filepath.Join(out, "s.pickle")
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", exe, "record", "-f", snap, "--", "python3", filepath.Join(dir, "train.py"))
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "READY="+ready)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, ready)
	// gpumem is unshare's child: PID 1 inside, this pid outside
	kids, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children")
	pid, _ := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || pid == 0 {
		cmd.Process.Kill()
		t.Fatalf("no child of unshare: %q %v", kids, err)
	}
	syscall.Kill(pid, syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 || !strings.Contains(stderr.String(), "gpumem: wrote "+snap) {
		t.Errorf("exit %d, stderr:\n%s", code, &stderr)
	}
	if es, _ := os.ReadDir(tmp); len(es) != 0 {
		t.Errorf("left in TMPDIR: %v", es)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared", path)
}

// On a terminal the script's process group is the foreground one: it
// reads the terminal (input(), pdb), and Ctrl-C reaches it once, from the
// terminal itself; gpumem gets the terminal back when it ends.
func TestRecordOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Python scripts")
	}
	dir := python3Dir(t, map[string]string{"train.py": `import sys, time
try:
    line = input("prompt> ")
    print("got", line, flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(7)
`, "harness.py": `import os, pty, signal, sys, time
signal.alarm(60)
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
def until(s):
    global out
    while s not in out:
        b = os.read(fd, 4096)
        if not b:
            sys.exit("EOF before %r: %r" % (s, out))
        out += b
until(b"prompt> ")
os.write(fd, b"hello\n")
until(b"got hello")
time.sleep(0.2)
os.write(fd, b"\x03")
while True:
    try:
        b = os.read(fd, 4096)
    except OSError:
        break
    if not b:
        break
    out += b
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
print("exit", os.waitstatus_to_exitcode(status))
`})
	exe := gpumemExe(t)
	snap := filepath.Join(t.TempDir(), "s.pickle")
	cmd := exec.Command("python3", filepath.Join(dir, "harness.py"), exe, "record", "-f", snap, "--", "python3", filepath.Join(dir, "train.py"))
	out, err := cmd.CombinedOutput()
	s := strings.ReplaceAll(string(out), "\r\n", "\n")
	if err != nil || !strings.HasSuffix(s, "exit 7\n") || strings.Count(s, "interrupted\n") != 1 ||
		strings.Contains(s, "passing") || !strings.Contains(s, "gpumem: wrote "+snap) {
		t.Errorf("%v\n%s", err, s)
	}
}
