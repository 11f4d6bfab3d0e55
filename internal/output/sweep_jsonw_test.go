package output

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// fillJSON sets every field reachable from v (a pointer) to a value drawn
// from r: a field added to the sweep's document later is then set here
// too, and the hand-written writer must write it.
func fillJSON(v reflect.Value, r *rand.Rand) {
	strs := []string{"", "defaults", "max_split_size_mb:64", "a<b", "c>d", "e&f", "quote \" back \\ tab \t nl \n", "é ü 日本 \u2028 \u2029", "\xff bad utf-8", "\x01"}
	floats := []float64{0, -0.0, 1, 0.5, 1e-7, 1e-6, 123456.789, 1e20, 1e21, 2.5e300, -3.25, 100 * 1.0 / 3}
	switch v.Kind() {
	case reflect.Pointer:
		if r.IntN(4) == 0 {
			v.SetZero()
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fillJSON(v.Elem(), r)
	case reflect.Struct:
		for i := range v.NumField() {
			fillJSON(v.Field(i), r)
		}
	case reflect.Slice:
		switch r.IntN(4) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		n := 1 + r.IntN(3)
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fillJSON(v.Index(i), r)
		}
	case reflect.Map:
		switch r.IntN(4) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
			return
		}
		v.Set(reflect.MakeMap(v.Type()))
		for range 1 + r.IntN(6) {
			k := reflect.New(v.Type().Key()).Elem()
			fillJSON(k, r)
			e := reflect.New(v.Type().Elem()).Elem()
			fillJSON(e, r)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		v.SetString(strs[r.IntN(len(strs))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt([]int64{0, 1, -1, 17923, math.MaxInt64, math.MinInt64}[r.IntN(6)])
	case reflect.Uint64:
		v.SetUint([]uint64{0, 1, 80 << 30, math.MaxUint64}[r.IntN(4)])
	case reflect.Float64:
		v.SetFloat(floats[r.IntN(len(floats))])
	default:
		panic("fillJSON: a field of kind " + v.Kind().String() + ": teach fillJSON and writeSweepJSON")
	}
}

// TestSweepJSONWriter holds writeSweepJSON to what encoding/json writes,
// on documents with every field set (and nil, empty, escaped, ...).
func TestSweepJSONWriter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var doc SweepJSON
		fillJSON(reflect.ValueOf(&doc).Elem(), r)
		var want, got bytes.Buffer
		werr := writeJSON(&want, doc, true)
		gerr := writeSweepJSON(&got, &doc)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("doc %d: encoding/json: %v, writeSweepJSON: %v", i, werr, gerr)
		}
		if werr == nil && !bytes.Equal(want.Bytes(), got.Bytes()) {
			t.Fatalf("doc %d: writeSweepJSON wrote\n%s\nencoding/json\n%s", i, got.Bytes(), want.Bytes())
		}
	}
	// rows whose maps share their keys, or as many but others
	stats := []map[string]int64{{"b": 1, "a": 2}, {"a": 3, "b": 4}, {"a": 5, "c": 6}, {"a": 7}, nil, {}, {"c": 8, "a": 9}}
	doc := SweepJSON{Rows: make([]SweepJSONRow, len(stats))}
	for i, m := range stats {
		doc.Rows[i].MemoryStats = m
	}
	var want, got bytes.Buffer
	if err := writeJSON(&want, doc, true); err != nil {
		t.Fatal(err)
	}
	if err := writeSweepJSON(&got, &doc); err != nil || !bytes.Equal(want.Bytes(), got.Bytes()) {
		t.Errorf("maps: err %v, wrote\n%s\nwant\n%s", err, got.Bytes(), want.Bytes())
	}
	// a float encoding/json refuses
	doc = SweepJSON{MemoryFraction: math.NaN()}
	var buf bytes.Buffer
	if err := writeSweepJSON(&buf, &doc); err == nil || buf.Len() > 0 {
		t.Errorf("NaN: err %v, wrote %q", err, buf.Bytes())
	}
}
