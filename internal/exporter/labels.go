package exporter

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// maxLabel bounds a label value, in bytes.
const maxLabel = 256

// labelValue makes s a valid label value whatever it came from (a process
// name NVML truncated inside a multi-byte character, a spool record): bytes
// that are not UTF-8 become U+FFFD, and it is cut to maxLabel bytes at a
// character boundary.
func labelValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxLabel {
		return s
	}
	cut := maxLabel
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// emit sends one sample with its label values made valid. A sample the
// client library still refuses is left out: one bad series must never
// panic the collector or take the others with it.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	valid := make([]string, len(labels))
	for i, l := range labels {
		valid[i] = labelValue(l)
	}
	if m, err := prometheus.NewConstMetric(d, t, v, valid...); err == nil {
		ch <- m
	}
}
