//go:build unix

package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// walkOpcodes steps over every opcode of a pickle and builds nothing: the
// floor a decoder of the same bytes could reach. It returns the number of
// opcodes up to STOP.
func walkOpcodes(data []byte) (int, error) {
	n := 0
	for i := 0; i < len(data); n++ {
		op := data[i]
		i++
		arg := 0 // argument bytes after the opcode
		switch op {
		case opStop:
			return n + 1, nil
		case 'K', 'h', 'q', 0x80, 0x82:
			arg = 1
		case 'M', 0x83:
			arg = 2
		case 'J', 'j', 'r', 0x84:
			arg = 4
		case 'G', 0x95:
			arg = 8
		case 0x8a, 0x8c, 'C', 'U': // 1-byte length, then that many bytes
			if i >= len(data) {
				return n, fmt.Errorf("truncated at %d", i)
			}
			arg = 1 + int(data[i])
		case 0x8b, 'X', 'B', 'T': // 4-byte length
			if i+4 > len(data) {
				return n, fmt.Errorf("truncated at %d", i)
			}
			arg = 4 + int(binary.LittleEndian.Uint32(data[i:]))
		case 0x8d, 0x8e, 0x96: // 8-byte length
			if i+8 > len(data) {
				return n, fmt.Errorf("truncated at %d", i)
			}
			arg = 8 + int(binary.LittleEndian.Uint64(data[i:]))
		case 'F', 'I', 'L', 'S', 'V', 'P', 'g', 'p', 'c', 'i': // text lines
			lines := 1
			if op == 'c' || op == 'i' {
				lines = 2
			}
			for range lines {
				k := bytes.IndexByte(data[i+arg:], '\n')
				if k < 0 {
					return n, fmt.Errorf("unterminated line at %d", i)
				}
				arg += k + 1
			}
		}
		if arg > len(data)-i {
			return n, fmt.Errorf("truncated at %d", i)
		}
		i += arg
	}
	return n, fmt.Errorf("no STOP opcode")
}

func TestWalkOpcodes(t *testing.T) {
	data, err := os.ReadFile("../../../testdata/pytorch/gpt2_varlen.pickle")
	if err != nil {
		t.Fatal(err)
	}
	n, err := walkOpcodes(data)
	if err != nil || n < 1000 {
		t.Fatalf("walked %d opcodes: %v", n, err)
	}
	if _, err := walkOpcodes(data[:len(data)/2]); err == nil {
		t.Error("half a pickle walked to its end")
	}
}

// BenchmarkOpcodeWalk maps the snapshot named by GPUMEM_BIG_TRACE and
// walks its opcodes, building nothing: the floor scripts/bench_decode.sh
// compares `gpumem replay --output json` with.
func BenchmarkOpcodeWalk(b *testing.B) {
	path := os.Getenv("GPUMEM_BIG_TRACE")
	if path == "" {
		b.Skip("set GPUMEM_BIG_TRACE to a snapshot pickle")
	}
	for b.Loop() {
		// mapped, not read into a fresh buffer: the floor should not pay
		// for zeroing and faulting in a heap the size of the file
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			b.Fatal(err)
		}
		data, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := walkOpcodes(data); err != nil {
			b.Fatal(err)
		}
		syscall.Munmap(data)
		f.Close()
	}
}
