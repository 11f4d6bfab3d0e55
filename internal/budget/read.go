package budget

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// readBounded reads the regular file at path, of at most limit bytes;
// what names the kind of file, for errors. It opens without waiting (a
// FIFO would wait for a writer), checks what it opened, and reads at
// most limit+1 bytes, so that neither /dev/zero, a FIFO nor a huge file
// costs more than the limit. Errors are *FileError, but for a missing
// file's (errors.Is(err, fs.ErrNotExist)).
func readBounded(path string, limit int64, what string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, &FileError{File: path, Err: fmt.Errorf("not a regular file (%s), as %s must be", kind(fi.Mode()), what)}
	}
	if fi.Size() > limit {
		return nil, &FileError{File: path, Err: fmt.Errorf("%d bytes is too large for %s (at most %d)", fi.Size(), what, limit)}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	if int64(len(data)) > limit { // it grew while read
		return nil, &FileError{File: path, Err: fmt.Errorf("more than %d bytes is too large for %s", limit, what)}
	}
	return data, nil
}

// kind names a file type that is not a regular file.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}
