package cli

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/playground"
	"github.com/cdcctl/cdcctl/internal/runbook"
)

// BenchmarkCoordinatorFailover measures, with real agent processes, how
// long the cluster is without a coordinator after the coordinator's
// process dies:
//
//   - crash: kill -9, so the cluster notices only when the lease expires;
//   - mysql-crash: the same with the coordinator elected through MariaDB
//     (playground --election mysql, lock TTL = session TTL), where another
//     capture takes the lock once it expires on the database;
//   - graceful: SIGTERM, which resigns and revokes the lease (the baseline).
//
// It reports crash-ms, mysql-crash-ms, graceful-ms, ttl-ms, crash/ttl and
// crash-over-ttl-ms for each backend (the goal is ≤ 1000 for both). Run
// it with:
//
//	go test -run '^$' -bench CoordinatorFailover -benchtime 3x ./internal/cli
func BenchmarkCoordinatorFailover(b *testing.B) {
	ttl := 2 * time.Second
	if s := os.Getenv("CDCCTL_BENCH_TTL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		ttl = d
	}
	var crash, mysqlCrash, graceful time.Duration
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		graceful += measureFailover(b, ttl, syscall.SIGTERM, "")
		b.StartTimer()
		crash += measureFailover(b, ttl, syscall.SIGKILL, "")
		b.StopTimer()
		mysqlCrash += measureFailover(b, ttl, syscall.SIGKILL, "mysql")
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(ms(crash), "crash-ms")
	b.ReportMetric(ms(graceful), "graceful-ms")
	b.ReportMetric(float64(ttl)/float64(time.Millisecond), "ttl-ms")
	b.ReportMetric(ms(crash)/(float64(ttl)/float64(time.Millisecond)), "crash/ttl")
	b.ReportMetric(ms(crash)-float64(ttl)/float64(time.Millisecond), "crash-over-ttl-ms")
	b.ReportMetric(ms(mysqlCrash), "mysql-crash-ms")
	b.ReportMetric(ms(mysqlCrash)-float64(ttl)/float64(time.Millisecond), "mysql-crash-over-ttl-ms")
}

// measureFailover starts a 3-capture playground electing through
// election ("" for etcd), sends sig to the
// coordinator's process and returns the time until another capture is
// the coordinator.
func measureFailover(b *testing.B, ttl time.Duration, sig syscall.Signal, election string) time.Duration {
	b.Helper()
	base, err := runbook.FreePortRange(12)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	bin, err := runbook.Programs()
	if err != nil {
		b.Fatal(err)
	}
	agentCmd := playground.AgentCommand{Path: filepath.Join(bin, "cdc-agent"), Argv0: "cdc-agent"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- playground.Run(ctx, playground.Config{Nodes: 3, Dir: dir, PortBase: base, SessionTTL: ttl, Election: election, NoDemo: true, Agent: agentCmd, Out: io.Discard})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("playground: %v", err)
		}
	}()
	stateFile := filepath.Join(dir, "playground.json")
	var st playground.State
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err = playground.ReadState(stateFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("playground not ready: %v", err)
		}
	}
	var addrs []string
	for i := 1; i <= 3; i++ {
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
	}
	client, err := api.NewClient(addrs, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	status, err := client.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	old := status.Coordinator
	pid := 0
	for _, c := range st.Captures {
		if c.ID == old {
			pid = c.PID
		}
	}
	if pid == 0 {
		b.Fatalf("coordinator %q not in playground.json", old)
	}
	begin := time.Now()
	if err := syscall.Kill(pid, sig); err != nil {
		b.Fatal(err)
	}
	for {
		s, err := client.Status(ctx)
		if err == nil && s.Coordinator != "" && s.Coordinator != old {
			return time.Since(begin)
		}
		if time.Since(begin) > ttl+30*time.Second {
			b.Fatalf("no new coordinator %s after %s", old, time.Since(begin))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
