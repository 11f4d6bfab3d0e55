// Command gpumem is a GPU memory profiler: it replays allocation traces and
// workloads through a replica of PyTorch's CUDA caching allocator and tells
// what memory they need, how fragmented it gets, and why they run out.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
