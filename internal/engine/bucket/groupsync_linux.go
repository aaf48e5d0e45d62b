package bucket

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fuseMagic is a FUSE file system's statfs type: syncfs does not reach
// its server (sshfs, s3fs, gcsfuse), where fsync does.
const fuseMagic = 0x65735546

// newGroupSync syncs the file system root is on, by syncfs; nil where
// each file and directory must be synced instead: root cannot be
// opened, a FUSE file system, or a kernel before 5.8 (whose syncfs does
// not report a failed write back).
func newGroupSync(root string) *groupSync {
	if !syncfsReports() {
		return nil
	}
	f, err := os.Open(root)
	if err != nil {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil || st.Type == fuseMagic {
		_ = f.Close()
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil
	}
	return &groupSync{
		sync: func() error {
			// Control keeps the descriptor open through the call (a
			// bucket closed meanwhile fails it, not another's).
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.Syncfs(int(fd)) }); err != nil {
				return err
			}
			return serr
		},
		close: f.Close,
	}
}

// syncfsReports says the kernel is 5.8 or later.
func syncfsReports() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	release := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 5 || major == 5 && minor >= 8
}
