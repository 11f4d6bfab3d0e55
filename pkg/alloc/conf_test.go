package alloc

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfigDefaults(t *testing.T) {
	for _, s := range []string{"", " ", ","} {
		c, err := ParseConfig(s)
		if err != nil {
			t.Fatalf("ParseConfig(%q): %v", s, err)
		}
		want := DefaultConfig()
		want.Text = s
		if c != want {
			t.Errorf("ParseConfig(%q) = %+v, want the defaults %+v", s, c, want)
		}
	}
	d := DefaultConfig()
	if d.Policy != PolicyPyTorch || d.MaxSplitSize != 0 || d.MaxNonSplitRounding != 20*mib ||
		d.LargeSegmentSize != 20*mib || d.RoundupPower2Divisions != [16]uint32{} ||
		d.GCThreshold != 0 || d.ExpandableSegments || d.MemoryFraction != 0 || d.Backend != "native" {
		t.Errorf("DefaultConfig() = %+v, not PyTorch's defaults", d)
	}
}

func TestParseConfigKeys(t *testing.T) {
	div := func(v uint32) (d [16]uint32) {
		for i := range d {
			d[i] = v
		}
		return d
	}
	tests := []struct {
		in    string
		check func(Config) bool
	}{
		{"max_split_size_mb:80", func(c Config) bool { return c.MaxSplitSize == 80*mib && c.MaxNonSplitRounding == 20*mib }},
		{"max_split_size_mb:20", func(c Config) bool { return c.MaxSplitSize == 20*mib }},
		{"max_non_split_rounding_mb:30", func(c Config) bool { return c.MaxNonSplitRounding == 30*mib && c.MaxSplitSize == 0 }},
		{"large_segment_size_mb:40", func(c Config) bool { return c.LargeSegmentSize == 40*mib && c.MaxNonSplitRounding == 40*mib }},
		{"large_segment_size_mb:11", func(c Config) bool { return c.LargeSegmentSize == 11*mib }},
		// large_segment_size_mb is read first, whatever its position.
		{"max_split_size_mb:40,large_segment_size_mb:40", func(c Config) bool { return c.MaxSplitSize == 40*mib && c.LargeSegmentSize == 40*mib }},
		{"large_segment_size_mb:40,max_non_split_rounding_mb:50", func(c Config) bool { return c.MaxNonSplitRounding == 50*mib }},
		{"roundup_power2_divisions:4", func(c Config) bool { return c.RoundupPower2Divisions == div(4) }},
		{"roundup_power2_divisions:1", func(c Config) bool { return c.RoundupPower2Divisions == div(1) }},
		{"roundup_power2_divisions:[>:16]", func(c Config) bool {
			return c.RoundupPower2Divisions[0] == 0 && c.RoundupPower2Divisions[1] == 16 && c.RoundupPower2Divisions[15] == 16
		}},
		{"garbage_collection_threshold:0.6", func(c Config) bool { return c.GCThreshold == 0.6 }},
		{"expandable_segments:True", func(c Config) bool { return c.ExpandableSegments }},
		{"expandable_segments:False", func(c Config) bool { return !c.ExpandableSegments }},
		{"per_process_memory_fraction:0.5", func(c Config) bool { return c.MemoryFraction == 0.5 }},
		{"per_process_memory_fraction:1", func(c Config) bool { return c.MemoryFraction == 1 }},
		{"per_process_memory_fraction:0", func(c Config) bool { return c.MemoryFraction == 0 }},
		{"backend:native", func(c Config) bool { return c.Backend == "native" }},
		{"backend:cudaMallocAsync", func(c Config) bool { return c.Backend == "cudaMallocAsync" }},
		{"release_lock_on_cudamalloc:True", func(c Config) bool { return c == withText(DefaultConfig(), "release_lock_on_cudamalloc:True") }},
		{"graph_capture_record_stream_reuse:False", func(c Config) bool { return c.Policy == PolicyPyTorch }},
		{"pinned_use_cuda_host_register:True,pinned_num_register_threads:8", func(c Config) bool { return c.Policy == PolicyPyTorch }},
		{"pinned_use_background_threads:True", func(c Config) bool { return c.Policy == PolicyPyTorch }},
		{"pinned_reserve_segment_size_mb:64", func(c Config) bool { return c.Policy == PolicyPyTorch }},
		{"pinned_num_register_threads:128", func(c Config) bool { return c.Policy == PolicyPyTorch }},
		// Whitespace is dropped, as PyTorch's tokenizer does.
		{" max_split_size_mb : 80 , expandable_segments : True ", func(c Config) bool { return c.MaxSplitSize == 80*mib && c.ExpandableSegments }},
		{"expandable_segments:True,garbage_collection_threshold:0.5,max_split_size_mb:100",
			func(c Config) bool { return c.ExpandableSegments && c.GCThreshold == 0.5 && c.MaxSplitSize == 100*mib }},
	}
	for _, tt := range tests {
		c, err := ParseConfig(tt.in)
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", tt.in, err)
			continue
		}
		if c.Text != tt.in {
			t.Errorf("ParseConfig(%q).Text = %q", tt.in, c.Text)
		}
		if !tt.check(c) {
			t.Errorf("ParseConfig(%q) = %+v", tt.in, c)
		}
	}
}

func withText(c Config, s string) Config {
	c.Text = s
	return c
}

func TestParseConfigDivisionsBrackets(t *testing.T) {
	tests := []struct {
		in   string
		want [16]uint32
	}{
		// spec §13.3: {"1":2, "2".."32":0, "64":4, "128".."32768":8}
		{"roundup_power2_divisions:[1:2,64:4,>:8]", [16]uint32{2, 0, 0, 0, 0, 0, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8}},
		// The first key also fills every lower interval.
		{"roundup_power2_divisions:[256:1,512:2,>:8]", [16]uint32{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8}},
		{"roundup_power2_divisions:[2:4]", [16]uint32{4, 4}},
		// Keys past 32 GiB clamp to the last interval.
		{"roundup_power2_divisions:[65536:2]", [16]uint32{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
		{"roundup_power2_divisions:[1:0,>:4],max_split_size_mb:40", [16]uint32{0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
	}
	for _, tt := range tests {
		c, err := ParseConfig(tt.in)
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", tt.in, err)
			continue
		}
		if c.RoundupPower2Divisions != tt.want {
			t.Errorf("ParseConfig(%q) divisions = %v, want %v", tt.in, c.RoundupPower2Divisions, tt.want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		in, want string // want: exact message, or a part of it after "~"
	}{
		{"bogus_option:1", "Unrecognized key 'bogus_option' in CUDA allocator config."},
		{"max_split_size_mb:10", "~must be >= 20"},
		{"max_split_size_mb:10", "CachingAllocator option max_split_size_mb too small, must be >= 20"},
		{"large_segment_size_mb:40,max_split_size_mb:30", "~must be >= 40"},
		{"max_split_size_mb:30,large_segment_size_mb:40", "~must be >= 40"},
		{"max_non_split_rounding_mb:19", "~max_non_split_rounding_mb too small, must be >= 20"},
		{"large_segment_size_mb:10", "~must be > 10 MB"},
		{"large_segment_size_mb:10", "CachingAllocator option large_segment_size_mb too small, must be > 10 MB"},
		{"garbage_collection_threshold:1.5", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"},
		{"garbage_collection_threshold:0", "~garbage_collect_threshold is invalid"},
		{"garbage_collection_threshold:1", "~garbage_collect_threshold is invalid"},
		{"garbage_collection_threshold:nan", "~expected a number"},
		{"expandable_segments:true", "~Expected 'True' or 'False'"},
		{"expandable_segments:1", "~but got '1'"},
		{"expandable_segments", "~Expected ':'"},
		{"max_split_size_mb", "~Expected ':'"},
		{"max_split_size_mb 80", "~Expected ':'"},
		{"max_split_size_mb:", "~Index out of bounds"},
		{"max_split_size_mb:-5", "~non-negative integer"},
		{"max_split_size_mb:80MB", "~non-negative integer"},
		{"max_split_size_mb:80:5", "~Expected ','"},
		{"max_split_size_mb:80 x", "~non-negative integer"},
		{"expandable_segments:True]", "~Expected ','"},
		{"expandable_segments:True,]", "~Expected ':'"},
		{"per_process_memory_fraction:1.5", "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"},
		{"backend:cuda", "Unknown allocator backend, options are native and cudaMallocAsync"},
		{"roundup_power2_divisions:3", "~divisions has to be power of 2"},
		{"roundup_power2_divisions:[1:3]", "~divisions has to be power of 2"},
		{"roundup_power2_divisions:[3:2]", "~intervals have to be power of 2"},
		{"roundup_power2_divisions:[1:2", "~Expected closing bracket"},
		{"roundup_power2_divisions:[1:2,", "~Expected closing bracket"},
		{"roundup_power2_divisions:[1;2]", "~Expected ':'"},
		{"pinned_num_register_threads:3", "Number of register threads has to be power of 2 and less than or equal to 128"},
		{"pinned_num_register_threads:256", "~power of 2"},
		{"pinned_reserve_segment_size_mb:0", "Pinned reserve segment size has to be greater than 0"},
		{"release_lock_on_cudamalloc:yes", "~Expected 'True' or 'False'"},
	}
	for _, tt := range tests {
		_, err := ParseConfig(tt.in)
		if err == nil {
			t.Errorf("ParseConfig(%q) succeeded, want an error", tt.in)
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("ParseConfig(%q) error %T is not a *ConfigError", tt.in, err)
		}
		if part, ok := strings.CutPrefix(tt.want, "~"); ok {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("ParseConfig(%q) = %q, want it to contain %q", tt.in, err, part)
			}
		} else if err.Error() != tt.want {
			t.Errorf("ParseConfig(%q) = %q, want %q", tt.in, err, tt.want)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range Policies() {
		got, err := ParsePolicy(string(p))
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %q, %v", p, got, err)
		}
	}
	_, err := ParsePolicy("PyTorch")
	if err == nil {
		t.Fatal("ParsePolicy(\"PyTorch\") succeeded; names are case-sensitive")
	}
	for _, p := range Policies() {
		if !strings.Contains(err.Error(), string(p)) {
			t.Errorf("ParsePolicy(\"PyTorch\") = %q, want it to list %q", err, p)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"", "max_split_size_mb:80", "roundup_power2_divisions:[1:2,64:4,>:8]",
		"roundup_power2_divisions:[256:1,512:2,>:8]", "expandable_segments:True,garbage_collection_threshold:0.5",
		"large_segment_size_mb:40,max_non_split_rounding_mb:60", "per_process_memory_fraction:0.25",
		"backend:cudaMallocAsync,release_lock_on_cudamalloc:True", "bogus_option:1", "max_split_size_mb:10",
		"roundup_power2_divisions:[", "a:b:c,,,:", "pinned_num_register_threads:64",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || err.Error() == "" {
				t.Fatalf("ParseConfig(%q) = %v, want a non-empty *ConfigError", s, err)
			}
			return
		}
		if c.Text != s {
			t.Fatalf("ParseConfig(%q).Text = %q", s, c.Text)
		}
		again, err := ParseConfig(c.Text)
		if err != nil {
			t.Fatalf("re-parsing %q: %v", c.Text, err)
		}
		if again != c {
			t.Fatalf("re-parsing %q gives %+v, first parse %+v", s, again, c)
		}
		if c.MaxSplitSize != 0 && c.MaxSplitSize < c.LargeSegmentSize {
			t.Fatalf("ParseConfig(%q) accepted max_split_size %d below large_segment_size %d", s, c.MaxSplitSize, c.LargeSegmentSize)
		}
		if c.LargeSegmentSize <= 10*mib || c.MaxNonSplitRounding < c.LargeSegmentSize {
			t.Fatalf("ParseConfig(%q) accepted large_segment_size %d, max_non_split_rounding %d", s, c.LargeSegmentSize, c.MaxNonSplitRounding)
		}
		for i, d := range c.RoundupPower2Divisions {
			if d != 0 && d&(d-1) != 0 {
				t.Fatalf("ParseConfig(%q): division %d of interval %d is not a power of 2", s, d, i)
			}
		}
		if c.GCThreshold < 0 || c.GCThreshold >= 1 || c.MemoryFraction < 0 || c.MemoryFraction > 1 {
			t.Fatalf("ParseConfig(%q) accepted gc %v, fraction %v", s, c.GCThreshold, c.MemoryFraction)
		}
	})
}

// Every key ConfKeys lists is one the parser knows.
func TestConfKeysParse(t *testing.T) {
	for _, k := range ConfKeys() {
		if _, err := ParseConfig(k.Name + ":" + k.Example); err != nil {
			t.Errorf("%s:%s: %v", k.Name, k.Example, err)
		}
	}
	if _, err := ParseConfig("no_such_key:1"); err == nil || !strings.Contains(err.Error(), "Unrecognized key") {
		t.Errorf("an unknown key parses: %v", err)
	}
}
