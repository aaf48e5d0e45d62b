// Package mysqlserver starts a private MariaDB (or MySQL) server for tests
// and the playground: mariadb-install-db in a directory of its own, then
// mariadbd listening on loopback only, with its socket in that directory.
//
// It uses the server binaries on the PATH (Debian: package mariadb-server)
// and imports nothing of this module (only the MySQL driver).
package mysqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // CreateDatabase
)

// Server is a running MariaDB.
type Server struct {
	Dir  string // data directory; the socket and the log are beside it
	Port int
	opts Options

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	sockDir string // the socket's own directory (socket), or ""
}

// ErrNotInstalled means no server binaries were found.
var ErrNotInstalled = errors.New("MariaDB is not installed: install it (Debian: apt-get install -y mariadb-server) so that mariadbd and mariadb-install-db are on the PATH")

func findBin(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
			if p := filepath.Join(d, n); fileExists(p) {
				return p, nil
			}
		}
	}
	return "", ErrNotInstalled
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Options shape a server beyond its directory and port.
type Options struct {
	// Binlog turns the binary log on as a change-data-capture source
	// needs it: row format, full row images and metadata, server id 1,
	// GTIDs (MariaDB's are always on). Without it the server keeps no
	// binary log (the election backend needs none).
	Binlog bool
	// Args are more server options (--binlog-format=STATEMENT, say, to
	// test what a source refuses).
	Args []string
}

// Start initialises dir on first use and starts a server on port (0
// picks a free one), without a binary log. It is ready when Start
// returns.
func Start(ctx context.Context, dir string, port int) (*Server, error) {
	return StartWith(ctx, dir, port, Options{})
}

// StartWith is Start with options.
func StartWith(ctx context.Context, dir string, port int, opts Options) (*Server, error) {
	install, err := findBin("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// Each server's temporary files in its own directory: two servers
	// initialised at once in the shared /tmp collided there.
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	if !fileExists(filepath.Join(data, "mysql")) {
		args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + filepath.Join(dir, "tmp"), "--auth-root-authentication-method=normal", "--skip-test-db"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		cmd := exec.CommandContext(ctx, install, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("mariadb-install-db: %v: %s", err, tail(string(out), 2000))
		}
	}
	pick := port == 0
	s := &Server{Dir: dir, Port: port, opts: opts}
	for attempt := 1; ; attempt++ {
		if pick {
			if s.Port, err = freePort(); err != nil {
				return nil, err
			}
		}
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if !pick || attempt >= 3 || !strings.Contains(err.Error(), "Address already in use") {
			return nil, err
		}
	}
}

// start runs mariadbd and waits until it accepts connections.
func (s *Server) start(ctx context.Context) error {
	bin, err := findBin("mariadbd", "mysqld")
	if err != nil {
		return err
	}
	logPath := filepath.Join(s.Dir, "server.log")
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(s.Dir, "data"), "--port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1", "--socket=" + s.socket(), "--pid-file=" + filepath.Join(s.Dir, "mysqld.pid"), "--tmpdir=" + filepath.Join(s.Dir, "tmp"),
		"--log-error=" + logPath, "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0"}
	if s.opts.Binlog {
		args = append(args, "--log-bin="+filepath.Join(s.Dir, "binlog"), "--server-id=1", "--binlog-format=ROW",
			"--binlog-row-image=FULL", "--binlog-row-metadata=FULL")
	} else {
		args = append(args, "--skip-log-bin")
	}
	args = append(args, s.opts.Args...)
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if greets(s.Addr()) {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("mariadbd exited at start: %s", tail(string(log), 2000))
		case <-ctx.Done():
			s.kill()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("mariadbd did not listen on %s within 60s: %s", s.Addr(), tail(string(log), 2000))
		}
	}
}

// CreateDatabase creates database name if it does not exist, as root,
// and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+strings.ReplaceAll(name, "`", "``")+"`"); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// PID is the server process's id (0 when stopped).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// socket is the path of mariadbd's Unix socket (it listens on one
// whatever the options): beside its data, unless that path is longer than
// a socket's path may be (108 bytes on Linux, 104 on macOS), as under a
// long TMPDIR — mariadbd then aborts at start — and then in a short
// directory of its own in /tmp, which Stop removes. Clients here connect
// over TCP.
func (s *Server) socket() string {
	p := filepath.Join(s.Dir, "mysqld.sock")
	if len(p) < 100 {
		return p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sockDir == "" {
		d, err := os.MkdirTemp("/tmp", "mysqld")
		if err != nil {
			return p // mariadbd will say what is wrong
		}
		s.sockDir = d
	}
	return filepath.Join(s.sockDir, "mysqld.sock")
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// DSN is a go-sql-driver DSN for root to database db ("" for none).
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("root@tcp(%s)/%s", s.Addr(), db)
}

// Stop shuts the server down (SIGTERM) and waits for it.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		s.removeSocketDir()
		return nil
	case <-time.After(60 * time.Second):
		s.kill()
		return errors.New("mariadbd did not stop within 60s; killed it")
	}
}

// StartAgain starts a stopped server on the same port and data (the end
// of an outage, for tests).
func (s *Server) StartAgain(ctx context.Context) error { return s.start(ctx) }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
	s.removeSocketDir()
}

// removeSocketDir removes the socket's own directory, if socket made one,
// once the server is gone (stopped, or killed at a failed start).
func (s *Server) removeSocketDir() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sockDir != "" {
		_ = os.RemoveAll(s.sockDir)
		s.sockDir = ""
	}
}

// greets says a MariaDB or MySQL server answers at addr: it sends its
// handshake (protocol version 10) first. A port that only accepts is not
// enough: the port picked free may have been taken by another program
// before mariadbd bound it (mariadbd then exits, "Address already in
// use", and is started again on another), and CI once saw the first
// query sent to such a listener, reset.
func greets(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var head [5]byte // a packet's 3-byte length and sequence number, then the version
	_, err = io.ReadFull(c, head[:])
	return err == nil && head[4] == 10
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
