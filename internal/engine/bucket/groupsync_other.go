//go:build !linux

package bucket

// newGroupSync is nil where there is no syncfs: each file and directory
// is synced on its own.
func newGroupSync(string) *groupSync { return nil }
