package pickle

import (
	"bytes"
	"testing"
)

// notEvent sends a dict to the general path only when its first key is
// a str other than "action"; anything it cannot tell leaves the dict to
// fastEvent.
func TestNotEvent(t *testing.T) {
	pad := bytes.Repeat([]byte{opNone}, 16)
	d := newDecoder(bytes.NewReader(nil), 0)
	d.op = 100
	if err := d.put(0, val{kStr, sState}); err != nil {
		t.Fatal(err)
	}
	if err := d.put(1, val{kStr, sAction}); err != nil {
		t.Fatal(err)
	}
	if err := d.put(2, val{kInt, 7}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"literal address", []byte{opMemoize, opMark, opShortBinUnicode, 7, 'a', 'd', 'd', 'r', 'e', 's', 's'}, true},
		{"literal action", []byte{opMemoize, opMark, opShortBinUnicode, 6, 'a', 'c', 't', 'i', 'o', 'n'}, false},
		{"fetched state", []byte{opBinPut, 9, opMark, opBinGet, 0}, true},
		{"fetched action", []byte{opLongBinPut, 9, 0, 0, 0, opMark, opLongBinGet, 1, 0, 0, 0}, false},
		{"fetched int", []byte{opMemoize, opMark, opBinGet, 2}, false},
		{"empty slot", []byte{opMemoize, opMark, opBinGet, 5}, false},
		{"no MARK", []byte{opMemoize, opShortBinUnicode, 4, 's', 'i', 'z', 'e'}, false},
		{"too short", []byte{opMemoize, opMark}, false},
	} {
		d.buf = append([]byte{opEmptyDict}, c.b...)
		if c.name != "too short" {
			d.buf = append(d.buf, pad...)
		}
		d.pos = 1
		if got := d.notEvent(); got != c.want {
			t.Errorf("%s: notEvent() = %v, want %v", c.name, got, c.want)
		}
	}
}
