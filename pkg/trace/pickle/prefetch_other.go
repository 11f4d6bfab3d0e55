//go:build !amd64

package pickle

// prefetch does nothing here (see prefetch_amd64.go).
func prefetch(p *byte) {}
