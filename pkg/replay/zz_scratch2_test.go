package replay

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

func TestScratchOps(t *testing.T) {
	for _, f := range []string{"multistream.pickle", "seed_frag.pickle"} {
		snap, _ := trace.ReadPickleFile(filepath.Join(fixtures, f))
		p := FromSnapshot(snap, 0)
		s := ""
		for _, op := range p.Ops {
			switch op.Kind {
			case alloc.OpAlloc:
				s += fmt.Sprintf("A%d:%d/%x ", op.ID, op.Size>>10, op.Stream)
			default:
				s += fmt.Sprintf("%s%d ", op.Kind, op.ID)
			}
		}
		t.Log(f, s)
	}
}
