package units

import (
	"strings"
	"testing"
)

func TestParseSizeForms(t *testing.T) {
	const gib = 1 << 30
	for s, want := range map[string]uint64{
		"16G": 16 * gib, "16Gi": 16 * gib, "16GiB": 16 * gib, "16gib": 16 * gib, "16 g": 16 * gib,
		"16GB": 16e9, "16gB": 16e9, "21.5 GB": 21.5e9, "512M": 512 << 20, "512MiB": 512 << 20,
		"2K": 2048, "1T": 1 << 40, "1073741824": gib, "100B": 100, "1e3": 1000,
	} {
		got, err := ParseSize(s)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "lots", "GiB", "-1G", "+1G", "0x1p3", "Inf", "NaN", "16X", "1e400G", "16gb", "16Gb"} {
		_, err := ParseSize(s)
		if err == nil {
			t.Errorf("ParseSize(%q) parsed", s)
		}
	}
	_, err := ParseSize("lots")
	if want := `invalid size "lots": want bytes or a number with a unit: 16G, 16Gi or 16GiB (binary, any case) or 16GB (decimal); K, M, G, T`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestSizeNote(t *testing.T) {
	if got, want := SizeNote("80GB"), "80GB is 80,000,000,000 bytes (decimal); a card of 80 GiB has 85,899,345,920: write 80GiB for it"; got != want {
		t.Errorf("SizeNote(80GB) = %q, want %q", got, want)
	}
	if !strings.Contains(SizeNote("24 GB"), "write 24GiB") {
		t.Errorf("SizeNote(24 GB) = %q", SizeNote("24 GB"))
	}
	for _, s := range []string{"80GiB", "80G", "50GB", "85899345920", "lots"} {
		if n := SizeNote(s); n != "" {
			t.Errorf("SizeNote(%q) = %q, want none", s, n)
		}
	}
}

func TestFlagValues(t *testing.T) {
	var r Ratio
	if err := r.Set("25%"); err != nil || float64(r) != 0.25 || r.String() != "25.0%" || r.Type() != "ratio" {
		t.Errorf("ratio 25%%: %v %v %q", err, float64(r), r.String())
	}
	if err := r.Set("2.5"); err == nil {
		t.Error("ratio 2.5 accepted")
	}
	var z Size
	if err := z.Set("20GiB"); err != nil || uint64(z) != 20<<30 || z.String() != "21474836480" {
		t.Errorf("size 20GiB: %v %d %q", err, uint64(z), z.String())
	}
	if err := z.Set("0"); err == nil {
		t.Error("size 0 accepted")
	}
}
