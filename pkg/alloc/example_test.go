package alloc_test

import (
	"fmt"

	"github.com/gpumem/gpumem/pkg/alloc"
)

func Example() {
	conf, err := alloc.ParseConfig("max_split_size_mb:80")
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err := alloc.New(alloc.Options{Config: conf, Device: alloc.Sim(0)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()

	// A 3000-byte tensor, a 5 MiB one, then the first is freed: one 2 MiB
	// small segment and one 20 MiB large segment are reserved.
	res, err := a.Run([]alloc.Op{
		{Kind: alloc.OpAlloc, ID: 1, Size: 3000},
		{Kind: alloc.OpAlloc, ID: 2, Size: 5 << 20},
		{Kind: alloc.OpFree, ID: 1},
	}, 0, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	s := a.Stats()
	fmt.Println("ops done:", res.Done)
	fmt.Println("allocated:", s.AllocatedBytes[alloc.All].Current)
	fmt.Println("reserved:", s.ReservedBytes[alloc.All].Current)
	fmt.Println("segments:", s.Segment[alloc.All].Current)
	fmt.Println("max_split_size:", s.Map()["max_split_size"])
	// Output:
	// ops done: 3
	// allocated: 5242880
	// reserved: 23068672
	// segments: 2
	// max_split_size: 83886080
}
