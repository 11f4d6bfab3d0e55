package exporter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Record is one spool file, DIR/<pid>.json, as scripts/gpumem_spool.py
// writes it.
type Record struct {
	PID      int     `json:"pid"`
	Rank     *int    `json:"rank"`   // null when the process is not part of a distributed job
	Device   int     `json:"device"` // CUDA device index as the process sees it
	UUID     string  `json:"uuid"`   // "GPU-…", when torch knows it; maps the device to NVML's index
	Job      string  `json:"job"`    // scheduler job id or name, optional
	Time     float64 `json:"time"`   // Unix seconds of the snapshot
	Interval float64 `json:"interval"`
	// PIDNamespace is the inode of the writer's /proc/self/ns/pid; 0 when
	// not written. A pid from another namespace (a container) means
	// nothing here, so such a record expires by age alone.
	PIDNamespace uint64 `json:"pidns"`
	// LargestFreeBlock is the largest inactive block in the cache, in
	// bytes; absent when the writer did not look at the segments.
	LargestFreeBlock *int64             `json:"largest_free_block"`
	MemoryStats      map[string]float64 `json:"memory_stats"`
}

// spoolName is the only file name the reader considers; the writer's
// temporary files (.<pid>.json.tmp…) do not match.
var spoolName = regexp.MustCompile(`^[1-9][0-9]{0,9}\.json$`)

// maxSpoolFile bounds what one file may make the exporter read: a real
// memory_stats is a few KiB.
const maxSpoolFile = 1 << 20

// maxJob bounds the job label.
const maxJob = 128

// requiredStats are the memory_stats keys every record must have.
var requiredStats = []string{
	"reserved_bytes.all.current", "allocated_bytes.all.current",
	"active_bytes.all.current", "inactive_split_bytes.all.current",
}

// fileKey identifies one version of one file, so a malformed file is
// counted once, not once per scrape.
type fileKey struct {
	name  string
	mtime time.Time
	size  int64
}

// spoolResult is what one pass over the spool found.
type spoolResult struct {
	records   []Record
	malformed []error // one per newly seen bad file version
	exited    int     // files removed because their process is gone
	stale     int     // files removed because they stopped being updated
}

// spoolReader reads a spool folder and removes the files of dead
// processes. It remembers which bad files it already reported.
type spoolReader struct {
	dir      string
	interval time.Duration
	now      func() time.Time
	alive    func(pid int) bool
	pidns    uint64 // the exporter's pid namespace; 0 if unknown
	seenBad  map[fileKey]bool
	// keep leaves the files of gone and stale processes where they are,
	// for a reader that only looks (gpumem summary): they are skipped,
	// and so are records whose pids are of another pid namespace.
	keep bool
}

// ReadSpool reads the spool folder dir once, to look rather than to serve
// (gpumem summary): the records of the processes alive in this pid
// namespace that wrote within three intervals, by pid, and an error for
// each malformed file. It removes nothing. A missing folder is empty.
func ReadSpool(dir string) ([]Record, []error, error) {
	r := &spoolReader{dir: dir, interval: DefaultInterval, now: time.Now, alive: pidAlive, pidns: ownPIDNamespace(), keep: true}
	res, err := r.read()
	return res.records, res.malformed, err
}

// read lists the spool. A missing folder is an empty spool: the first
// training process creates it.
func (r *spoolReader) read() (spoolResult, error) {
	var res spoolResult
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	bad := make(map[fileKey]bool)
	for _, e := range entries {
		if !spoolName.MatchString(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(r.dir, e.Name())
		info, err := e.Info()
		if err != nil {
			continue // removed since the listing
		}
		rec, err := readRecord(path, info.Size())
		if err != nil {
			k := fileKey{e.Name(), info.ModTime(), info.Size()}
			bad[k] = true
			if !r.seenBad[k] {
				res.malformed = append(res.malformed, err)
			}
			continue
		}
		switch {
		case r.samePIDNamespace(rec) && !r.alive(rec.PID):
			res.exited++
			if !r.keep {
				os.Remove(path)
			}
		case r.stale(rec):
			res.stale++
			if !r.keep {
				os.Remove(path)
			}
		case r.keep && !r.samePIDNamespace(rec):
			// its pid names no process here: a look has nothing to match it with
		default:
			res.records = append(res.records, rec)
		}
	}
	r.seenBad = bad // forget files that were fixed or removed
	slices.SortFunc(res.records, func(a, b Record) int { return a.PID - b.PID })
	return res, nil
}

// samePIDNamespace says whether the record's pid can be looked up here.
func (r *spoolReader) samePIDNamespace(rec Record) bool {
	return rec.PIDNamespace == 0 || r.pidns == 0 || rec.PIDNamespace == r.pidns
}

// stale says whether a record is older than three intervals, the
// exporter's or the writer's, whichever is longer.
func (r *spoolReader) stale(rec Record) bool {
	iv := r.interval
	if w := time.Duration(rec.Interval * float64(time.Second)); w > iv {
		iv = w
	}
	age := r.now().Sub(time.Unix(0, int64(rec.Time*1e9)))
	return age > 3*iv
}

// readRecord reads and checks one spool file.
func readRecord(path string, size int64) (Record, error) {
	var rec Record
	if size > maxSpoolFile {
		return rec, fmt.Errorf("%s: %d bytes, more than a spool file may have (%d)", path, size, maxSpoolFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return rec, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpoolFile+1))
	if err != nil {
		return rec, fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: not a spool record: %w", path, err)
	}
	if err := rec.check(filepath.Base(path)); err != nil {
		return rec, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}

func (rec *Record) check(name string) error {
	if strconv.Itoa(rec.PID)+".json" != name {
		return fmt.Errorf("pid %d does not match the file name", rec.PID)
	}
	if rec.Rank != nil && *rec.Rank < 0 {
		return fmt.Errorf("negative rank %d", *rec.Rank)
	}
	if rec.Device < 0 {
		return fmt.Errorf("negative device %d", rec.Device)
	}
	if !(rec.Time > 0) || math.IsInf(rec.Time, 0) {
		return errors.New("no time")
	}
	if !(rec.Interval >= 0) || rec.Interval > 86400 {
		return fmt.Errorf("interval %g s out of range", rec.Interval)
	}
	if len(rec.Job) > maxJob || !utf8.ValidString(rec.Job) {
		return fmt.Errorf("job longer than %d bytes or not utf-8", maxJob)
	}
	if len(rec.UUID) > 64 || !utf8.ValidString(rec.UUID) {
		return errors.New("uuid longer than 64 bytes or not utf-8")
	}
	if rec.MemoryStats == nil {
		return errors.New("no memory_stats")
	}
	for _, k := range requiredStats {
		v, ok := rec.MemoryStats[k]
		if !ok {
			return fmt.Errorf("memory_stats lacks %s", k)
		}
		if v < 0 || math.IsInf(v, 0) {
			return fmt.Errorf("memory_stats %s is %g", k, v)
		}
	}
	if rec.LargestFreeBlock != nil && *rec.LargestFreeBlock < 0 {
		return errors.New("negative largest_free_block")
	}
	return nil
}
