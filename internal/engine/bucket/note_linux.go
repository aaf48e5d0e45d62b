package bucket

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// xattrNote is the extended attribute that holds a file's note.
const xattrNote = "user." + noteKey

func setNote(f *os.File, note string) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.Fsetxattr(int(fd), xattrNote, []byte(note), 0) }); err != nil {
		return err
	}
	if errors.Is(serr, unix.ENOTSUP) || errors.Is(serr, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w (%v)", ErrNoNotes, serr)
	}
	return serr
}

func readNote(path string) (string, bool, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Getxattr(path, xattrNote, buf)
		switch {
		case err == nil:
			return string(buf[:n]), true, nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf)) // a longer note
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP):
			if _, serr := os.Stat(path); serr != nil {
				return "", false, notThere(serr)
			}
			return "", true, nil
		case errors.Is(err, unix.ENOENT):
			return "", false, nil
		default:
			return "", false, err
		}
		if len(buf) > 64<<10 {
			return "", false, fmt.Errorf("the note of %s is too long", path)
		}
	}
}

// notThere is nil for a file that is not there, else err.
func notThere(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
