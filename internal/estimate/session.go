package estimate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/report"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// A Session is the virtual card one emulated process allocates from: the
// allocator replica answering the emulator's requests (protocol.go), and
// the trace of what it was asked, written as it goes.
type Session struct {
	opts  alloc.Options
	a     *alloc.Allocator
	trace *bufio.Writer // the gpumem text trace of the run; nil: none
	ops   int           // requests applied (a, f, e); the emulator counts the same
	began bool          // an allocation was made: the fraction can no longer change
	dev   int           // device calls of the log already passed on
	addrs map[uint32]uint64

	allocPeakOp, resPeakOp int // the op after which allocated (reserved) first reached its peak
	allocPeak, resPeak     int64

	OOMs []OOM // every out-of-memory the program met, caught or not
}

// OOM is an allocation the virtual card could not meet.
type OOM struct {
	Op      int    // the emulator's op number of the failing request
	Size    uint64 // requested bytes
	Message string // PyTorch's torch.OutOfMemoryError message
	Detail  alloc.OOM
}

// NewSession opens a virtual card under o. The trace of the run goes to
// trace (nil: none), under the settings line conf.
func NewSession(o alloc.Options, conf string, trace io.Writer) (*Session, error) {
	s := &Session{opts: o, addrs: map[uint32]uint64{}}
	if err := s.open(); err != nil {
		return nil, err
	}
	if trace != nil {
		s.trace = bufio.NewWriterSize(trace, 1<<16)
		fmt.Fprintf(s.trace, "# gpumem-trace v1\n# written by gpumem estimate: the allocations of an emulated run\n")
		writeSettings(s.trace, o.Config, conf)
	}
	return s, nil
}

func (s *Session) open() error {
	a, err := alloc.New(s.opts)
	if err != nil {
		return err
	}
	if err := a.LogDevice(); err != nil {
		a.Close()
		return err
	}
	s.a = a
	return nil
}

// Close frees the allocator.
func (s *Session) Close() { s.a.Close() }

// Allocator is the replica, for the final figures.
func (s *Session) Allocator() *alloc.Allocator { return s.a }

// Peaks returns the op numbers after which allocated and reserved bytes
// first reached their peaks (0: before any op).
func (s *Session) Peaks() (allocatedOp, reservedOp int) { return s.allocPeakOp, s.resPeakOp }

// Finish writes the final segments to the trace and flushes it.
func (s *Session) Finish() error {
	if s.trace == nil {
		return nil
	}
	writeSegments(s.trace, s.a.Snapshot())
	return s.trace.Flush()
}

// Serve answers requests read from r on w until the emulator says it is
// done ("q") or r ends. A malformed request is an error: the emulator is
// ours, so it means a bug, not bad input.
func (s *Session) Serve(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 1<<16)
	bw := bufio.NewWriter(w)
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return nil
		}
		if err != nil && err != io.EOF {
			return err
		}
		if len(line) > maxRequest {
			return fmt.Errorf("emulator request of %d bytes", len(line))
		}
		line = strings.TrimSuffix(line, "\n")
		reply, done, err := s.handle(line)
		if err != nil {
			return fmt.Errorf("emulator request %q: %w", truncate(line), err)
		}
		if reply != "" {
			bw.WriteString(reply)
			bw.WriteByte('\n')
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}

const maxRequest = 1 << 12

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

var errBadRequest = errors.New("bad request")

func (s *Session) handle(line string) (reply string, done bool, err error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", false, errBadRequest
	}
	num := func(i int) (uint64, error) {
		if i >= len(f) {
			return 0, errBadRequest
		}
		return strconv.ParseUint(f[i], 10, 64)
	}
	switch f[0] {
	case "a": // a ID SIZE STREAM
		id, e1 := num(1)
		size, e2 := num(2)
		stream, e3 := num(3)
		if err := errors.Join(e1, e2, e3); err != nil || id > 1<<32-1 {
			return "", false, errBadRequest
		}
		r, err := s.malloc(uint32(id), size, stream)
		return r, false, err
	case "f": // f ID
		id, err := num(1)
		if err != nil || id > 1<<32-1 {
			return "", false, errBadRequest
		}
		return "", false, s.free(uint32(id))
	case "e": // empty_cache
		s.ops++
		if err := s.a.EmptyCache(); err != nil {
			return "", false, err
		}
		dev := s.deviceCalls()
		if s.trace != nil {
			s.trace.WriteString("empty_cache\n")
		}
		return "k 0 " + dev, false, nil
	case "l": // the program's first kernel ran: the driver frees its start-up range
		return "", false, s.a.KernelsStarted()
	case "t": // t SIZE: the driver mapped SIZE bytes of its own (a library's modules)
		size, err := num(1)
		if err != nil {
			return "", false, errBadRequest
		}
		return "", false, s.a.DriverMapping(size)
	case "r": // reset_peak_memory_stats
		s.a.ResetPeak()
		return "", false, nil
	case "s": // memory_stats
		return jsonReply(s.a.Stats().Map())
	case "m": // mem_get_info: the device's free bytes, and the card's total (the device is its usable part)
		free, _, err := s.a.MemInfo()
		if err != nil {
			return "", false, err
		}
		return jsonReply([2]uint64{free, s.a.DeviceTotal()})
	case "x": // x FRACTION: set_per_process_memory_fraction
		if len(f) != 2 {
			return "", false, errBadRequest
		}
		return s.setFraction(f[1])
	case "g": // the segments, as torch.cuda.memory_snapshot() gives them
		return jsonReply(segmentsOf(s.a.Snapshot()))
	case "p": // the peaks' op numbers
		return jsonReply(map[string]int{"allocated_op": s.allocPeakOp, "reserved_op": s.resPeakOp})
	case "q":
		return "", true, nil
	}
	return "", false, errBadRequest
}

func jsonReply(v any) (string, bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", false, err
	}
	return "j " + string(b), false, nil
}

// malloc answers "k ADDR DEVICE_CALLS" or, when the card is full,
// "o DEVICE_FREE DEVICE_CALLS MESSAGE".
func (s *Session) malloc(id uint32, size, stream uint64) (string, error) {
	s.ops++
	s.began = true
	addr, o, err := s.a.AllocOrOOM(id, size, stream)
	dev := s.deviceCalls()
	if o != nil {
		msg := report.TorchOOMMessage(0, &figures.OOM{
			Size: o.Size, Rounded: o.Rounded, AllocSize: o.AllocSize, Stream: o.Stream,
			DeviceTotal: o.DeviceTotal, DeviceFree: o.DeviceFree, Allowed: o.Allowed,
			Allocated: o.Allocated, Reserved: o.Reserved, PrivatePools: o.PrivatePools,
		})
		s.OOMs = append(s.OOMs, OOM{Op: s.ops, Size: size, Message: msg, Detail: *o})
		if s.trace != nil {
			fmt.Fprintf(s.trace, "oom %d device_free=%d stream=%#x\n", size, o.DeviceFree, stream)
		}
		return fmt.Sprintf("o %d %s %s", o.DeviceFree, dev, msg), nil
	}
	if err != nil {
		return "", err
	}
	s.addrs[id] = addr
	if s.trace != nil {
		fmt.Fprintf(s.trace, "alloc %#x %d stream=%#x\n", addr, alloc.RoundSize(s.opts.Config, size), stream)
	}
	st := s.a.Stats()
	if v := st.AllocatedBytes[alloc.All].Current; v > s.allocPeak {
		s.allocPeak, s.allocPeakOp = v, s.ops
	}
	if v := st.ReservedBytes[alloc.All].Current; v > s.resPeak {
		s.resPeak, s.resPeakOp = v, s.ops
	}
	return "k " + strconv.FormatUint(addr, 10) + " " + dev, nil
}

func (s *Session) free(id uint32) error {
	s.ops++
	addr, ok := s.addrs[id]
	if !ok {
		return fmt.Errorf("free of unknown allocation %d", id)
	}
	delete(s.addrs, id)
	if err := s.a.Free(id); err != nil {
		return err
	}
	if s.trace != nil {
		fmt.Fprintf(s.trace, "free %#x\n", addr)
	}
	return nil
}

// deviceCalls passes on the device calls made since the last time: each
// is written to the trace (before the op's own line, as PyTorch orders
// them) and returned as "N KIND:ADDR:SIZE..." for the emulator's
// snapshot.
func (s *Session) deviceCalls() string {
	calls := s.a.DeviceLogFrom(s.dev)
	s.dev += len(calls)
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(calls)))
	for _, c := range calls {
		if s.trace != nil {
			fmt.Fprintf(s.trace, "%s %#x %d\n", c.Kind, c.Addr, c.Size)
		}
		fmt.Fprintf(&b, " %s:%d:%d", c.Kind, c.Addr, c.Size)
	}
	return b.String()
}

// setFraction applies set_per_process_memory_fraction. The replica takes
// its cap when it is made, so a fraction can be set only before the first
// allocation (where scripts set it); later is refused with a message the
// emulator raises.
func (s *Session) setFraction(v string) (string, bool, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= 1) {
		return "E invalid fraction, it should be in [0, 1]", false, nil
	}
	if s.began {
		return "E gpumem estimate: set_per_process_memory_fraction after the first CUDA allocation is not supported; call it before", false, nil
	}
	s.a.Close()
	s.opts.MemoryFraction = max(f, 1e-300) // a fraction of 0 allows nothing
	if err := s.open(); err != nil {
		return "", false, err
	}
	return "k 0", false, nil
}
