package output

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/version"
)

// VersionFormats are the formats of `gpumem version`.
var VersionFormats = &Registry[version.Info]{Kind: "The version of `gpumem version`", Formats: []Format[version.Info]{
	{Text, "one line: version, VCS revision and time, Go version (version.go)",
		RenderFunc[version.Info](func(w io.Writer, v version.Info, _ Options) error {
			_, err := fmt.Fprintln(w, v.String())
			return err
		})},
	{JSON, "the same fields as an object, after schema_version and generator (version.go)",
		RenderFunc[version.Info](func(w io.Writer, v version.Info, _ Options) error {
			return writeJSON(w, VersionJSON{stamp(), v}, true)
		})},
}}

// VersionJSON is the document of `gpumem version -o json`.
type VersionJSON struct {
	Stamp
	version.Info
}
