package estimate

import "testing"

func TestCards(t *testing.T) {
	h200, err := NewSettings("h200", "", "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// measured on the H200: mem_get_info's total, less the CUDA context
	if c := h200.Card; !c.Measured || c.Total != 150109880320 || c.Capacity() != 150109880320-648871936 || c.Scratch != "h200" {
		t.Errorf("H200: %+v", c)
	}
	for name, gib := range map[string]uint64{"H100-80GB": 80, "h100_pcie": 80, "H100-NVL": 94, "A100-40GB": 40,
		"A100-80GB": 80, "L4": 24, "L40S": 48, "A10G": 24, "RTX-4090": 24, "B200": 180} {
		s, err := NewSettings(name, "", "", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := s.Card
		if c.Measured || c.Total != gib<<30 || c.Capacity() != gib<<30-h200Context || c.Scratch != "" {
			t.Errorf("%s: %+v", name, c)
		}
	}
	// a size: all of it usable
	s, err := NewSettings("H100-80GB", "24GiB", "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Card.Total != 24<<30 || s.Card.Capacity() != 24<<30 {
		t.Errorf("--device-memory 24GiB: %+v", s.Card)
	}
}
