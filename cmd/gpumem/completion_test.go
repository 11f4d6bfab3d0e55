package main

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// Every key completion offers is one the allocator's parser knows.
func TestAllocConfKeysParse(t *testing.T) {
	for _, kv := range allocConfKeys {
		if _, err := alloc.ParseConfig(kv[0] + ":" + kv[1]); err != nil {
			t.Errorf("%s:%s: %v", kv[0], kv[1], err)
		}
	}
	if _, err := alloc.ParseConfig("no_such_key:1"); err == nil || !strings.Contains(err.Error(), "Unrecognized key") {
		t.Errorf("an unknown key parses: %v", err)
	}
}
