package pickle

// prefetch asks the processor to bring in the pfStep bytes at p (eight
// cache lines), and goes on: a hint, which waits for nothing and never
// faults, not even past the end of p's array.
//
//go:noescape
func prefetch(p *byte)
