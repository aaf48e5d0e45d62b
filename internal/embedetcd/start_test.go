package embedetcd

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// A port taken before etcd binds it is reported as in use (so that a
// picked port can be picked again); a port the caller named is not
// replaced by another.
func TestATakenPortIsSaidToBeInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Start(Config{Dir: t.TempDir(), ClientAddr: l.Addr().String(), NoFsync: true})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("start on a taken client port: %v; want address in use", err)
	}
	s, err := Start(Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
