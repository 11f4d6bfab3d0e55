package alloc

import (
	"math/rand"
	"reflect"
	"testing"
)

// TestRunBatchesAgree: gm_run skips track_peak and sample after an op
// that cannot raise what they read (any op but an allocation) when the
// same call applied the op before it. Whatever the batches, the timeline,
// the extra figures and the statistics are those of a run of one op a
// call, where nothing is skipped: for every policy, over random ops (of
// all kinds, recorded streams and out-of-memory failures among them), in
// batches of random lengths, with a bucket stride that splits batches.
func TestRunBatchesAgree(t *testing.T) {
	for _, p := range Policies() {
		for seed := int64(1); seed <= 4; seed++ {
			conf := DefaultConfig()
			conf.Policy = p
			opts := Options{Config: conf, Device: Sim(0), DeviceTotal: 4 << 30}
			if seed%2 == 0 { // a small card: out-of-memory is common
				opts.Device, opts.DeviceTotal = Sim(256*mib), 0
			}
			one, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			rng := rand.New(rand.NewSource(seed))
			bytes := make(fuzzBytes, 6000)
			rng.Read(bytes)
			const n = 1500
			tlOne := NewTimeline(n, 64)
			var ids [16]fuzzID
			var ops []Op
			for len(ops) < n {
				op := fuzzOp(&bytes, &ids)
				i := len(ops)
				ops = append(ops, op)
				// an op that fails (out of memory: Done 0) changes nothing
				if res, _ := one.Run([]Op{op}, i, tlOne); res.Done == 1 {
					ids[op.ID].apply(op)
				}
			}
			batched, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer batched.Close()
			tl := NewTimeline(n, 64)
			for at := 0; at < n; {
				end := min(n, at+1+rng.Intn(60))
				res, _ := batched.Run(ops[at:end], at, tl)
				at += res.Done
				if at < end {
					at++ // op at failed, as in the one-op run: go on past it
				}
			}
			if !reflect.DeepEqual(tl, tlOne) {
				t.Errorf("%s seed %d: timeline in batches %+v, one op a call %+v", p, seed, tl, tlOne)
			}
			if got, want := batched.Extra(), one.Extra(); got != want {
				t.Errorf("%s seed %d: Extra in batches %+v, one op a call %+v", p, seed, got, want)
			}
			if got, want := batched.Stats(), one.Stats(); got != want {
				t.Errorf("%s seed %d: Stats in batches %+v, one op a call %+v", p, seed, got, want)
			}
		}
	}
}
