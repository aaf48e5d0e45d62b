package enginetest

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// EtcdLink is one capture's TCP path to etcd, through the test: it can be
// frozen, which from the capture's side is what a SIGSTOPped etcd (or a
// link that drops every packet) looks like: connections stay open,
// nothing comes back, new ones connect and hang. Thawed, what was sent
// meanwhile goes through. etcd itself runs on, so leases the capture does
// not renew within their TTL expire, as they would on a real etcd whose
// link to one capture froze.
type EtcdLink struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed at the thaw
	conns  []net.Conn
}

func NewEtcdLink(t testing.TB, target string) *EtcdLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &EtcdLink{ln: ln, target: strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://"), thawed: make(chan struct{})}
	close(l.thawed)
	go l.accept()
	return l // closed by its owner, after the capture using it stops
}

// Endpoint is what the capture is given as its etcd endpoint.
func (l *EtcdLink) Endpoint() string { return "http://" + l.ln.Addr().String() }

func (l *EtcdLink) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			in.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		go l.pipe(in, out)
		go l.pipe(out, in)
	}
}

// pipe copies one direction, holding what it read while the link is
// frozen.
func (l *EtcdLink) pipe(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			l.mu.Lock()
			thawed := l.thawed
			l.mu.Unlock()
			<-thawed
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed link: the deferred closes end the other side
		}
	}
}

// Freeze holds everything sent either way until Thaw.
func (l *EtcdLink) Freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.frozen {
		l.frozen, l.thawed = true, make(chan struct{})
	}
}

// Thaw lets what was held, and all after it, through.
func (l *EtcdLink) Thaw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frozen {
		l.frozen = false
		close(l.thawed)
	}
}

// Close ends the link and every connection through it.
func (l *EtcdLink) Close() {
	l.Thaw()
	l.ln.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}
