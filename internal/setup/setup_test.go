package setup

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// Every setting's error names its flag, whichever command parsed it.
func TestFlagsErrors(t *testing.T) {
	for _, tc := range []struct {
		f    Flags
		want string
	}{
		{Flags{Policy: "best"}, `--policy: unknown policy "best"`},
		{Flags{AllocConf: "bogus:1", AllocConfGiven: true}, "--alloc-conf: "},
		{Flags{DeviceMemory: "lots"}, `--device-memory: invalid size "lots"`},
		{Flags{DeviceMemory: "0GiB"}, `--device-memory: invalid size "0GiB": zero bytes`},
		{Flags{Fraction: 0.5}, "--memory-fraction needs --device-memory"},
		{Flags{DeviceMemory: "8GiB", Fraction: 2}, "--memory-fraction: 2 is not in (0, 1]"},
		{Flags{DeviceMemory: "8GiB", Fraction: -0.5}, "--memory-fraction: -0.5 is not in (0, 1]"},
		{Flags{DeviceMemory: "8GiB", Fraction: math.NaN()}, "--memory-fraction: NaN is not in (0, 1]"},
		{Flags{DeviceMemory: "8GiB", Fraction: math.Inf(1)}, "--memory-fraction: +Inf is not in (0, 1]"},
		{Flags{Backend: "cuda", IgnoreAddresses: true}, "--ignore-addresses: is for the simulated device"},
		{Flags{DeviceMemory: "8GiB", Backend: "cuda"}, "--device-memory: is for the simulated device"},
		{Flags{Backend: "tpu"}, `--backend: unknown backend "tpu"`},
	} {
		_, err := tc.f.Parse()
		var se *Error
		if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error starting %q", tc.f, err, tc.want)
		}
	}
	if _, err := (Flags{Fraction: 0.5}).Read(); err != nil {
		t.Errorf("Read checks the card: %v", err)
	}
	if _, err := (Flags{Backend: "cuda", Fraction: 0.5}).Parse(); err != nil {
		t.Errorf("a fraction of the real card: %v", err)
	}
}

// Options is the one resolution: the setup's settings over the recorded
// ones, the policy, the card, and always the recorded cap.
func TestOptions(t *testing.T) {
	rec := alloc.DefaultConfig()
	rec.ExpandableSegments = true
	o, err := Setup{Policy: alloc.PolicyNoCache, Card: 8 << 30, Fraction: 0.5}.Options(&rec)
	if err != nil || !o.Config.ExpandableSegments || o.Config.Policy != alloc.PolicyNoCache ||
		o.DeviceTotal != 8<<30 || o.Device == nil || o.MemoryFraction != 0.5 || !o.RecordedCap {
		t.Errorf("%+v, %v", o, err)
	}
	def := alloc.DefaultConfig()
	if o, _ = (Setup{Config: &def}).Options(&rec); o.Config.ExpandableSegments {
		t.Error("a setup's own config kept the recorded settings")
	}
	if o, _ = (Setup{}).Options(nil); o.Device != nil || o.DeviceTotal != 0 || !o.RecordedCap {
		t.Errorf("no card: %+v, want an unlimited device under the recorded cap", o)
	}
}
