package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/record"
)

func newHooksCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "hooks [FILE]",
		Short:   "Write the Python module that records snapshots from inside a trainer",
		Long:    helpText("hooks"),
		Example: helpText("hooks.examples"),
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := append(args, "gpumem_hooks.py")[0] // FILE, or the default
			if path == "-" {
				_, err := a.stdout.Write(record.HooksPy)
				return err
			}
			if _, err := os.Lstat(path); err == nil && !force {
				return usageError{withHint(fmt.Errorf("%s: already exists", path), "--force replaces it")}
			}
			if err := fileout.Write(cmd.Context(), path, nil, func(w io.Writer) error { _, err := w.Write(record.HooksPy); return err }); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "gpumem: wrote %s; use it with: import gpumem_hooks\n", path)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace FILE if it exists (without it, an existing FILE is an error)")
	return cmd
}
