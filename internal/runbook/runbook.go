// Package runbook runs the runbooks, testdata/script/*.txtar: what an
// operator types, against real cdcctl and cdc-agent processes, as
// shipped. Two test packages run them, each its own share (internal/cli
// most, this package's test the databases'), so that the go command runs
// the two shares at once.
package runbook

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// Main is a test binary's TestMain: it runs the tests, then removes the
// programs its runbooks built, if any ran.
func Main(m *testing.M) {
	code := m.Run()
	if programsDir != "" {
		os.RemoveAll(programsDir)
	}
	os.Exit(code)
}

// programsDir is where Programs built them ("" until then), so that a
// run without runbooks does not build them only to remove them.
var programsDir string

// Programs builds cdcctl and cdc-agent once per test binary, the way
// they are released (static, -trimpath, without -race), into a
// directory that every runbook puts first on its PATH: the runbooks test
// the programs as shipped, as separate processes. The engine's races are
// the in-process tests' to find (they run under -race); a race-built
// agent for every playground of every runbook cost most of this
// package's time on two cores. CDCCTL_RUNBOOK_RACE=1 builds them with
// -race too.
var Programs = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cdcctl-runbook-bin-")
	if err != nil {
		return "", err
	}
	args := []string{"build", "-trimpath", "-o", dir + string(filepath.Separator)}
	env := os.Environ()
	if os.Getenv("CDCCTL_RUNBOOK_RACE") == "1" {
		args = append(args, "-race")
	} else {
		// Static, as released (internal/release builds the same way,
		// and CI's vet compiles with these flags): the three share one
		// compilation of the tree.
		env = append(env, "CGO_ENABLED=0")
	}
	cmd := exec.Command(goTool(), append(args, "./cmd/cdcctl", "./cmd/cdc-agent")...)
	root, err := moduleRoot()
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	cmd.Dir, cmd.Env = root, env
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go build ./cmd/...: %v\n%s", err, out)
	}
	programsDir = dir
	return dir, nil
})

// goTool is the go command that runs this test: the one on the PATH, or
// the one of the toolchain that built it.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// Databases are the runbooks that run a database of their own
// (PostgreSQL, MariaDB): the longest, run by this package's test.
var Databases = []string{"postgres", "tables", "mysql", "election-mysql"}

// The two packages that run runbooks run at once, and a script's port
// range is only checked free, not held, until its agents bind it: each
// package takes its ports from a band of its own.
var (
	OthersPorts    = PortBand{20000, 26000} // internal/cli's runbooks and benchmarks
	DatabasesPorts = PortBand{26000, 32000} // this package's
)

// Run runs the runbooks named (their file names without .txtar), each a
// subtest of t, at most GOMAXPROCS at once, on ports of band.
func Run(t *testing.T, band PortBand, names ...string) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, n := range names {
		files = append(files, filepath.Join(root, "testdata", "script", n+".txtar"))
	}
	testscript.Run(t, testscript.Params{
		Files: files,
		Setup: func(env *testscript.Env) error { return setupRunbook(env, band) },
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":    cmdExits,
			"setjson":  cmdSetJSON,
			"pgpid":    cmdPlaygroundPID,
			"follower": cmdFollower,
			"match":    cmdMatch,
			"ndjson":   cmdNDJSON,
			"kafka":    cmdKafka,
			"waitfile": cmdWaitFile,
			"numgt":    cmdNumGreater,
			"refused":  cmdRefused,
			"gone":     cmdGone,
			"orlogs":   cmdOrLogs,
		},
	})
}

// Others lists the runbooks in testdata/script but Databases.
func Others() ([]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(root, "testdata", "script", "*.txtar"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range paths {
		if n := strings.TrimSuffix(filepath.Base(p), ".txtar"); !slices.Contains(Databases, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// moduleRoot is the directory of the module's go.mod, above the test's.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("runbook: no go.mod above the working directory")
		}
		dir = parent
	}
}

// setupRunbook gives every script its own free ports: PORT_BASE (also
// PORT_0) for the playground's etcd, PORT_1..PORT_5 for its captures,
// PORT_10 for its PostgreSQL (--postgres), PORT_11 free for a script to
// find nothing listening (or the election's MariaDB), PORT_12 for the
// MariaDB of --mysql, PORT_13 for the Kafka broker of --kafka; and
// CDCCTL_SERVER pointing at the captures.
func setupRunbook(env *testscript.Env, band PortBand) error {
	bin, err := Programs()
	if err != nil {
		return err
	}
	env.Setenv("PATH", bin+string(filepath.ListSeparator)+env.Getenv("PATH"))
	base, err := band.free(14)
	if err != nil {
		return err
	}
	env.Setenv("PORT_BASE", strconv.Itoa(base))
	for i := 0; i < 14; i++ {
		env.Setenv("PORT_"+strconv.Itoa(i), strconv.Itoa(base+i))
	}
	var servers []string
	for i := 1; i <= 5; i++ {
		servers = append(servers, net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
	}
	env.Setenv("CDCCTL_SERVER", strings.Join(servers, ","))
	// Keep the operator's own config out of the runbooks.
	env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, ".config"))
	env.Values[kafkaKey{}] = &kafkaHolder{}
	return nil
}

// PortBand is where a package's scripts take their ports: [From, To).
type PortBand struct{ From, To int }

// FreePortRange finds n consecutive free loopback ports for a test of
// its own (a benchmark that starts a playground), beside internal/cli's
// runbooks.
func FreePortRange(n int) (int, error) { return OthersPorts.free(n) }

// free finds n consecutive free loopback ports in the band. The band is
// below the kernel's ephemeral range (32768 and up): a port the OS hands
// out meanwhile (a kfake broker, a client connection) can never land on a
// port a script counts on.
func (b PortBand) free(n int) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for attempt := 0; attempt < 100; attempt++ {
		base := b.From + rand.IntN(b.To-b.From-n)
		// Nor on another script's of this process: they start at once,
		// and each range is only checked free, not held, until its
		// agents bind it.
		ok := true
		for g, m := range portsGiven {
			if base < g+m && g < base+n {
				ok = false
			}
		}
		for i := 0; i < n && ok; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			portsGiven[base] = n
			return base, nil
		}
	}
	return 0, errors.New("no free port range found")
}

// portsGiven are the port ranges handed to this process's scripts, by
// base.
var (
	portsMu    sync.Mutex
	portsGiven = map[int]int{}
)
