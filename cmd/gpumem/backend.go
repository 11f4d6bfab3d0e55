package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// applyBackend puts the allocator on the chosen device. "cuda" drives the
// first GPU through the driver API; "sim" (the default) the simulated card.
func applyBackend(cmd *cobra.Command, backend string, o *replay.Options) error {
	switch backend {
	case "sim", "":
		return nil
	case "cuda":
		if cmd.Flags().Changed("device-memory") {
			return usageError{errors.New("--device-memory is for the simulated device; --backend cuda uses the real card")}
		}
		o.Device = alloc.CUDA(0)
		return nil
	}
	return usageError{fmt.Errorf("--backend: unknown backend %q (want sim or cuda)", backend)}
}

// backendHint explains a failed CUDA backend.
func backendErr(err error) error {
	if errors.Is(err, alloc.ErrNoCUDA) {
		return withHint(err, "without a GPU, leave out --backend cuda to use the simulated device")
	}
	return err
}
