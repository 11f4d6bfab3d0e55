package exporter

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A FIFO or a link swapped in under a spool name after the listing is
// refused at once: reading never blocks (the scrape would hang with the
// spool's lock held) and never follows a link.
func TestSpoolEntryNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "5.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	writeRecord(t, dir, record(6, 0, uuid0))
	link := filepath.Join(dir, "7.json")
	os.Symlink(filepath.Join(dir, "6.json"), link)
	os.Link(filepath.Join(dir, "6.json"), filepath.Join(dir, "8.json"))
	for _, c := range []struct{ path, want string }{
		{fifo, "not a regular file"},
		{link, "too many levels of symbolic links"},
		{filepath.Join(dir, "8.json"), "2 links; a spool file has one"},
	} {
		done := make(chan error, 1)
		go func() { _, _, _, err := readRecord(c.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want %q", c.path, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %s blocks", c.path)
		}
	}
}

// A process name that is not UTF-8 (NVML cuts names inside a multi-byte
// character) neither panics the collector nor drops the other series, and
// the textfile is still written.
func TestInvalidUTF8Labels(t *testing.T) {
	lib, _ := newLib(newDevice(0, uuid0, "00000000:19:00.0", 3*gib, []nvml.ProcessInfo{
		{Pid: 4242, UsedGpuMemory: gib}, {Pid: 4243, UsedGpuMemory: 2 * gib}}))
	dir := t.TempDir()
	e, err := New(Options{NVML: lib, Spool: dir, Hostname: "node\xff7", Now: func() time.Time { return clock },
		ProcName: func(pid uint32) string { return map[uint32]string{4242: "py\xe5\x8f", 4243: "python3"}[pid] }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := value(t, e, "gpumem_gpu_process_memory_used_bytes", "pid", "4242", "process", "py\uFFFD", "hostname", "node\uFFFD7"); got != gib {
		t.Errorf("pid 4242: %g", got)
	}
	if got := value(t, e, "gpumem_gpu_process_memory_used_bytes", "pid", "4243"); got != 2*gib {
		t.Errorf("pid 4243 (after the bad name): %g", got)
	}
	if err := e.WriteTextfile(t.TempDir()); err != nil {
		t.Errorf("textfile: %v", err)
	}
	if got := labelValue(strings.Repeat("é", 200)); len(got) > maxLabel || !strings.HasSuffix(got, "é") {
		t.Errorf("a long value is cut to %d bytes: %q", len(got), got[len(got)-4:])
	}
}

// A record dated years ahead would never grow stale: it is malformed.
func TestRecordFromTheFuture(t *testing.T) {
	lib, _ := twoGPUs()
	e, dir, warnings := newTest(t, lib, nil)
	r := record(4242, 0, uuid0)
	r["time"] = float64(time.Date(2255, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	writeRecord(t, dir, r)
	r = record(4243, 0, uuid0)
	r["time"] = float64(clock.Unix()) + 30 // a writer's clock a little ahead is fine
	writeRecord(t, dir, r)
	if n := value(t, e, "gpumem_spool_processes"); n != 1 {
		t.Errorf("%g processes served, want 1", n)
	}
	if len(*warnings) != 1 || !strings.Contains((*warnings)[0], "4242.json: time") || !strings.Contains((*warnings)[0], "s in the future") {
		t.Errorf("warnings: %q", *warnings)
	}
}

// Names carry a random token: two PID 1s of two containers keep their own
// files, and the pid before the token must be the record's.
func TestSpoolNamesDoNotCollide(t *testing.T) {
	lib, _ := twoGPUs()
	e, dir, warnings := newTest(t, lib, nil)
	for i, name := range []string{"1-0123456789abcdef.json", "1-fedcba9876543210.json", "2-0123456789abcdef.json", "1-XYZ.json"} {
		r := record(1, 0, uuid0)
		r["pidns"], r["rank"] = 4026532000+i, i
		writeRecord(t, dir, r)
		os.Rename(filepath.Join(dir, "1.json"), filepath.Join(dir, name))
	}
	if n := value(t, e, "gpumem_spool_processes"); n != 2 {
		t.Errorf("%g processes served, want 2", n)
	}
	// the same two with the same labels: summed, one info series, and the
	// textfile (which fails on any bad series) is written
	for _, name := range []string{"1-0123456789abcdef.json", "1-fedcba9876543210.json"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		os.WriteFile(filepath.Join(dir, name), []byte(strings.Replace(string(b), `"rank":1`, `"rank":0`, 1)), 0o600)
	}
	if got := value(t, e, "gpumem_torch_process_info", "pid", "1"); got != 1 {
		t.Errorf("process info %g", got)
	}
	if err := e.WriteTextfile(t.TempDir()); err != nil {
		t.Errorf("textfile: %v", err)
	}
	if len(*warnings) != 1 || !strings.Contains((*warnings)[0], "2-0123456789abcdef.json: pid 1 does not match the file name") {
		t.Errorf("warnings: %q", *warnings)
	}
}

// One scrape reads at most maxSpoolFiles files (and bytes and entries):
// the rest are counted in gpumem_spool_skipped_files_total.
func TestSpoolCostBound(t *testing.T) {
	lib, _ := twoGPUs()
	e, dir, _ := newTest(t, lib, nil)
	for pid := 1000; pid < 1000+maxSpoolFiles+40; pid++ {
		r := record(pid, 0, uuid0)
		r["rank"] = pid
		writeRecord(t, dir, r)
	}
	want := fmt.Sprintf(`
# HELP gpumem_spool_processes Processes whose allocator metrics are exported.
# TYPE gpumem_spool_processes gauge
gpumem_spool_processes %d
# HELP gpumem_spool_skipped_files_total Spool entries left unread because a scrape reached a limit: 8192 entries listed, 512 files opened or 8 MiB read.
# TYPE gpumem_spool_skipped_files_total counter
gpumem_spool_skipped_files_total 40
# HELP gpumem_spool_truncated 1 when the last scrape stopped reading the spool at a limit (see gpumem_spool_skipped_files_total).
# TYPE gpumem_spool_truncated gauge
gpumem_spool_truncated 1
`, maxSpoolFiles)
	if err := testutil.GatherAndCompare(e.Gatherer(), strings.NewReader(want),
		"gpumem_spool_processes", "gpumem_spool_skipped_files_total", "gpumem_spool_truncated"); err != nil {
		t.Error(err)
	}

	// the entry and byte limits, on a reader of small limits
	r := &spoolReader{dir: dir, interval: DefaultInterval, now: func() time.Time { return clock },
		alive: func(int) bool { return true }, maxEntries: 100}
	res, _ := r.read()
	if len(res.records) != 100 || !res.truncated || res.skipped != 1 {
		t.Errorf("100 entries: %d records, %d skipped", len(res.records), res.skipped)
	}
	size, _ := os.Stat(filepath.Join(dir, "1000.json"))
	r = &spoolReader{dir: dir, interval: DefaultInterval, now: func() time.Time { return clock },
		alive: func(int) bool { return true }, maxBytes: 10 * size.Size()}
	res, _ = r.read()
	if len(res.records) != 10 || res.skipped != maxSpoolFiles+40-10 {
		t.Errorf("10 files' bytes: %d records, %d skipped", len(res.records), res.skipped)
	}
}

// Idle kept-alive connections and clients that send nothing are closed,
// and at most MaxConns connections are open at once.
func TestServeBoundsConnections(t *testing.T) {
	lib, _ := twoGPUs()
	e, err := New(Options{NVML: lib, Spool: t.TempDir(), Hostname: "node7",
		HTTP: HTTPLimits{MaxConns: 2, ReadHeader: 300 * time.Millisecond, Idle: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- e.Serve(ctx, "127.0.0.1:0", "", time.Minute, func(s string) {
			if a, ok := strings.CutPrefix(s, "serving http://"); ok {
				addr <- strings.TrimSuffix(a, "/metrics")
			}
		})
	}()
	a := <-addr
	scrape := func() net.Conn {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := readResponse(c)
		if err != nil || !strings.Contains(resp, "gpumem_nvml_up 1") {
			t.Fatalf("scrape: %v", err)
		}
		return c
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	if c := scrape(); !closed(c) {
		t.Error("an idle kept-alive connection stays open")
	}
	silent, _ := net.Dial("tcp", a)
	if !closed(silent) {
		t.Error("a connection that sends nothing stays open")
	}
	// two silent clients hold both places: a scrape waits until they are
	// dropped (ReadHeader after they were accepted, so after they were
	// dialled), not less. Timed from the dial, so that a loaded machine
	// that wakes this goroutine late cannot make the wait look short.
	start := time.Now()
	for range 2 {
		c, _ := net.Dial("tcp", a)
		defer c.Close()
	}
	time.Sleep(50 * time.Millisecond)
	scrape().Close()
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("a third connection was served %v after two silent ones were opened, while they were open", waited)
	}
	cancel()
	if err := <-served; err != nil {
		t.Error(err)
	}
}

func readResponse(c net.Conn) (string, error) {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
