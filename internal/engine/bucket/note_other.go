//go:build !linux

package bucket

import (
	"errors"
	"os"
)

// Notes on files are extended attributes, which this build reads and
// writes on Linux only: elsewhere a file:// bucket keeps none, and the
// storage sink writes its progress objects instead.

func setNote(*os.File, string) error { return ErrNoNotes }

func readNote(path string) (string, bool, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	return "", true, nil
}
