package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// Every command that replays a trace under its recorded settings makes
// the same inferences from it (the cap, the pools, the out-of-memory
// errors the program survived, the recorded addresses): replay, sweep's
// recorded-settings row, fragcheck, diff and summary --trace give the
// same memory_stats for every recorded fixture.
func TestCommandsReplayAlike(t *testing.T) {
	files, _ := filepath.Glob(sweepFixture("*.pickle"))
	ddp, _ := filepath.Glob(sweepFixture("ddp/*.pickle"))
	files = append(files, ddp...)
	if len(files) < 10 {
		t.Fatalf("%d fixtures", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			var device []string
			if strings.Contains(f, "rank1") {
				device = []string{"--device", "1"}
			}
			stats := func(what string, args []string, pick func(doc map[string]any) any) map[string]any {
				t.Helper()
				out, errs, code := gm(t, append(append(args, device...), "-o", "json")...)
				if code > 1 {
					t.Fatalf("%s: exit %d: %s", what, code, errs)
				}
				var doc map[string]any
				if err := json.Unmarshal([]byte(out), &doc); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				m, ok := pick(doc).(map[string]any)
				if !ok || len(m) < 100 {
					t.Fatalf("%s: no memory_stats in %.300s", what, out)
				}
				return m
			}
			key := func(k string) func(map[string]any) any { return func(d map[string]any) any { return d[k] } }
			want := stats("replay", []string{"replay", f}, key("memory_stats"))
			got := map[string]map[string]any{
				"sweep": stats("sweep", []string{"sweep", f, "-j", "1"}, func(d map[string]any) any {
					rows, _ := d["rows"].([]any)
					for _, r := range rows {
						if row := r.(map[string]any); row["recorded"] == true {
							return row["memory_stats"]
						}
					}
					return nil
				}),
				"fragcheck": stats("fragcheck", []string{"fragcheck", f}, func(d map[string]any) any {
					cases, _ := d["cases"].([]any)
					return cases[0].(map[string]any)["memory_stats"]
				}),
				"diff": stats("diff", []string{"diff", f, f}, func(d map[string]any) any {
					return d["a"].(map[string]any)["memory_stats"]
				}),
			}
			if device == nil {
				got["summary --trace"] = stats("summary", []string{"summary", "--backend", "sim", "--trace", f}, func(d map[string]any) any {
					return d["allocator"].(map[string]any)["memory_stats"]
				})
			}
			for cmd, m := range got {
				for k, v := range want {
					if m[k] != v {
						t.Errorf("%s: %s = %v, replay gives %v", cmd, k, m[k], v)
					}
				}
			}
		})
	}
}
