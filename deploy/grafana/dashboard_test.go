// Package grafana holds the Grafana dashboard of gpumem's exporter; its
// test checks the dashboard against Grafana's own schema.
package grafana

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

const dashboardFile = "gpumem-dashboard.json"

// check reads b as a Grafana dashboard the way the foundation SDK's
// generated types do, strictly: a missing required field, a field of the
// wrong type or one the schema does not have is an error, down to the
// panels' options, field configs and Prometheus queries. Then it checks
// the schema's constraints (a panel at most 24 wide, ...), and that every
// panel is of a type Grafana has (the SDK takes an unknown type's options
// as they are).
func check(b []byte) error {
	var d dashboard.Dashboard
	if err := strict(d.UnmarshalJSONStrict(b)); err != nil {
		return err
	}
	if err := d.Validate(); err != nil {
		return err
	}
	// The SDK reads the panels but leaves them out of d (it takes its own
	// empty error list for an error), so they are read again one by one.
	var raw struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for i, rp := range raw.Panels {
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(rp, &head); err != nil {
			return err
		}
		var err error
		if head.Type == "row" {
			var r dashboard.RowPanel
			if err = strict(r.UnmarshalJSONStrict(rp)); err == nil {
				err = r.Validate()
			}
		} else if _, ok := cog.ConfigForPanelcfgVariant(head.Type); !ok {
			err = fmt.Errorf("unknown panel type %q", head.Type)
		} else {
			var p dashboard.Panel
			if err = strict(p.UnmarshalJSONStrict(rp)); err == nil {
				err = p.Validate()
			}
		}
		if err != nil {
			return fmt.Errorf("panels[%d]: %w", i, err)
		}
	}
	return nil
}

// strict is err, or nil for the SDK's empty error list, which it returns
// as a non-nil error.
func strict(err error) error {
	if be := (cog.BuildErrors)(nil); errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

func TestMain(m *testing.M) {
	plugins.RegisterDefaultPlugins() // the panel and query types, for the strict reading
	os.Exit(m.Run())
}

func TestDashboardMatchesGrafanaSchema(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := check(b); err != nil {
		t.Errorf("%s:\n%v", dashboardFile, err)
	}
}

// The check is strict enough to catch a broken dashboard: each copy with
// one mistake fails.
func TestBrokenDashboardsFail(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	panel := func(d map[string]any, i int) map[string]any { return d["panels"].([]any)[i].(map[string]any) }
	defaults := func(d map[string]any) map[string]any {
		return panel(d, 1)["fieldConfig"].(map[string]any)["defaults"].(map[string]any)
	}
	for name, mutate := range map[string]func(d map[string]any){
		"a panel field Grafana does not have": func(d map[string]any) { panel(d, 1)["colour"] = "red" },
		"an unknown panel type":               func(d map[string]any) { panel(d, 1)["type"] = "timeserie" },
		"a grid size as a string":             func(d map[string]any) { panel(d, 1)["gridPos"].(map[string]any)["h"] = "8" },
		"a panel wider than the grid":         func(d map[string]any) { panel(d, 1)["gridPos"].(map[string]any)["w"] = 30 },
		"a misspelt panel option":             func(d map[string]any) { panel(d, 1)["options"].(map[string]any)["legnd"] = true },
		"a misspelt series setting":           func(d map[string]any) { defaults(d)["custom"] = map[string]any{"lineWidht": 2} },
		"a unit as a number":                  func(d map[string]any) { defaults(d)["unit"] = 3 },
		"a misspelt prometheus query field":   func(d map[string]any) { panel(d, 1)["targets"].([]any)[0].(map[string]any)["exp"] = "up" },
		"a row field Grafana does not have":   func(d map[string]any) { panel(d, 0)["folded"] = true },
		"a legend without showLegend": func(d map[string]any) {
			delete(panel(d, 1)["options"].(map[string]any)["legend"].(map[string]any), "showLegend")
		},
		"no schemaVersion": func(d map[string]any) { delete(d, "schemaVersion") },
	} {
		var d map[string]any
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		mutate(d)
		broken, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if check(broken) == nil {
			t.Errorf("%s: passes the check", name)
		}
	}
}
