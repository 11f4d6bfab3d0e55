package sweep

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

func TestParseSetting(t *testing.T) {
	for _, c := range []struct {
		in, label, env string
		settable, def  bool
	}{
		{"", "defaults", "", true, true},
		{" defaults ", "defaults", "", true, true},
		{"pytorch", "defaults", "", true, true},
		{"nocache", "nocache", "", false, true}, // default knobs, another policy
		{"expandable_segments:True", "expandable_segments:True", "expandable_segments:True", true, false},
		{"expandable_segments:False", "expandable_segments:False", "", true, true},
		{"max_split_size_mb:256,roundup_power2_divisions:[256:1,>:4]", "max_split_size_mb:256,roundup_power2_divisions:[256:1,>:4]",
			"max_split_size_mb:256,roundup_power2_divisions:[256:1,>:4]", true, false},
		{"backend:cudaMallocAsync", "backend:cudaMallocAsync", "backend:cudaMallocAsync", false, false},
	} {
		s, err := ParseSetting(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if s.Label != c.label || s.Env() != c.env || s.Settable() != c.settable {
			t.Errorf("%q: label %q env %q settable %v, want %q %q %v", c.in, s.Label, s.Env(), s.Settable(), c.label, c.env, c.settable)
		}
		// nocache has the default knobs but is not the defaults
		if got := s.IsDefault() && s.Settable(); got != (c.def && c.settable) {
			t.Errorf("%q: default %v", c.in, got)
		}
	}
	if s := mustSetting(t, "max_split_size_mb:128"); s.Config.MaxSplitSize != 128<<20 {
		t.Errorf("max_split_size_mb:128 parsed to %d", s.Config.MaxSplitSize)
	}
	if s := mustSetting(t, "nocache"); s.Config.Policy != alloc.PolicyNoCache {
		t.Errorf("nocache: policy %q", s.Config.Policy)
	}
	for _, c := range []struct{ in, want string }{
		{"max_split_size_mb:1", `setting "max_split_size_mb:1": CachingAllocator option max_split_size_mb too small`},
		{"bogus:1", `setting "bogus:1": Unrecognized key 'bogus'`},
		{"expandable_segments", `setting "expandable_segments"`},
	} {
		if _, err := ParseSetting(c.in); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestParseGrid(t *testing.T) {
	g, err := ParseGrid(" defaults; expandable_segments:True ;;max_split_size_mb:256,roundup_power2_divisions:4;nocache;")
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, s := range g {
		labels = append(labels, s.Label)
	}
	want := "defaults|expandable_segments:True|max_split_size_mb:256,roundup_power2_divisions:4|nocache"
	if got := strings.Join(labels, "|"); got != want {
		t.Errorf("labels %q, want %q", got, want)
	}
	for _, c := range []struct{ in, want string }{
		{"", "no settings"},
		{" ; ;", "no settings"},
		{"defaults;pytorch", `setting "defaults" given twice`},
		{"expandable_segments:True;expandable_segments:Maybe", `setting "expandable_segments:Maybe"`},
	} {
		if _, err := ParseGrid(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestDefaultGrid(t *testing.T) {
	for _, capped := range []bool{false, true} {
		g := DefaultGrid(capped)
		seen := map[string]bool{}
		policies := map[alloc.Policy]bool{}
		for _, s := range g {
			if seen[s.Label] {
				t.Errorf("%s twice", s.Label)
			}
			seen[s.Label] = true
			policies[s.Config.Policy] = true
			if s.Label != DefaultsLabel && s.Label != string(s.Config.Policy) && s.Config.Text != s.Label {
				t.Errorf("%s: text %q", s.Label, s.Config.Text)
			}
		}
		for _, p := range alloc.Policies() {
			if !policies[p] {
				t.Errorf("capped %v: policy %s missing", capped, p)
			}
		}
		for _, l := range []string{"defaults", "expandable_segments:True", "roundup_power2_divisions:4", "max_split_size_mb:256"} {
			if !seen[l] {
				t.Errorf("capped %v: %s missing", capped, l)
			}
		}
		if got := seen["garbage_collection_threshold:0.8"]; got != capped {
			t.Errorf("capped %v: garbage collection in the grid %v", capped, got)
		}
	}
}

func FuzzParseGrid(f *testing.F) {
	for _, s := range []string{
		"defaults;expandable_segments:True",
		"max_split_size_mb:256,roundup_power2_divisions:[256:1,>:4];nocache",
		"garbage_collection_threshold:0.8;;",
		"roundup_power2_divisions:[",
		"per_process_memory_fraction:0.5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGrid(s)
		if err != nil {
			if len(g) != 0 {
				t.Fatalf("%q: error %v with %d settings", s, err, len(g))
			}
			return
		}
		seen := map[string]bool{}
		for _, x := range g {
			if x.Label == "" || seen[x.Label] {
				t.Fatalf("%q: label %q empty or repeated", s, x.Label)
			}
			seen[x.Label] = true
			// A setting's label parses back to the same setting.
			y, err := ParseSetting(x.Label)
			if err != nil || y.Config != x.Config {
				t.Fatalf("%q: label %q does not parse back: %v", s, x.Label, err)
			}
			if x.Settable() && !x.IsDefault() && x.Env() == "" {
				t.Fatalf("%q: settable %q without an env value", s, x.Label)
			}
		}
	})
}
