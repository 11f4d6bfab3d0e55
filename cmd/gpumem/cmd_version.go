package main

import (
	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/version"
)

func newVersionCmd(a *app) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print gpumem's version, VCS revision and Go version",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return output.VersionFormats.Render(a.stdout, format, version.Get(), output.Options{})
		},
	}
	outputFlag(cmd, &format, output.VersionFormats)
	return cmd
}
