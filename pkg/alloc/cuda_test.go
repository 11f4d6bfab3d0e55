package alloc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The CUDA backend (gm_cuda.c) against a real driver, entry point by entry
// point, checking the device's own accounting (cuMemGetInfo) and the
// memory's contents. Without a driver or device only the clean refusal and
// the address table are checked; the rest skips.

const gib = 1 << 30

// cudaSlack is what cuMemGetInfo may show beyond our own memory after
// everything is returned (driver page tables, rounding): less than one
// leaked 2 MiB page would be missed, any larger leak is caught.
const cudaSlack = 4 * mib

// The address table against a map, through growth and backward-shift
// deletions; needs no driver.
func TestCUDAAddressTable(t *testing.T) {
	const n = 5000
	ref := map[uint64]uint64{}
	tab := newCUDATable()
	defer tab.free()
	seed, bad := uint64(42), 0
	for range 200000 {
		seed = seed*6364136223846793005 + 1442695040888963407
		key := ((seed>>33)%n + 1) << 21
		v, ok := tab.get(key)
		want, wok := ref[key]
		if ok != wok || (ok && v != want) {
			bad++
		}
		switch {
		case ok && (seed>>20)%3 != 0:
			if !tab.del(key) {
				bad++
			}
			delete(ref, key)
		case !ok:
			if !tab.put(key, seed) {
				bad++
			}
			ref[key] = seed
		}
	}
	if bad != 0 || tab.len() != len(ref) {
		t.Errorf("%d mismatches; table holds %d, the reference %d", bad, tab.len(), len(ref))
	}
}

// openCUDA opens device 0 or skips: with no usable driver the backend must
// refuse cleanly, which is checked first.
func openCUDA(t *testing.T) *cudaProbe {
	t.Helper()
	p, rc, msg := openCUDAProbe(0, 256)
	if rc == 0 {
		return p
	}
	if rc != 3 /* GM_EBACKEND */ || msg == "" || len(msg) >= 256 {
		t.Fatalf("refusal: rc %d, message %q", rc, msg)
	}
	if _, rc2, small := openCUDAProbe(0, 8); rc2 != 3 || len(small) >= 8 || !strings.HasPrefix(msg, small) {
		t.Fatalf("refusal into 8 bytes: rc %d, %q (not a NUL-terminated prefix of %q)", rc2, small, msg)
	}
	if _, rc3, _ := openCUDAProbe(0, 0); rc3 != 3 {
		t.Fatalf("refusal with no message buffer: rc %d", rc3)
	}
	if _, err := New(Options{Device: CUDA(0)}); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("New on CUDA(0) without a driver: %v, want ErrNoCUDA", err)
	}
	t.Skipf("no usable CUDA device: %s", msg)
	return nil
}

func (p *cudaProbe) used(t *testing.T) uint64 {
	t.Helper()
	f, tot, rc := p.memInfo()
	if rc != 0 || tot == 0 || f > tot {
		t.Fatalf("mem_info rc %d free %d total %d (%s)", rc, f, tot, p.lastErr())
	}
	return tot - f
}

// needTouch checks that p.touch found the memory usable.
func needTouch(t *testing.T, p *cudaProbe, addr, n, stride uint64, v byte, what string) {
	t.Helper()
	switch p.touch(addr, n, stride, v) {
	case -1:
		t.Fatal("libcuda.so.1 lacks cuMemsetD8_v2/cuMemcpyDtoH_v2/cuCtxSynchronize")
	case 0:
		t.Errorf("%s: memory not read/write for the device", what)
	}
}

func TestCUDADevices(t *testing.T) {
	p := openCUDA(t)
	p.destroy()
	if _, rc, msg := openCUDAProbe(999, 256); rc != 3 || !strings.Contains(msg, "not found") {
		t.Errorf("device 999: rc %d (%s)", rc, msg)
	}
	if _, rc, _ := openCUDAProbe(-1, 256); rc != 3 {
		t.Errorf("device -1: rc %d", rc)
	}
}

func TestCUDAMallocFree(t *testing.T) {
	p := openCUDA(t)
	defer p.destroy()
	sizes := []uint64{512, mib, 2*mib + 512, 20 * mib, gib}
	addr := make([]uint64, len(sizes))
	u0, sum := p.used(t), uint64(0)
	for i, s := range sizes {
		hint := uint64(0x7f0000000000) // ignored: any value must work
		if i == 0 {
			hint = 0
		}
		a, rc := p.malloc(s, hint)
		if rc != 0 || a == 0 {
			t.Fatalf("malloc(%d) rc %d (%s)", s, rc, p.lastErr())
		}
		addr[i] = a
		sum += s
	}
	for i := range sizes {
		for j := range i {
			if !(addr[i]+sizes[i] <= addr[j] || addr[j]+sizes[j] <= addr[i]) {
				t.Errorf("segments %d and %d overlap", i, j)
			}
		}
	}
	if u1 := p.used(t); u1 < u0+sum {
		t.Errorf("used grew by %d, want >= %d", u1-u0, sum)
	}
	for i, s := range sizes {
		needTouch(t, p, addr[i], s, s, byte(0x11*(i+1)), "segment")
	}
	for i, s := range sizes {
		if rc := p.free(addr[i], s); rc != 0 {
			t.Errorf("free(%d) rc %d (%s)", i, rc, p.lastErr())
		}
	}
	if u2 := p.used(t); u2 > u0+cudaSlack {
		t.Errorf("after free used %d, before %d", u2, u0)
	}
	if rc := p.free(addr[0], sizes[0]); rc != 3 || !strings.Contains(p.lastErr(), "did not return") {
		t.Errorf("double free rc %d (%s)", rc, p.lastErr())
	}
	if rc := p.free(0x1000, 512); rc != 3 {
		t.Errorf("free of an unknown address rc %d", rc)
	}
}

func TestCUDAVirtualMemory(t *testing.T) {
	p := openCUDA(t)
	defer p.destroy()
	page, _, _, _, _ := p.state()
	if page == 0 || page%512 != 0 {
		t.Fatalf("granularity %d", page)
	}
	pages := func() int { _, _, _, n, _ := p.state(); return n }
	u0 := p.used(t)
	va, rc := p.vaReserve(8*page, page)
	if rc != 0 || va%page != 0 {
		t.Fatalf("va_reserve rc %d va %#x (%s)", rc, va, p.lastErr())
	}
	if p.used(t) > u0+cudaSlack {
		t.Error("a reservation uses memory")
	}
	if page >= 1024 {
		if rc := p.mapPages(va, page, page/2); rc != 3 || !strings.Contains(p.lastErr(), "granularity") {
			t.Errorf("half-granularity page rc %d (%s)", rc, p.lastErr())
		}
	}
	if rc := p.mapPages(va+512, page, page); rc != 3 {
		t.Errorf("misaligned map rc %d", rc)
	}
	if rc := p.mapPages(va+6*page, 4*page, page); rc != 3 || !strings.Contains(p.lastErr(), "outside") {
		t.Errorf("map past the reservation rc %d (%s)", rc, p.lastErr())
	}
	at := va + 2*page
	if rc := p.mapPages(at, 3*page, page); rc != 0 {
		t.Fatalf("map 3 pages rc %d (%s)", rc, p.lastErr())
	}
	if n := pages(); n != 3 {
		t.Errorf("page table holds %d", n)
	}
	if u1 := p.used(t); u1 < u0+3*page {
		t.Errorf("map: used grew by %d", u1-u0)
	}
	needTouch(t, p, at, 3*page, page, 0xab, "mapped pages")
	if rc := p.mapPages(va+3*page, page, page); rc != 3 || !strings.Contains(p.lastErr(), "already mapped") {
		t.Errorf("double map rc %d (%s)", rc, p.lastErr())
	}
	if pages() != 3 {
		t.Error("a failed map disturbed the page table")
	}
	needTouch(t, p, at, 3*page, page, 0xcd, "after a failed map")

	// the middle page alone, then the rest
	if rc := p.unmapPages(at+page, page, page); rc != 0 || pages() != 2 {
		t.Errorf("unmap middle rc %d (%s)", rc, p.lastErr())
	}
	needTouch(t, p, at, page, page, 0x5a, "first neighbour")
	needTouch(t, p, at+2*page, page, page, 0x5b, "last neighbour")
	if rc := p.unmapPages(at, 3*page, page); rc != 3 || !strings.Contains(p.lastErr(), "not mapped") || pages() != 2 {
		t.Errorf("unmap over a hole rc %d (%s)", rc, p.lastErr())
	}
	if rc := p.unmapPages(at, page, page); rc != 0 {
		t.Errorf("unmap first (%s)", p.lastErr())
	}
	if rc := p.unmapPages(at+2*page, page, page); rc != 0 {
		t.Errorf("unmap last (%s)", p.lastErr())
	}
	if n := pages(); n != 0 {
		t.Errorf("page table holds %d", n)
	}
	if u2 := p.used(t); u2 > u0+cudaSlack {
		t.Errorf("unmap: used %d over the baseline", u2-u0)
	}
	if rc := p.vaRelease(va, 8*page); rc != 0 {
		t.Errorf("va_release rc %d (%s)", rc, p.lastErr())
	}
	if _, _, resv, _, _ := p.state(); resv != 0 {
		t.Errorf("%d reservations left", resv)
	}
	if rc := p.vaRelease(va, 8*page); rc != 3 {
		t.Errorf("double va_release rc %d", rc)
	}

	// pages of several granules; release with pages still mapped
	big := 4 * page
	va, rc = p.vaReserve(4*big, big)
	if rc != 0 {
		t.Fatalf("va_reserve big rc %d (%s)", rc, p.lastErr())
	}
	if rc := p.mapPages(va+big, 2*big, big); rc != 0 {
		t.Fatalf("map big pages rc %d (%s)", rc, p.lastErr())
	}
	needTouch(t, p, va+big, 2*big, big, 0x77, "big pages")
	if p.used(t) < u0+2*big {
		t.Error("big pages not counted")
	}
	if rc := p.vaRelease(va, 4*big); rc != 0 || pages() != 0 {
		t.Errorf("va_release with mapped pages rc %d (%s)", rc, p.lastErr())
	}
	if u3 := p.used(t); u3 > u0+cudaSlack {
		t.Errorf("va_release left %d bytes", u3-u0)
	}
}

func TestCUDAOutOfMemory(t *testing.T) {
	p := openCUDA(t)
	defer p.destroy()
	u0 := p.used(t)
	_, total, _ := p.memInfo()
	if _, rc := p.malloc(total+2*mib, 0); rc != 1 {
		t.Errorf("malloc over the total rc %d (%s)", rc, p.lastErr())
	}
	// more than the address model holds: out of memory too, not a misuse
	if _, rc := p.malloc(1<<50, 0); rc != 1 {
		t.Errorf("malloc of 1 PiB rc %d (%s)", rc, p.lastErr())
	}
	if _, segs, _, _, _ := p.state(); segs != 0 {
		t.Error("a failed malloc recorded a segment")
	}
	a, rc := p.malloc(mib, 0)
	if rc != 0 {
		t.Fatalf("malloc after oom rc %d (%s)", rc, p.lastErr())
	}
	if rc := p.free(a, mib); rc != 0 {
		t.Errorf("free after oom (%s)", p.lastErr())
	}
	// More than the card holds, in 1 GiB pages: the map fails with
	// GM_ENOMEM and leaves nothing mapped.
	gran, _, _, _, _ := p.state()
	if gran == 0 || gib%gran != 0 {
		t.Skipf("granularity %d does not divide 1 GiB", gran)
	}
	n := total/gib + 2
	va, rc := p.vaReserve(n*gib, gib)
	if rc != 0 {
		t.Fatalf("va_reserve %d GiB rc %d (%s)", n, rc, p.lastErr())
	}
	start := time.Now()
	rc = p.mapPages(va, n*gib, gib)
	t.Logf("oom map: %s (%v)", p.lastErr(), time.Since(start))
	if rc != 1 {
		t.Errorf("map over the total rc %d (%s)", rc, p.lastErr())
	}
	if _, _, _, pages, _ := p.state(); pages != 0 {
		t.Errorf("a failed map left %d pages", pages)
	}
	if u1 := p.used(t); u1 > u0+cudaSlack {
		t.Errorf("a failed map left %d bytes in use", u1-u0)
	}
	if rc := p.mapPages(va, gib, gib); rc != 0 {
		t.Errorf("map after oom (%s)", p.lastErr())
	}
	if rc := p.vaRelease(va, n*gib); rc != 0 {
		t.Errorf("va_release (%s)", p.lastErr())
	}
}

// A fresh OS thread has no current context: the backend must set it.
func TestCUDAOtherThread(t *testing.T) {
	p := openCUDA(t)
	defer p.destroy()
	if rc := p.otherThread(4 * mib); rc != 0 {
		t.Errorf("malloc and free from another thread rc %d (%s)", rc, p.lastErr())
	}
	p.used(t)
}

// destroy returns everything a backend holds, as a second backend on the
// same device sees it; a fresh backend sees the first baseline.
func TestCUDADestroy(t *testing.T) {
	p0 := openCUDA(t)
	base := p0.used(t)
	p0.destroy()
	b1, _, msg := openCUDAProbe(0, 256)
	if b1 == nil {
		t.Fatal(msg)
	}
	b2, _, msg := openCUDAProbe(0, 256) // keeps the primary context alive
	if b2 == nil {
		t.Fatal(msg)
	}
	u0 := b2.used(t)
	page, _, _, _, _ := b1.state()
	if _, rc := b1.malloc(4*gib, 0); rc != 0 {
		t.Errorf("malloc 4 GiB (%s)", b1.lastErr())
	}
	if _, rc := b1.malloc(512, 0); rc != 0 {
		t.Errorf("malloc 512 (%s)", b1.lastErr())
	}
	va, rc := b1.vaReserve(64*page, page)
	if rc != 0 {
		t.Errorf("va_reserve (%s)", b1.lastErr())
	}
	if rc := b1.mapPages(va+10*page, 5*page, page); rc != 0 {
		t.Errorf("map (%s)", b1.lastErr())
	}
	if _, rc := b1.vaReserve(64*page, page); rc != 0 {
		t.Errorf("second va_reserve (%s)", b1.lastErr())
	}
	if u1 := b2.used(t); u1 < u0+4*gib+5*page {
		t.Errorf("live memory not visible: +%d", u1-u0)
	}
	b1.destroy()
	if u2 := b2.used(t); u2 > u0+cudaSlack {
		t.Errorf("destroy left %d bytes", u2-u0)
	}
	b2.destroy()
	b3, _, msg := openCUDAProbe(0, 256)
	if b3 == nil {
		t.Fatal(msg)
	}
	defer b3.destroy()
	if u3 := b3.used(t); u3 > base+4*cudaSlack {
		t.Errorf("a fresh backend sees %d bytes over the baseline", u3-base)
	}
}

// Costs of the driver calls, for the log.
func BenchmarkCUDABackend(b *testing.B) {
	p, _, msg := openCUDAProbe(0, 256)
	if p == nil {
		b.Skip(msg)
	}
	defer p.destroy()
	for _, size := range []uint64{2 * mib, 20 * mib} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			for b.Loop() {
				a, rc := p.malloc(size, 0)
				if rc != 0 {
					b.Fatal(p.lastErr())
				}
				p.free(a, size)
			}
		})
	}
}
