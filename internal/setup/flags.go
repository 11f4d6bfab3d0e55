package setup

import (
	"fmt"

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
