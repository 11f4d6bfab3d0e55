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
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// Record is one spool file, DIR/<pid>-<token>.json, as
// python/gpumem_spool.py writes it (<token>: 16 random hex digits the
// writer draws at start, so that the names of two processes never collide,
// even two PID 1s of two containers, and no one can guess another's name;
// older writers' DIR/<pid>.json is read too).
type Record struct {
	PID    int    `json:"pid"`
	Rank   *int   `json:"rank"`   // null when the process is not part of a distributed job
	Device int    `json:"device"` // CUDA device index as the process sees it
	UUID   string `json:"uuid"`   // "GPU-…", when torch knows it; maps the device to NVML's index
	Job    string `json:"job"`    // scheduler job id or name, optional
	// Pod, Namespace and Container name the Kubernetes container the
	// writer runs in, from its environment; "" outside Kubernetes. They
	// are what the writer says, as the rest of the record is.
	Pod       string  `json:"pod"`
	Namespace string  `json:"namespace"`
	Container string  `json:"container"`
	Time      float64 `json:"time"` // Unix seconds of the snapshot
	Interval  float64 `json:"interval"`
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
// temporary files (.<pid>-<token>.json.…tmp) do not match. It is
// compiled at its first use (its repeats made it the costliest of our
// regexps at every process start).
var spoolName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([1-9][0-9]{0,9})(-[0-9a-f]{16})?\.json$`) })

// Limits on what one spool file and one pass over the spool may cost. A
// real record is a few KiB with about 150 memory_stats keys, and a node
// runs a few processes a GPU; whatever else is in the folder is skipped,
// and counted, rather than read.
const (
	maxSpoolFile    = 64 << 10 // bytes of one file
	maxStatKeys     = 1024     // memory_stats keys of one record
	maxSpoolEntries = 8192     // folder entries listed a pass
	maxSpoolFiles   = 512      // files opened a pass
	maxSpoolBytes   = 8 << 20  // bytes read a pass
	// maxFuture is how far ahead of the clock a record's time may be
	// (writers share the node's clock); further is malformed, so that no
	// record outlives its writer by more than three intervals.
	maxFuture = time.Minute
	// maxInterval is the longest writer interval the reader believes.
	maxInterval = 3600
)

// maxJob bounds the job label; the Kubernetes names are at most 253 bytes.
const (
	maxJob     = 128
	maxK8sName = 253
)

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
	ino   uint64
}

// spoolResult is what one pass over the spool found.
type spoolResult struct {
	records   []Record
	malformed []error // one per newly seen bad file version
	exited    int     // files removed because their process is gone
	stale     int     // files removed because they stopped being updated
	// skipped counts the entries a pass left unread because it reached a
	// limit (entries, files or bytes); truncated says it did.
	skipped   int
	truncated bool
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
	// limits of one pass; zero means the package's
	maxEntries, maxFiles int
	maxBytes             int64
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
// training process creates it. It lists at most maxSpoolEntries entries,
// opens at most maxSpoolFiles files and reads at most maxSpoolBytes bytes,
// and counts what it left.
func (r *spoolReader) read() (spoolResult, error) {
	var res spoolResult
	maxEntries, maxFiles, maxBytes := or(r.maxEntries, maxSpoolEntries), or(r.maxFiles, maxSpoolFiles), r.maxBytes
	if maxBytes == 0 {
		maxBytes = maxSpoolBytes
	}
	dir, err := os.Open(r.dir)
	if errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	entries, err := dir.ReadDir(maxEntries)
	if err == nil {
		// one more tells whether the listing stopped short
		if more, _ := dir.ReadDir(1); len(more) > 0 {
			res.truncated = true
			res.skipped++
		}
	}
	dir.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return res, err
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	bad := make(map[fileKey]bool)
	files, budget := 0, maxBytes
	for _, e := range entries {
		if !spoolName().MatchString(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		if files >= maxFiles || budget <= 0 {
			res.truncated = true
			res.skipped++
			continue
		}
		files++
		path := filepath.Join(r.dir, e.Name())
		rec, k, n, err := readRecord(path)
		budget -= n
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the listing
		}
		if err == nil {
			err = r.checkTime(rec)
			if err != nil {
				err = fmt.Errorf("%s: %w", path, err)
			}
		}
		if err != nil {
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

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// checkTime refuses a record from the future: its age would stay
// negative, and it would be served for ever.
func (r *spoolReader) checkTime(rec Record) error {
	if ahead := time.Unix(0, int64(rec.Time*1e9)).Sub(r.now()); ahead > maxFuture {
		return fmt.Errorf("time %.0f s in the future", ahead.Seconds())
	}
	return nil
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

// readRecord reads and checks one spool file. It opens the name without
// following a link and without blocking (a FIFO swapped in after the
// listing must not hang the scrape), then reads only what fstat says is
// a regular file of one link and at most maxSpoolFile bytes. It returns
// the version of the file it read (for telling a bad one once) and the
// bytes it read.
func readRecord(path string) (Record, fileKey, int64, error) {
	var rec Record
	k := fileKey{name: filepath.Base(path)}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if err == syscall.ENOENT {
			return rec, k, 0, os.ErrNotExist
		}
		return rec, k, 0, fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return rec, k, 0, fmt.Errorf("%s: %w", path, err)
	}
	k.mtime, k.size, k.ino = time.Unix(st.Mtim.Unix()), st.Size, st.Ino
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return rec, k, 0, fmt.Errorf("%s: not a regular file", path)
	case st.Nlink != 1:
		return rec, k, 0, fmt.Errorf("%s: %d links; a spool file has one", path, st.Nlink)
	case st.Size > maxSpoolFile:
		return rec, k, 0, fmt.Errorf("%s: %d bytes, more than a spool file may have (%d)", path, st.Size, maxSpoolFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSpoolFile+1))
	n := int64(len(b))
	if err != nil {
		return rec, k, n, fmt.Errorf("%s: %w", path, err)
	}
	if n > maxSpoolFile {
		return rec, k, n, fmt.Errorf("%s: more than %d bytes, more than a spool file may have", path, maxSpoolFile)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, k, n, fmt.Errorf("%s: not a spool record: %w", path, err)
	}
	if err := rec.check(k.name); err != nil {
		return rec, k, n, fmt.Errorf("%s: %w", path, err)
	}
	return rec, k, n, nil
}

func (rec *Record) check(name string) error {
	if m := spoolName().FindStringSubmatch(name); m == nil || m[1] != strconv.Itoa(rec.PID) {
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
	if !(rec.Interval >= 0) || rec.Interval > maxInterval {
		return fmt.Errorf("interval %g s out of range", rec.Interval)
	}
	if len(rec.Job) > maxJob || !utf8.ValidString(rec.Job) {
		return fmt.Errorf("job longer than %d bytes or not utf-8", maxJob)
	}
	if len(rec.UUID) > 64 || !utf8.ValidString(rec.UUID) {
		return errors.New("uuid longer than 64 bytes or not utf-8")
	}
	for _, v := range []struct{ what, s string }{{"pod", rec.Pod}, {"namespace", rec.Namespace}, {"container", rec.Container}} {
		if len(v.s) > maxK8sName || !utf8.ValidString(v.s) {
			return fmt.Errorf("%s longer than %d bytes or not utf-8", v.what, maxK8sName)
		}
	}
	if rec.MemoryStats == nil {
		return errors.New("no memory_stats")
	}
	if len(rec.MemoryStats) > maxStatKeys {
		return fmt.Errorf("%d memory_stats keys, more than %d", len(rec.MemoryStats), maxStatKeys)
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
