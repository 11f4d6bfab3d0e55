package fileout

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func writeString(path, s string) error {
	return Write(context.Background(), path, nil, func(w io.Writer) error { _, err := io.WriteString(w, s); return err })
}

// mknod makes a character device like /dev/null (1,3) or /dev/full
// (1,7) in a test folder: the test never risks the system's own.
func mknod(t *testing.T, minor int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dev")
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(1<<8|minor)); err != nil {
		t.Skip("cannot make a device here:", err)
	}
	return p
}

// A character device is written into, never replaced by a regular file
// (as root, a rename over /dev/null would replace the system's).
func TestWriteIntoCharDevice(t *testing.T) {
	null := mknod(t, 3)
	if err := writeString(null, "report"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(null); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("the device is now %v (%v)", fi.Mode(), err)
	}
	onlyFiles(t, filepath.Dir(null), "dev")
	// a full device fails as a write, and stays a device
	full := mknod(t, 7)
	err := writeString(full, strings.Repeat("x", 4<<20))
	if err == nil || err.Error() != "writing "+full+": no space left on device" {
		t.Fatalf("full device: err %v", err)
	}
	if fi, _ := os.Lstat(full); fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("the full device is now %v", fi.Mode())
	}
}

// A FIFO is written into (its reader gets the data) and stays a FIFO.
func TestWriteIntoFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip("no FIFOs:", err)
	}
	got := make(chan string, 1)
	go func() {
		r, err := os.Open(p)
		if err != nil {
			got <- err.Error()
			return
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	if err := writeString(p, "through the pipe"); err != nil {
		t.Fatal(err)
	}
	var s string
	select {
	case s = <-got:
	case <-time.After(20 * time.Second): // the FIFO was replaced: its reader waits for good
	}
	if s != "through the pipe" {
		t.Fatalf("reader got %q", s)
	}
	if fi, _ := os.Lstat(p); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("fifo is now %v", fi.Mode())
	}
	onlyFiles(t, dir, "fifo")
}

// A symlink to a pipe (as /proc/self/fd/1 is under `| less`) is written
// through; the link stays a link, and no file appears.
func TestWriteThroughLinkToPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := t.TempDir()
	link := filepath.Join(dir, "out.html")
	if err := os.Symlink("/proc/self/fd/"+strconv.Itoa(int(w.Fd())), link); err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	if err := writeString(link, "to the pipe"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if s := <-done; s != "to the pipe" {
		t.Fatalf("pipe got %q", s)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link is now %v", fi.Mode())
	}
	onlyFiles(t, dir, "out.html")
}

// A symlink to a regular file: the file it points to is replaced, the
// link stays.
func TestWriteThroughLinkToFile(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	target := filepath.Join(dir, "real", "r.html")
	os.WriteFile(target, []byte("old"), 0o640)
	link := filepath.Join(dir, "r.html")
	os.Symlink(filepath.Join("real", "r.html"), link)
	if err := writeString(link, "new"); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link is now %v", fi.Mode())
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Fatalf("target holds %q", b)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode())
	}
	onlyFiles(t, filepath.Join(dir, "real"), "r.html")
}

// A folder or a dangling link is refused with a message naming the path.
func TestRefusesFolderAndDanglingLink(t *testing.T) {
	dir := t.TempDir()
	if err := writeString(dir, "x"); err == nil || !strings.Contains(err.Error(), "folder") {
		t.Errorf("folder: err %v", err)
	}
	link := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "missing", "x"), link)
	if err := writeString(link, "x"); err == nil || !strings.Contains(err.Error(), "dangling") {
		t.Errorf("dangling link: err %v", err)
	}
	onlyFiles(t, dir, "dangling")
	// both are refused before any work, by NotAnInput
	for _, p := range []string{dir, link} {
		if err := NotAnInput(p); !errors.Is(err, ErrUnwritable) || !strings.HasPrefix(err.Error(), "writing "+p+": ") {
			t.Errorf("NotAnInput(%s): %v", p, err)
		}
	}
}
