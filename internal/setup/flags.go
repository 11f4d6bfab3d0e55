package setup

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// Flags are a Setup as the command line spells it.
type Flags struct {
	AllocConf      string // PYTORCH_CUDA_ALLOC_CONF syntax
	AllocConfGiven bool   // use AllocConf, not the trace's recorded settings
	Policy         string // "" = pytorch
	DeviceMemory   string // a size with a unit; "" = none
	Fraction       float64
	Backend        string // "" = sim
	// IgnoreAddresses: see Setup.
	IgnoreAddresses bool
}

// Parse reads the flags into a Setup and checks it; an error names the
// flag (*Error).
func (f Flags) Parse() (Setup, error) {
	s, err := f.Read()
	if err != nil {
		return s, err
	}
	return s, s.Check()
}

// Read is Parse without Check: for a command whose card comes from
// elsewhere (fragcheck's --must-fit), which checks the Setup once it has
// its card.
func (f Flags) Read() (Setup, error) {
	var s Setup
	if f.AllocConfGiven {
		c, err := alloc.ParseConfig(f.AllocConf)
		if err != nil {
			return s, &Error{Flag: "alloc-conf", Err: err}
		}
		s.Config = &c
	}
	if f.Policy != "" {
		p, err := alloc.ParsePolicy(f.Policy)
		if err != nil {
			return s, &Error{Flag: "policy", Err: err}
		}
		s.Policy = p
	}
	if f.DeviceMemory != "" {
		n, err := units.ParseSize(f.DeviceMemory)
		if err == nil && n == 0 {
			err = fmt.Errorf("invalid size %q: zero bytes", f.DeviceMemory)
		}
		if err != nil {
			return s, &Error{Flag: "device-memory", Err: err}
		}
		s.Card = n
	}
	b, err := ParseBackend(f.Backend)
	if err != nil {
		return s, &Error{Flag: "backend", Err: err}
	}
	s.Backend, s.Fraction, s.IgnoreAddresses = b, f.Fraction, f.IgnoreAddresses
	return s, nil
}

// CompleteAllocConf completes the key after the last comma of a
// PYTORCH_CUDA_ALLOC_CONF being typed: "expandable_s" gives
// "expandable_segments:", "max_split_size_mb:128,g" gives
// "max_split_size_mb:128,garbage_collection_threshold:"; nothing once a
// value is being typed.
func CompleteAllocConf(typed string) []string {
	done, last := "", typed
	if i := strings.LastIndexByte(typed, ','); i >= 0 {
		done, last = typed[:i+1], typed[i+1:]
	}
	if strings.Contains(last, ":") {
		return nil
	}
	var out []string
	for _, k := range alloc.ConfKeys() {
		if strings.HasPrefix(k.Name, last) {
			out = append(out, done+k.Name+":")
		}
	}
	return out
}

// PolicyNames are the names --policy takes.
func PolicyNames() []string {
	var out []string
	for _, p := range alloc.PolicyInfos() {
		out = append(out, string(p.Name))
	}
	return out
}
