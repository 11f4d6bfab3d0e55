package budget

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// jsonKeys lists the json names of t's fields, embedded structs' too.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			keys = append(keys, jsonKeys(f.Type)...)
			continue
		}
		keys = append(keys, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	slices.Sort(keys)
	return keys
}

// The schema's types have exactly the keys the parser knows.
func TestFileDocKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  any
		keys []string
	}{
		{"top level", FileDoc{}, fileKeys},
		{"defaults", SettingDoc{}, settingKeysList},
		{"case", CaseDoc{}, caseKeys},
	} {
		want := slices.Sorted(slices.Values(c.keys))
		if got := jsonKeys(reflect.TypeOf(c.doc)); !slices.Equal(got, want) {
			t.Errorf("%s: schema keys %v, parser keys %v", c.name, got, want)
		}
	}
}
