package cli

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// A terminal that reports no size (a pseudo-terminal no one sized, as
// script(1) gives) gets the plain lines, not the live view, which showed
// nothing there; once sized, the live view.
func TestATerminalOfNoSizeGetsPlainLines(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	if !isTerminal(pts) {
		t.Fatal("a pseudo-terminal is not taken for a terminal")
	}
	if err := unix.IoctlSetWinsize(int(ptmx.Fd()), unix.TIOCSWINSZ, &unix.Winsize{}); err != nil {
		t.Fatal(err)
	}
	if sized(pts) {
		t.Fatal("a terminal of 0 columns is taken for one the live view can draw on")
	}
	if err := unix.IoctlSetWinsize(int(ptmx.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 120, Row: 40}); err != nil {
		t.Fatal(err)
	}
	if !sized(pts) {
		t.Fatal("a terminal of 120 columns is not taken for one the live view can draw on")
	}
	if sized(&struct{}{}) {
		t.Fatal("something not a file is taken for a sized terminal")
	}
}
