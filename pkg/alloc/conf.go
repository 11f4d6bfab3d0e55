package alloc

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Policy names an allocation policy.
type Policy string

// Names of the policies the allocator offers, for Go code that picks one;
// the list of policies is the C table ([Policies], policies.go).
const (
	// PolicyPyTorch is PyTorch 2.11's native CUDA caching allocator.
	PolicyPyTorch Policy = "pytorch"
	// PolicyNoCache sends every request to the device and frees at once,
	// like PYTORCH_NO_CUDA_MEMORY_CACHING=1.
	PolicyNoCache Policy = "nocache"
	// PolicyRMMPool is RAPIDS RMM's pool_memory_resource: per-stream
	// coalescing best fit over upstream blocks, the pool doubling as it grows.
	PolicyRMMPool Policy = "rmm-pool"
	// PolicyBFC is TensorFlow's best-fit-with-coalescing allocator with
	// allow_growth: doubling regions, chunks split only when worth it.
	PolicyBFC Policy = "bfc"
	// PolicyCuPy is CuPy's MemoryPool: per-stream best fit, one cudaMalloc
	// of exactly the rounded size on a miss.
	PolicyCuPy Policy = "cupy"
	// PolicyCUDAAsync approximates the driver's stream-ordered pool
	// (cudaMallocAsync) as PyTorch configures it; its internals are closed,
	// so this is a model, not a replica.
	PolicyCUDAAsync Policy = "cuda-async"
	// PolicyGPUMem is gpumem's own policy: page-granular virtual memory that
	// unmaps free pages before it sets a new peak, so peak reserved memory
	// stays within a few pages of the peak of live bytes.
	PolicyGPUMem Policy = "gpumem"
)

const mib = 1 << 20

// Config holds the allocator settings: PYTORCH_CUDA_ALLOC_CONF, parsed.
type Config struct {
	Policy Policy
	// MaxSplitSize: blocks this large or larger are never split. 0 = unlimited.
	MaxSplitSize uint64
	// MaxNonSplitRounding: how much bigger than a request an oversize cached
	// block may be and still serve it.
	MaxNonSplitRounding uint64
	// LargeSegmentSize: the segment size for 1–10 MiB requests and the page
	// size of large expandable segments.
	LargeSegmentSize uint64
	// RoundupPower2Divisions per size interval [2^i MiB, 2^(i+1) MiB); the
	// first also covers requests below 1 MiB. 0 = plain 512-byte rounding.
	RoundupPower2Divisions [16]uint32
	// GCThreshold in (0, 1) turns on garbage collection of cached blocks
	// under a memory fraction; 0 = off.
	GCThreshold        float64
	ExpandableSegments bool
	// MemoryFraction from per_process_memory_fraction; 0 = not given.
	MemoryFraction float64
	// Backend is "native" or "cudaMallocAsync" (accepted, not simulated).
	Backend string
	// Text is the string this config was parsed from.
	Text string
}

// DefaultConfig returns PyTorch's defaults.
func DefaultConfig() Config {
	return Config{
		Policy:              PolicyPyTorch,
		MaxNonSplitRounding: 20 * mib,
		LargeSegmentSize:    20 * mib,
		Backend:             "native",
	}
}

// ConfigError is a PYTORCH_CUDA_ALLOC_CONF that PyTorch would refuse; its
// message is PyTorch's.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

func confErr(format string, args ...any) error {
	return &ConfigError{Msg: fmt.Sprintf(format, args...)}
}

// tokenize splits a config string as PyTorch's ConfigTokenizer does:
// ',' ':' '[' ']' are tokens of their own, whitespace is dropped.
func tokenize(s string) []string {
	var toks []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			toks = append(toks, cur.String())
			cur.Reset()
		}
	}
	for _, r := range s {
		switch {
		case r == ',' || r == ':' || r == '[' || r == ']':
			flush()
			toks = append(toks, string(r))
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return toks
}

type tokens []string

func (t tokens) expect(i int, tok string) error {
	if i >= len(t) || t[i] != tok {
		return confErr("Expected '%s' at position %d in allocator config", tok, i)
	}
	return nil
}

func (t tokens) uint(i int) (uint64, error) {
	if i >= len(t) {
		return 0, confErr("Index out of bounds in ConfigTokenizer")
	}
	v, err := strconv.ParseUint(t[i], 10, 64)
	if err != nil {
		return 0, confErr("invalid value '%s' in allocator config: expected a non-negative integer", t[i])
	}
	return v, nil
}

func (t tokens) float(i int) (float64, error) {
	if i >= len(t) {
		return 0, confErr("Index out of bounds in ConfigTokenizer")
	}
	v, err := strconv.ParseFloat(t[i], 64)
	if err != nil || math.IsNaN(v) {
		return 0, confErr("invalid value '%s' in allocator config: expected a number", t[i])
	}
	return v, nil
}

func (t tokens) bool(i int) (bool, error) {
	if i >= len(t) || (t[i] != "True" && t[i] != "False") {
		got := ""
		if i < len(t) {
			got = t[i]
		}
		return false, confErr("Expected 'True' or 'False' at index %d in ConfigTokenizer but got '%s'", i, got)
	}
	return t[i] == "True", nil
}

func isPow2(v uint64) bool { return v != 0 && v&(v-1) == 0 }

// ParseConfig parses PYTORCH_CUDA_ALLOC_CONF syntax ("key:value,..."),
// starting from PyTorch's defaults, with PyTorch's checks and messages.
func ParseConfig(s string) (Config, error) {
	c := DefaultConfig()
	c.Text = s
	t := tokens(tokenize(s))
	// large_segment_size_mb is read first: other limits depend on it.
	for i := 0; i+2 < len(t); i++ {
		if t[i] == "large_segment_size_mb" && t[i+1] == ":" {
			v, err := t.uint(i + 2)
			if err != nil {
				return c, err
			}
			if v <= 10 {
				return c, confErr("CachingAllocator option large_segment_size_mb too small, must be > 10 MB")
			}
			c.LargeSegmentSize = v * mib
		}
	}
	c.MaxNonSplitRounding = c.LargeSegmentSize
	minMB := c.LargeSegmentSize / mib
	for i := 0; i < len(t); i++ {
		key := t[i]
		if err := t.expect(i+1, ":"); err != nil {
			if key == "," {
				continue
			}
			return c, err
		}
		i += 2
		var err error
		switch key {
		case "max_split_size_mb":
			var v uint64
			if v, err = t.uint(i); err == nil {
				if v < minMB {
					err = confErr("CachingAllocator option max_split_size_mb too small, must be >= %d", minMB)
				}
				c.MaxSplitSize = min(v, math.MaxUint64/mib) * mib
			}
		case "max_non_split_rounding_mb":
			var v uint64
			if v, err = t.uint(i); err == nil {
				if v < minMB {
					err = confErr("CachingAllocator option max_non_split_rounding_mb too small, must be >= %d", minMB)
				}
				c.MaxNonSplitRounding = min(v, math.MaxUint64/mib) * mib
			}
		case "large_segment_size_mb":
			_, err = t.uint(i) // read above
		case "roundup_power2_divisions":
			i, err = parseDivisions(t, i, &c.RoundupPower2Divisions)
		case "garbage_collection_threshold":
			var v float64
			if v, err = t.float(i); err == nil {
				if v <= 0 || v >= 1 {
					err = confErr("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
				}
				c.GCThreshold = v
			}
		case "expandable_segments":
			c.ExpandableSegments, err = t.bool(i)
		case "per_process_memory_fraction":
			var v float64
			if v, err = t.float(i); err == nil {
				if v < 0 || v > 1 {
					err = confErr("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
				}
				c.MemoryFraction = v
			}
		case "backend":
			if i >= len(t) || (t[i] != "native" && t[i] != "cudaMallocAsync") {
				err = confErr("Unknown allocator backend, options are native and cudaMallocAsync")
			} else {
				c.Backend = t[i]
			}
		case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
			"graph_capture_record_stream_reuse", "pinned_use_cuda_host_register",
			"pinned_use_hip_host_register", "pinned_use_background_threads":
			_, err = t.bool(i) // accepted; no effect on what is simulated
		case "pinned_num_register_threads":
			var v uint64
			if v, err = t.uint(i); err == nil && (!isPow2(v) || v > 128) {
				err = confErr("Number of register threads has to be power of 2 and less than or equal to 128")
			}
		case "pinned_reserve_segment_size_mb":
			var v uint64
			if v, err = t.uint(i); err == nil && v == 0 {
				err = confErr("Pinned reserve segment size has to be greater than 0")
			}
		default:
			err = confErr("Unrecognized key '%s' in CUDA allocator config.", key)
		}
		if err != nil {
			return c, err
		}
		if i+1 < len(t) {
			if err := t.expect(i+1, ","); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

// parseDivisions reads "N" or "[k1:v1,k2:v2,>:v]" at t[i]; it returns the
// index of the value's last token.
func parseDivisions(t tokens, i int, d *[16]uint32) (int, error) {
	if i < len(t) && t[i] == "[" {
		last, first := 0, true
		for i++; i < len(t) && t[i] != "]"; i++ {
			keyAt := i
			if err := t.expect(i+1, ":"); err != nil {
				return i, err
			}
			i += 2
			v, err := t.uint(i)
			if err != nil {
				return i, err
			}
			if v != 0 && !isPow2(v) {
				return i, confErr("For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
			}
			if t[keyAt] == ">" {
				for k := last + 1; k < 16; k++ {
					d[k] = uint32(v)
				}
			} else {
				b, err := t.uint(keyAt)
				if err != nil {
					return i, err
				}
				if !isPow2(b) {
					return i, confErr("For roundups, the intervals have to be power of 2 ")
				}
				idx := min(63-leadingZeros(b), 15)
				if first {
					for k := 0; k < idx; k++ {
						d[k] = uint32(v)
					}
				}
				d[idx] = uint32(v)
				last, first = idx, false
			}
			if i+1 < len(t) && t[i+1] != "]" {
				if err := t.expect(i+1, ","); err != nil {
					return i, err
				}
				i++
			}
		}
		if i >= len(t) {
			return i, confErr("Expected closing bracket ']' in ConfigTokenizer but reached end of config")
		}
		return i, nil
	}
	v, err := t.uint(i)
	if err != nil {
		return i, err
	}
	if !isPow2(v) {
		return i, confErr("For roundups, the divisions has to be power of 2 ")
	}
	for k := range d {
		d[k] = uint32(v)
	}
	return i, nil
}

func leadingZeros(v uint64) int {
	n := 0
	for v&(1<<63) == 0 && n < 64 {
		v <<= 1
		n++
	}
	return n
}

// ConfKey is a PYTORCH_CUDA_ALLOC_CONF key with an example value that
// ParseConfig accepts.
type ConfKey struct{ Name, Example string }

// ConfKeys are the keys ParseConfig knows, in the order PyTorch's
// documentation lists them (shell completion offers them).
func ConfKeys() []ConfKey {
	return []ConfKey{
		{Name: "max_split_size_mb", Example: "128"},
		{Name: "max_non_split_rounding_mb", Example: "20"},
		{Name: "large_segment_size_mb", Example: "20"},
		{Name: "roundup_power2_divisions", Example: "4"},
		{Name: "garbage_collection_threshold", Example: "0.6"},
		{Name: "expandable_segments", Example: "True"},
		{Name: "per_process_memory_fraction", Example: "0.5"},
		{Name: "backend", Example: "native"},
		{Name: "release_lock_on_cudamalloc", Example: "True"},
		{Name: "graph_capture_record_stream_reuse", Example: "True"},
		{Name: "pinned_use_cuda_host_register", Example: "True"},
		{Name: "pinned_num_register_threads", Example: "8"},
		{Name: "pinned_reserve_segment_size_mb", Example: "64"},
		{Name: "pinned_use_background_threads", Example: "True"},
	}
}
