// Package pgserver starts a private PostgreSQL server for tests and the
// playground: initdb in a directory of its own, wal_level=logical,
// listening on loopback only, run as the unprivileged postgres user when
// this process is root (PostgreSQL refuses to run as root).
//
// It uses the PostgreSQL binaries on the PATH (or Debian's
// /usr/lib/postgresql/<version>/bin) and imports nothing of this module.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Server is a running PostgreSQL.
type Server struct {
	Dir  string // data directory; the socket and the log are in it too
	Port int
	// asUser is the OS user the server runs as ("" for this process's).
	asUser   string
	binDir   string
	settings []string
}

// ErrNotInstalled means no PostgreSQL binaries were found.
var ErrNotInstalled = errors.New("PostgreSQL is not installed: install it (Debian: apt-get install -y postgresql) so that initdb and pg_ctl are on the PATH")

// findBin returns the directory holding initdb and pg_ctl.
func findBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	// Debian keeps the server binaries off the PATH.
	for _, d := range debianBins() {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

// debianBins are Debian's directories of PostgreSQL's server binaries,
// the newest version first (by number: 17 before 9.6).
func debianBins() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	sort.SliceStable(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs
}

// tool is the path of a PostgreSQL program: beside initdb, else in
// Debian's directories of the server's binaries, else on the PATH (a
// PATH that names initdb and pg_ctl alone may lack pg_basebackup).
func tool(bin, name string) string {
	p := filepath.Join(bin, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	for _, d := range debianBins() {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return filepath.Join(d, name)
		}
	}
	if lp, err := exec.LookPath(name); err == nil {
		return lp
	}
	return p
}

// Start initialises dir (which must not exist or be empty) and starts a
// server on port (0 picks a free one). It is ready when Start returns.
// Settings ("name=value") are passed to the server after its defaults,
// so they override them.
func Start(ctx context.Context, dir string, port int, settings ...string) (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	pick := port == 0
	if pick {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	s := &Server{Dir: dir, Port: port, binDir: bin, settings: settings}
	if os.Geteuid() == 0 {
		s.asUser = "postgres"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if s.asUser != "" {
		if err := chownTree(dir, s.asUser); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		if out, err := s.run(ctx, "initdb", "-D", dir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale", "C"); err != nil {
			return nil, fmt.Errorf("initdb: %v: %s", err, out)
		}
	}
	// The socket beside the data, unless its path would be longer than a
	// socket's may be (108 bytes on Linux, 104 on macOS), as under a long
	// TMPDIR: then none (the server would not start); clients here
	// connect over TCP, and pg_ctl waits on postmaster.pid.
	sockets := dir
	if len(filepath.Join(dir, ".s.PGSQL.65535")) >= 100 {
		sockets = "''"
	}
	for attempt := 1; ; attempt++ {
		opts := fmt.Sprintf("-p %d -c wal_level=logical -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c fsync=off -c max_wal_senders=20 -c max_replication_slots=20", s.Port, sockets)
		for _, kv := range settings {
			opts += " -c " + kv
		}
		out, err := s.run(ctx, "pg_ctl", "-D", dir, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start", "-o", opts)
		if err == nil {
			return s, nil
		}
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		// A port picked free can be taken by another process before the
		// server binds it (tests start servers in parallel): pick again.
		if pick && attempt < 3 && strings.Contains(string(log), "could not bind") {
			if s.Port, err = freePort(); err != nil {
				return nil, err
			}
			continue
		}
		return nil, fmt.Errorf("pg_ctl start: %v: %s\n%s", err, out, tail(string(log), 2000))
	}
}

// DSN is a connection string for the superuser postgres to a database.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// Stop stops the server (fast shutdown) and waits for it.
func (s *Server) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := s.run(ctx, "pg_ctl", "-D", s.Dir, "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %v: %s", err, out)
	}
	return nil
}

// StartAgain starts a stopped server with the same settings (the end of
// an outage, for tests).
func (s *Server) StartAgain(ctx context.Context) error {
	_, err := Start(ctx, s.Dir, s.Port, s.settings...)
	return err
}

// Standby makes a physical standby of s in dir (which must not exist or
// be empty): a base backup streaming from s, with the same settings, and
// starts it. It replicates asynchronously until promoted.
func (s *Server) Standby(ctx context.Context, dir string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if s.asUser != "" {
		if err := chownTree(dir, s.asUser); err != nil {
			return nil, err
		}
	}
	if out, err := s.run(ctx, "pg_basebackup", "-D", dir, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", "postgres", "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %v: %s", err, out)
	}
	return Start(ctx, dir, 0, s.settings...)
}

// Promote ends a standby's recovery: it becomes a primary of its own, on
// a new timeline.
func (s *Server) Promote(ctx context.Context) error {
	if out, err := s.run(ctx, "pg_ctl", "-D", s.Dir, "-w", "promote"); err != nil {
		return fmt.Errorf("pg_ctl promote: %v: %s", err, out)
	}
	return nil
}

// Psql runs SQL through psql as the superuser and returns its output.
func (s *Server) Psql(ctx context.Context, db, sql string) (string, error) {
	cmd := exec.CommandContext(ctx, "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", "postgres", "-d", db, "-c", sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("psql: %v: %s", err, out)
	}
	return string(out), nil
}

func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := tool(s.binDir, name)
	var cmd *exec.Cmd
	if s.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = "/"
	// pg_ctl's server keeps running after the command returns; it must
	// not hold our pipes open.
	out, err := cmd.CombinedOutput()
	return out, err
}

func chownTree(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("PostgreSQL refuses to run as root and there is no %q user to run it as: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Every parent must be traversable by that user.
	for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
			_ = os.Chmod(p, fi.Mode().Perm()|0o011)
		}
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
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
