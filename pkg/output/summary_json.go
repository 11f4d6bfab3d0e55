package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gpumem/gpumem/pkg/probe"
	"github.com/gpumem/gpumem/pkg/report"
)

// summaryJSON writes {"devices": ..., "allocator": ...}: the probe's JSON
// and the replay report's JSON in one document.
func summaryJSON(w io.Writer, s *Summary, _ Options) error {
	sys := s.System
	if sys == nil {
		sys = &probe.System{GPUs: []probe.GPU{}}
	}
	var devices, allocator bytes.Buffer
	if err := probe.WriteJSON(&devices, sys); err != nil {
		return err
	}
	if err := report.JSON(&allocator, s.Allocator); err != nil {
		return err
	}
	doc := map[string]json.RawMessage{"devices": devices.Bytes(), "allocator": allocator.Bytes()}
	if s.Ranks != nil {
		var ranks bytes.Buffer
		if err := ranksJSON(&ranks, s.Ranks, Options{}); err != nil {
			return err
		}
		doc["ranks"] = ranks.Bytes()
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}
