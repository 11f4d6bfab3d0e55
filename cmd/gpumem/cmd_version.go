package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/version"
)

// newVersionCmd is "gpumem version": the same line as --version, or with
// -o json the fields one by one, for bug reports and scripts.
func newVersionCmd(a *app) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print gpumem's version, VCS revision and Go version",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := version.Get()
			switch format {
			case "text":
				_, err := fmt.Fprintln(a.stdout, in.String())
				return err
			case "json":
				out, err := json.MarshalIndent(in, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s\n", out)
				return err
			}
			return usageError{fmt.Errorf("--output: unknown format %q (want text or json)", format)}
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "text", "output format: text or json")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
