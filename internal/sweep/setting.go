package sweep

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// DefaultsLabel is the label of PyTorch's default settings.
const DefaultsLabel = "defaults"

// A Setting is one allocator configuration of a sweep.
type Setting struct {
	// Label names the setting in reports: "defaults", the
	// PYTORCH_CUDA_ALLOC_CONF text, or a policy name.
	Label  string
	Config alloc.Config
	// Fraction is set_per_process_memory_fraction of each card; 0 leaves
	// the config's per_process_memory_fraction (usually none) in force.
	// It needs card sizes.
	Fraction float64
	// Recorded: these are the settings the trace was recorded with (its
	// row replays the recording; the other rows are what-ifs).
	Recorded bool
}

// Defaults returns PyTorch's default settings.
func Defaults() Setting {
	return Setting{Label: DefaultsLabel, Config: alloc.DefaultConfig()}
}

// IsDefault reports whether s runs PyTorch's defaults, whatever its label
// or memory fraction.
func (s Setting) IsDefault() bool {
	c := s.Config
	c.Text = ""
	return c == alloc.DefaultConfig()
}

// Settable reports whether a user can ask PyTorch for s through
// PYTORCH_CUDA_ALLOC_CONF: the native caching allocator, PyTorch's own
// policy. Other policies, and the cudaMallocAsync backend (accepted but not
// simulated), are not.
func (s Setting) Settable() bool {
	p := s.Config.Policy
	if p == "" {
		p = alloc.PolicyPyTorch
	}
	info, _ := p.Info()
	return info.Settable && s.Config.Backend == "native"
}

// Env is the PYTORCH_CUDA_ALLOC_CONF value that selects s; "" for the
// defaults (leave it unset). It is meaningful only when s is Settable.
func (s Setting) Env() string {
	if s.IsDefault() {
		return ""
	}
	return s.Config.Text
}

// ParseSetting reads one setting: "defaults" (or "" or "pytorch"), a
// policy name from [alloc.Policies] such as "nocache", or
// PYTORCH_CUDA_ALLOC_CONF text such as "expandable_segments:True".
func ParseSetting(text string) (Setting, error) {
	t := strings.TrimSpace(text)
	if t == "" || t == DefaultsLabel || t == string(alloc.PolicyPyTorch) {
		return Defaults(), nil
	}
	for _, p := range alloc.Policies() {
		if t == string(p) {
			c := alloc.DefaultConfig()
			c.Policy = p
			return Setting{Label: t, Config: c}, nil
		}
	}
	c, err := alloc.ParseConfig(t)
	if err != nil {
		return Setting{}, fmt.Errorf("setting %q: %w", t, err)
	}
	return Setting{Label: t, Config: c}, nil
}

// ParseGrid reads settings separated by semicolons, such as
// "defaults; expandable_segments:True; max_split_size_mb:256" (commas
// belong to PYTORCH_CUDA_ALLOC_CONF itself). Empty items are skipped; a
// label given twice is an error.
func ParseGrid(text string) ([]Setting, error) {
	var grid []Setting
	seen := map[string]bool{}
	for item := range strings.SplitSeq(text, ";") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		s, err := ParseSetting(item)
		if err != nil {
			return nil, err
		}
		if seen[s.Label] {
			return nil, fmt.Errorf("setting %q given twice", s.Label)
		}
		seen[s.Label] = true
		grid = append(grid, s)
	}
	if len(grid) == 0 {
		return nil, errors.New("no settings: want PYTORCH_CUDA_ALLOC_CONF values separated by ';'")
	}
	return grid, nil
}

// DefaultGrid is the grid a sweep runs when none is given: the defaults,
// expandable segments, several max_split_size_mb and
// roundup_power2_divisions values, and every policy other than PyTorch's.
// With capped (a memory fraction in force) it adds
// garbage_collection_threshold values, which act only under a cap.
func DefaultGrid(capped bool) []Setting {
	texts := []string{
		DefaultsLabel,
		"expandable_segments:True",
		"max_split_size_mb:64",
		"max_split_size_mb:128",
		"max_split_size_mb:256",
		"max_split_size_mb:512",
		"roundup_power2_divisions:2",
		"roundup_power2_divisions:4",
		"roundup_power2_divisions:8",
		"roundup_power2_divisions:16",
	}
	if capped {
		texts = append(texts,
			"garbage_collection_threshold:0.6",
			"garbage_collection_threshold:0.8",
			"expandable_segments:True,garbage_collection_threshold:0.8",
		)
	}
	for _, p := range alloc.PolicyInfos() {
		if !p.Settable { // the settable one is PyTorch's, the defaults above
			texts = append(texts, string(p.Name))
		}
	}
	grid := make([]Setting, len(texts))
	for i, t := range texts {
		s, err := ParseSetting(t)
		if err != nil {
			// The texts above are constants that ParseConfig accepts;
			// TestDefaultGrid holds them to it.
			panic(err)
		}
		grid[i] = s
	}
	return grid
}
