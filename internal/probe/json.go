package probe

import (
	"encoding/json"
	"errors"
	"io"
)

var errNilSystem = errors.New("probe: nil system")

// WriteJSON writes s as one indented JSON document with snake_case keys,
// byte counts as integers and empty lists as [] rather than null.
func WriteJSON(w io.Writer, s *System) error {
	if s == nil {
		return errNilSystem
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(ForJSON(s))
}

// ForJSON is a copy of s whose empty lists are [] rather than null in
// JSON; nil stays nil.
func ForJSON(s *System) *System {
	if s == nil {
		return nil
	}
	out := *s
	out.GPUs = make([]GPU, len(s.GPUs))
	for i, g := range s.GPUs {
		if g.Processes == nil {
			g.Processes = []Process{}
		}
		out.GPUs[i] = g
	}
	return &out
}
