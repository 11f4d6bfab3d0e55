package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/workload"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// Shell completion: cobra's "gpumem completion bash|zsh|fish|powershell"
// writes the scripts; these functions complete the values of the flags
// whose values are names gpumem knows.

// completeAllocConf completes the key after the last comma: "expandable_s"
// offers "expandable_segments:", "max_split_size_mb:128,g" offers
// "max_split_size_mb:128,garbage_collection_threshold:".
func completeAllocConf(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	done, last := "", toComplete
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		done, last = toComplete[:i+1], toComplete[i+1:]
	}
	var out []string
	if strings.Contains(last, ":") {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	for _, k := range alloc.ConfKeys() {
		if strings.HasPrefix(k.Name, last) {
			out = append(out, done+k.Name+":")
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

func completePolicy(_ *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, p := range alloc.PolicyInfos() {
		out = append(out, string(p.Name))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeWorkload offers the built-in workloads, then script files.
func completeWorkload(_ *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, b := range workload.Builtins() {
		out = append(out, b.Name+"\t"+firstLine(b.Description))
	}
	return out, cobra.ShellCompDirectiveDefault
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
