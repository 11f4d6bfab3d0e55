package exporter

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/probe"
)

// Each NVML process beside its spool record: matched by pid, and by GPU
// UUID when the record has one; the rest is NVML's used minus reserved.
func TestReconcile(t *testing.T) {
	sys := &probe.System{GPUs: []probe.GPU{
		{Index: 0, UUID: uuid0, Processes: []probe.Process{
			{PID: 100, Name: "python3", UsedMemory: 20 * gib},
			{PID: 101, Name: "python3", UsedMemory: 600 * mib}, // publishes nothing
			{PID: 102, UsedMemory: 0},                          // NVML could not attribute its memory
		}},
		{Index: 1, UUID: uuid1, Processes: []probe.Process{
			{PID: 100, Name: "python3", UsedMemory: 500 * mib}, // a context on gpu 1: its allocator is on gpu 0
			{PID: 103, Name: "torchrun", UsedMemory: 4 * gib},
		}},
	}}
	rec := func(pid int, uuid string, reserved float64) Record {
		return Record{PID: pid, UUID: uuid, MemoryStats: map[string]float64{"reserved_bytes.all.current": reserved}}
	}
	recs := []Record{rec(100, uuid0, 19*gib+512*mib), rec(102, uuid0, gib), rec(103, "", 3*gib), rec(104, uuid0, gib)}
	got := Reconcile(sys, recs)
	u := func(n uint64) *uint64 { return &n }
	i := func(n int64) *int64 { return &n }
	want := []ProcessMemory{
		{GPU: 0, PID: 100, Name: "python3", Used: 20 * gib, Reserved: u(19*gib + 512*mib), Rest: i(512 * mib)},
		{GPU: 0, PID: 101, Name: "python3", Used: 600 * mib},
		{GPU: 0, PID: 102, Reserved: u(gib)},
		{GPU: 1, PID: 100, Name: "python3", Used: 500 * mib},
		{GPU: 1, PID: 103, Name: "torchrun", Used: 4 * gib, Reserved: u(3 * gib), Rest: i(gib)},
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if string(a) != string(b) {
		t.Errorf("got  %s\nwant %s", a, b)
	}
	if got := Reconcile(nil, recs); got == nil || len(got) != 0 {
		t.Errorf("no system: %v", got)
	}
}

// A look at the spool (summary) removes nothing: the files of gone and
// stale processes stay for the exporter to count, and are skipped; so is
// a record whose pid is of another pid namespace.
func TestReadSpoolKeeps(t *testing.T) {
	dir := t.TempDir()
	writeRecord(t, dir, record(4242, 0, uuid0))
	writeRecord(t, dir, record(5000, 0, uuid0)) // exited
	r := record(5001, 0, uuid0)
	r["time"] = float64(clock.Unix()) - 100 // stale
	writeRecord(t, dir, r)
	r = record(5003, 0, uuid0)
	r["pidns"] = 4026532000
	writeRecord(t, dir, r)
	writeFile(t, filepath.Join(dir, "6000.json"), "{")
	before, _ := os.ReadDir(dir)

	sr := &spoolReader{dir: dir, interval: DefaultInterval, now: func() time.Time { return clock },
		alive: func(pid int) bool { return pid != 5000 }, pidns: 4026531836, keep: true}
	res, err := sr.read()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, rec := range res.records {
		pids = append(pids, rec.PID)
	}
	if !slices.Equal(pids, []int{4242}) || len(res.malformed) != 1 || !strings.Contains(res.malformed[0].Error(), "6000.json") {
		t.Errorf("records %v, malformed %v", pids, res.malformed)
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) {
		t.Errorf("%d files before, %d after", len(before), len(after))
	}
}

// ReadSpool with the real clock and process table: this test's own
// process is alive; a missing folder is an empty spool.
func TestReadSpool(t *testing.T) {
	dir := t.TempDir()
	r := record(os.Getpid(), 0, uuid0)
	r["time"] = float64(time.Now().Unix())
	writeRecord(t, dir, r)
	recs, malformed, err := ReadSpool(dir)
	if err != nil || len(malformed) != 0 || len(recs) != 1 || recs[0].PID != os.Getpid() {
		t.Errorf("records %+v, malformed %v, err %v", recs, malformed, err)
	}
	recs, malformed, err = ReadSpool(filepath.Join(dir, "none"))
	if err != nil || len(malformed) != 0 || len(recs) != 0 {
		t.Errorf("missing folder: records %+v, malformed %v, err %v", recs, malformed, err)
	}
}
