package bucket

import (
	"os"

	"golang.org/x/sys/unix"
)

// newGroupSync syncs the file system root is on, by syncfs; nil if root
// cannot be opened (each file and directory is synced then).
func newGroupSync(root string) *groupSync {
	f, err := os.Open(root)
	if err != nil {
		return nil
	}
	return &groupSync{sync: func() error { return unix.Syncfs(int(f.Fd())) }, close: f.Close}
}
