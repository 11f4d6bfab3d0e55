package suggest

import (
	"reflect"
	"testing"
)

func TestClosest(t *testing.T) {
	names := []string{"policy", "alloc-conf", "device-memory", "output", "html", "help"}
	for _, c := range []struct {
		typed string
		want  []string
	}{
		{"polcy", []string{"policy"}},
		{"POLICY", nil}, // the same name in other case is not a suggestion
		{"devce-memory", []string{"device-memory"}},
		{"device", []string{"device-memory"}}, // a prefix
		{"hepl", []string{"help", "html"}},    // nearest first, then by name
		{"xyzzy", nil},
		{"", nil},
	} {
		if got := Closest(c.typed, names); len(got)+len(c.want) > 0 && !reflect.DeepEqual(got, c.want) {
			t.Errorf("Closest(%q) = %q, want %q", c.typed, got, c.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"polcy", "policy", 1}, {"ab", "ba", 2}} {
		if got := distance(c.a, c.b); got != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

func TestUnknownFlag(t *testing.T) {
	for msg, want := range map[string]string{
		"unknown flag: --polcy":             "polcy",
		"unknown flag: --polcy=x":           "polcy",
		"unknown shorthand flag: 'q' in -q": "",
		"flag needs an argument: --policy":  "",
	} {
		got, ok := UnknownFlag(msg)
		if got != want || ok != (want != "") {
			t.Errorf("UnknownFlag(%q) = %q, %v", msg, got, ok)
		}
	}
}

func TestCobraCommands(t *testing.T) {
	msg := "unknown command \"repaly\" for \"gpumem\"\n\nDid you mean this?\n\treplay\n\n"
	if got := CobraCommands(msg); !reflect.DeepEqual(got, []string{"replay"}) {
		t.Errorf("got %q", got)
	}
}
