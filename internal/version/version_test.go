package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/gpumem/gpumem", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	in := FromBuildInfo(bi)
	if want := "gpumem v0.3.0 (revision 0123456789abcdef0123, modified, 2026-11-30T10:00:00Z) built with go1.26.0"; in.String() != want {
		t.Errorf("String() = %q, want %q", in.String(), want)
	}
	if want := "v0.3.0 0123456789ab-dirty"; in.Short() != want {
		t.Errorf("Short() = %q, want %q", in.Short(), want)
	}
	plain := FromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.0"})
	if want := "gpumem (devel) built with go1.26.0"; plain.String() != want {
		t.Errorf("String() = %q, want %q", plain.String(), want)
	}
}
