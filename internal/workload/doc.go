// Package workload describes programs by what they do to a caching GPU
// allocator: a [Workload] is a stream of [alloc.Op] (allocate, free,
// record_stream, empty_cache) with named phases. Workloads come from
// scripts ([Parse], [ParseFile]) or are built in ([Builtins], [Lookup]).
//
// # Script format
//
// A script holds one statement per line; '#' starts a comment. A line
// format rather than YAML because workloads are sequences: one line per
// allocator call reads top to bottom like the program it models, diffs
// line by line, and a loop is a block, not nested mappings.
//
//	# a training-step sketch
//	description two streams and a loop
//	seed 42
//	param h = 768             # overridable: -p h=1024
//	let act = 4*h*1024
//	phase forward
//	alloc x act               # buffer x of act bytes on stream 0
//	alloc y 2MiB stream=1
//	record_stream y stream=2  # y is also used on stream 2
//	free x
//	repeat 10 {
//	  alloc tmp[i] rand(1MiB, 8MiB)
//	  free tmp[i]
//	}
//	free y
//	empty_cache
//
// Statements:
//
//	alloc NAME SIZE [stream=N]   allocate SIZE bytes as buffer NAME
//	free NAME...                 free buffers
//	record_stream NAME stream=N  NAME is used on stream N too
//	empty_cache                  release cached, unused segments
//	phase TEXT                   a marker reports show; lasts to the next one
//	repeat COUNT [as VAR] {      run the block COUNT times, VAR (default i)
//	}                            counting from 0; blocks nest
//	let VAR = EXPR               set a variable
//	param VAR = EXPR             a variable whose default a parameter overrides
//	seed N                       reseed rand() (the default seed is 1)
//	limit SIZE                   device memory the workload is meant for
//	description TEXT             one line describing the workload
//
// NAME is a word (letters, digits, '_', '.') with any number of index
// suffixes written without spaces, tmp[i][j+1], which become part of the
// name: tmp[3][4]. A name may be allocated again once it has been freed.
//
// Expressions are 64-bit integers with + - * / % and parentheses, and
// the functions rand(lo, hi) (uniform in [lo, hi], from the seeded
// generator), min(a, b), max(a, b) and align(x, a) (x rounded up to a
// multiple of a). A unit after a number or parenthesised expression
// multiplies it: B, KiB, MiB, GiB, TiB (powers of 1024) and KB, MB, GB,
// TB (powers of 1000), in any case but B's. Unit and function names
// cannot name variables. A fraction needs a unit and must come
// to whole bytes: 1.5GiB. Sizes run from 1 byte to 1 PiB.
//
// Errors name the script and line: "train.wl:12: free of x, which is not
// allocated". Allocating a live name, freeing an unknown one, undefined
// variables, unknown units, division by zero and overflow are errors.
//
// A script may begin with a UTF-8 byte-order mark; other characters
// outside the syntax are errors, quoted with control characters escaped.
//
// # Limits
//
// A few bytes of script can ask for unbounded work (repeat 1000000000000),
// so scripts run within [Limits]; going past one is an error naming the
// limit and the line at fault: "big.gpumem:3: more than 16777216
// operations (the limit)". The defaults, [DefaultLimits], are far above
// real workloads (a training step makes thousands of operations; the
// transformer builtin, eight steps of GPT-2 small, 7299) and keep a
// hostile script to seconds and a few hundred MiB:
//
//	operations   16777216 (2^24) allocator operations; raisable (Limits.Ops,
//	             gpumem run --max-ops)
//	steps        16 per operation allowed: statements run plus expression
//	             terms evaluated, so that loops making no operations end
//	live buffers 1048576 (2^20) allocated at once
//	memory       128 MiB held for live buffer names and phases
//	script       1 MiB; a line 64 KiB
//	nesting      64 repeat blocks; 64 parentheses, calls and minus signs
//
// Builtins are built within the defaults.
//
// [Open] runs a script once to check it without keeping its operations,
// and [Workload.Replay] makes them again batch by batch as the allocator
// consumes them, so that a long script's operations are never all in
// memory; [Lookup] and [Parse] make them all.
//
// # Operations
//
// Each allocation gets the smallest ID not in use, so IDs stay dense:
// the allocator indexes a table by ID. A buffer freed after record_stream
// named a stream other than its own becomes an [alloc.OpFree], which the
// allocator treats as pending while the other stream may still use it,
// followed by an [alloc.OpFreeComplete] just before the next allocation
// or empty_cache, or at the end: the model is that the recorded event
// completes quickly. Its ID is reused only after the completion. Buffers
// a script leaves allocated stay allocated; the stream simply ends.
//
// # Built-in workloads
//
// frag-demo replays, operation for operation, the recorded PyTorch run in
// testdata/pytorch/seed_frag.pickle. free-but-fails shows 4 GiB free in
// holes that no 2 GiB request fits (Limit says 8 GiB). The strategy-*
// workloads run one toy training loop with a sequence length that changes
// each step under the strategies people argue about, so their costs sit
// side by side.
//
// transformer models GPT-2-style training steps: embeddings, blocks of
// layer norm, attention, MLP with GPT-2's tanh GELU, dropout, the tied LM
// head and cross-entropy, backward freeing activations in reverse while
// making gradients, AdamW (state made lazily at the first step, one
// foreach temporary per parameter each step) and zero_grad(set_to_none).
// With the defaults and seq=512,1024,256,768,1024,384,896,640 its
// operations match the recorded gpt2_varlen run event for event; the only
// sizes that differ are data-dependent sort temporaries of the embedding
// backward (a kilobyte). bf16 models autocast (casts of inputs and
// weights, bf16 activations, fp32 norms, softmax and loss); checkpoint
// models per-block gradient checkpointing (no_grad forward, recompute in
// backward, no key/value cache); attention=eager materialises the
// batch·heads·seq² scores. Those three are modelled, not recorded. At the
// end the optimizer state and the model are freed; the three cuBLAS
// workspaces stay allocated, as in a real process.
package workload
