// Package version tells which gpumem this is: the module version, the VCS
// revision and time it was built from, and the Go version, as the Go
// toolchain stamped them into the binary.
package version

import (
	"fmt"
	"runtime/debug"
)

// Info describes a build of gpumem.
type Info struct {
	Version  string `json:"version"`            // module version, "(devel)" for a source build
	Revision string `json:"revision,omitempty"` // VCS revision, when built in a checkout
	Time     string `json:"time,omitempty"`     // the revision's commit time
	Modified bool   `json:"modified,omitempty"` // the checkout had uncommitted changes
	Go       string `json:"go"`
}

// Get reads the build information of the running binary.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", Go: "unknown"}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo extracts Info from bi.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, Go: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Short is the version with the revision's first 12 characters, for a
// report's header: "v1.2.0", "(devel) 1a2b3c4d5e6f-dirty".
func (in Info) Short() string {
	s := in.Version
	if in.Revision != "" {
		r := in.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		s += " " + r
		if in.Modified {
			s += "-dirty"
		}
	}
	return s
}

// String is the one-line form gpumem --version prints.
func (in Info) String() string {
	s := "gpumem " + in.Version
	if in.Revision != "" {
		s += fmt.Sprintf(" (revision %s", in.Revision)
		if in.Modified {
			s += ", modified"
		}
		if in.Time != "" {
			s += ", " + in.Time
		}
		s += ")"
	}
	return s + " built with " + in.Go
}
