package main

import (
	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/workload"
)

// Shell completion: cobra's "gpumem completion bash|zsh|fish|powershell"
// writes the scripts; these functions complete the values of the flags
// whose values are names gpumem knows.

func completeAllocConf(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return setup.CompleteAllocConf(toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

func completePolicy(_ *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	return setup.PolicyNames(), cobra.ShellCompDirectiveNoFileComp
}

// completeWorkload offers the built-in workloads, then script files.
func completeWorkload(_ *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	return workload.Completions(), cobra.ShellCompDirectiveDefault
}

// registerCompletions attaches the completion functions to every command
// that has the flags.
func registerCompletions(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for name, fn := range map[string]cobra.CompletionFunc{
			"alloc-conf": completeAllocConf, "policy": completePolicy, "workload": completeWorkload,
		} {
			if c.Flags().Lookup(name) != nil {
				c.RegisterFlagCompletionFunc(name, fn)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
