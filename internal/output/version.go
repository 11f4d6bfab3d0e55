package output

import (
	"encoding/json"
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
	{JSON, "the same fields as an object (version.go)",
		RenderFunc[version.Info](func(w io.Writer, v version.Info, _ Options) error {
			out, err := json.MarshalIndent(v, "", "  ")
			if err == nil {
				_, err = fmt.Fprintf(w, "%s\n", out)
			}
			return err
		})},
}}
