// Package prometheus holds the Prometheus alert rules of gpumem's exporter;
// its test checks them with promtool against a healthy and a failing spool
// (gpumem-alerts.test.yml).
package prometheus

import (
	"os/exec"
	"testing"
)

func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool (Debian: apt-get install prometheus); test/exporter_e2e.sh installs it")
	}
	for _, args := range [][]string{
		{"check", "rules", "gpumem-alerts.yml"},
		{"test", "rules", "gpumem-alerts.test.yml"},
	} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
