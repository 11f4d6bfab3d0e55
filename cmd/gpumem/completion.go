package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/workload"
)

// Shell completion: cobra's "gpumem completion bash|zsh|fish|powershell"
// writes the scripts; these functions complete the values of the flags
// whose values are names gpumem knows.

// allocConfKeys are the PYTORCH_CUDA_ALLOC_CONF keys, each with a value
// that alloc.ParseConfig accepts (a test checks it), in the order
// PyTorch's documentation lists them.
var allocConfKeys = [][2]string{
	{"max_split_size_mb", "128"},
	{"max_non_split_rounding_mb", "20"},
	{"large_segment_size_mb", "20"},
	{"roundup_power2_divisions", "4"},
	{"garbage_collection_threshold", "0.6"},
	{"expandable_segments", "True"},
	{"per_process_memory_fraction", "0.5"},
	{"backend", "native"},
	{"release_lock_on_cudamalloc", "True"},
	{"graph_capture_record_stream_reuse", "True"},
	{"pinned_use_cuda_host_register", "True"},
	{"pinned_num_register_threads", "8"},
	{"pinned_reserve_segment_size_mb", "64"},
	{"pinned_use_background_threads", "True"},
}

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
	for _, kv := range allocConfKeys {
		if strings.HasPrefix(kv[0], last) {
			out = append(out, done+kv[0]+":")
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
