package runbook

// The commands the runbooks have besides testscript's own (Run names
// them): exits, setjson, numgt, match, ndjson, pgpid, follower,
// waitfile, refused, gone, and kafka with the cluster it keeps.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/playground"
)

// kafka start | fail CODE | heal runs a three-broker Kafka cluster in
// this process (kfake, topic "demo", 6 partitions) for the script, and
// sets KAFKA to its brokers; fail makes one broker answer every produce
// request with a Kafka error (NOT_ENOUGH_REPLICAS, MESSAGE_TOO_LARGE)
// until heal.
func cmdKafka(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: kafka start | fail CODE | heal")
	}
	h := ts.Value(kafkaKey{}).(*kafkaHolder)
	c := h.c
	switch args[0] {
	case "start":
		kc, err := kafkatest.Start(3, "demo", 6)
		ts.Check(err)
		ts.Defer(kc.Close)
		ts.Setenv("KAFKA", kc.Addrs())
		h.c = kc
	case "fail", "heal":
		if c == nil {
			ts.Fatalf("kafka %s: no cluster; kafka start first", args[0])
		}
		if args[0] == "heal" {
			c.Heal()
			return
		}
		codes := map[string]int16{"NOT_ENOUGH_REPLICAS": kerr.NotEnoughReplicas.Code, "MESSAGE_TOO_LARGE": kerr.MessageTooLarge.Code}
		code, ok := codes[strings.Join(args[1:], "")]
		if !ok {
			ts.Fatalf("kafka fail: name NOT_ENOUGH_REPLICAS or MESSAGE_TOO_LARGE")
		}
		c.Fail(code)
	default:
		ts.Fatalf("usage: kafka start | fail CODE | heal")
	}
}

type kafkaKey struct{}

// kafkaHolder keeps a script's Kafka cluster between its commands.
type kafkaHolder struct{ c *kafkatest.Cluster }

// exits CODE PROGRAM [ARGS...] runs a program and requires that exit code;
// its stdout and stderr are kept for stdout/stderr assertions.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("exits: %v", err)
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", strings.Join(args[1:], " "), got, want)
	}
}

// setjson VAR FIELD (dotted; numbers index arrays)[.FIELD...] sets VAR from the JSON object the last
// command printed on stdout.
func cmdSetJSON(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: setjson VAR FIELD")
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(ts.ReadFile("stdout")))
	dec.UseNumber() // positions are uint64s a float64 would round
	ts.Check(dec.Decode(&v))
	for _, f := range strings.Split(args[1], ".") {
		if a, isArray := v.([]any); isArray {
			i, err := strconv.Atoi(f)
			if err != nil || i < 0 || i >= len(a) {
				ts.Fatalf("setjson: no element %q in an array of %d", f, len(a))
			}
			v = a[i]
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			ts.Fatalf("setjson: %s is not an object", f)
		}
		if v, ok = m[f]; !ok {
			ts.Fatalf("setjson: no field %q in stdout", f)
		}
	}
	ts.Setenv(args[0], fmt.Sprint(v))
}

// numgt A B succeeds when number A is greater than B (! numgt: when it
// is not): positions setjson read, compared.
func cmdNumGreater(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: numgt A B")
	}
	// Exact: positions differ in their low bits, which a float64 loses.
	a, ok := new(big.Float).SetPrec(200).SetString(args[0])
	if !ok {
		ts.Fatalf("numgt: %q is not a number", args[0])
	}
	b, ok := new(big.Float).SetPrec(200).SetString(args[1])
	if !ok {
		ts.Fatalf("numgt: %q is not a number", args[1])
	}
	if gt := a.Cmp(b) > 0; gt == neg {
		ts.Fatalf("numgt %s %s: %v", args[0], args[1], gt)
	}
}

// match VAR REGEXP sets VAR to the first group of REGEXP's first match in
// the last command's stdout.
func cmdMatch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: match VAR REGEXP")
	}
	m := regexp.MustCompile(args[1]).FindStringSubmatch(ts.ReadFile("stdout"))
	if len(m) < 2 {
		ts.Fatalf("match: %q (with a group) not found in stdout", args[1])
	}
	ts.Setenv(args[0], m[1])
}

// ndjson checks that stdout is a watch's NDJSON: one event per line,
// numbered 1, 2, 3, ... without gaps or repeats, the last one ending the
// plan, and each line's counters never going back.
func cmdNDJSON(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: ndjson")
	}
	lines := strings.Split(strings.TrimSpace(ts.ReadFile("stdout")), "\n")
	done := 0
	for i, line := range lines {
		var ev struct {
			Seq      uint64 `json:"seq"`
			Type     string `json:"type"`
			Progress *struct {
				Done int `json:"done"`
			} `json:"progress"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			ts.Fatalf("line %d is not an event: %v: %s", i+1, err, line)
		}
		if ev.Seq != uint64(i+1) {
			ts.Fatalf("line %d has seq %d", i+1, ev.Seq)
		}
		if ev.Progress != nil {
			if ev.Progress.Done < done {
				ts.Fatalf("line %d: %d steps done, after %d on an earlier line", i+1, ev.Progress.Done, done)
			}
			done = ev.Progress.Done
		}
		if last := i == len(lines)-1; last != (ev.Type == "done" || ev.Type == "failed" || ev.Type == "cancelled") {
			ts.Fatalf("line %d of %d is a %q event", i+1, len(lines), ev.Type)
		}
	}
	ts.Logf("ndjson: %d events, seq 1..%d", len(lines), len(lines))
}

// pgpid CAPTURE VAR sets VAR to the pid of a playground capture, read from
// $WORK/pg/playground.json (waited for).
func cmdPlaygroundPID(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: pgpid CAPTURE VAR")
	}
	// The playground writes its state once every capture is ready,
	// which may be a moment after the cluster answers.
	path := filepath.Join("pg", "playground.json")
	cmdWaitFile(ts, false, []string{path})
	st, err := playground.ReadState(ts.MkAbs(path))
	ts.Check(err)
	for _, c := range st.Captures {
		if c.ID == args[0] {
			ts.Setenv(args[1], strconv.Itoa(c.PID))
			return
		}
	}
	ts.Fatalf("pgpid: no capture %q in playground.json", args[0])
}

// waitfile PATH waits up to 90 s for a file to exist (the playground's
// state file, written once its captures are ready).
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile PATH")
	}
	path := ts.MkAbs(args[0])
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	ts.Fatalf("waitfile: %s did not appear within 90s", path)
}

// cmdRefused waits until nothing listens at ADDR any more (a dial is
// refused): a process killed with kill -9 dies a moment after kill
// returns, and a connection it accepted meanwhile is reset, not refused.
func cmdRefused(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: refused HOST:PORT")
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", args[0], time.Second)
		if err != nil {
			return
		}
		c.Close()
	}
	ts.Fatalf("refused: %s still accepts connections after 10s", args[0])
}

// cmdGone waits until capture ID is no longer registered ('cdcctl
// capture list' does not show it): a stopped capture is Stopping, and no
// longer Alive, a moment before it leaves.
func cmdGone(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: gone CAPTURE")
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := ts.Exec("cdcctl", "capture", "list", "-o", "json"); err == nil && !strings.Contains(ts.ReadFile("stdout"), `"id": "`+args[0]+`"`) {
			return
		}
	}
	ts.Fatalf("gone: %s is still registered after 30s", args[0])
}

// follower VAR [EXCEPT...] sets VAR to a capture that is not the
// coordinator (nor one of EXCEPT), from the 'capture list -o json' the
// last command printed.
func cmdFollower(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: follower VAR [EXCEPT...]")
	}
	except := map[string]bool{}
	for _, a := range args[1:] {
		except[a] = true
	}
	var list struct {
		Captures []struct {
			ID          string `json:"id"`
			Coordinator bool   `json:"coordinator"`
		} `json:"captures"`
	}
	ts.Check(json.Unmarshal([]byte(ts.ReadFile("stdout")), &list))
	for _, c := range list.Captures {
		if !c.Coordinator && !except[c.ID] {
			ts.Setenv(args[0], c.ID)
			return
		}
	}
	ts.Fatalf("follower: no capture in stdout is a follower outside %v (run capture list -o json first)", args[1:])
}

// orlogs LOGS WORD CMD [ARGS...] runs a command as exec does; when it
// fails, it prints the lines with WORD (a changefeed's name) of the
// playground's agent logs matching the glob LOGS (as $WORK sees it),
// then fails: for a step that fails only now and then, under load, what
// the agents did is then in the CI's output.
func cmdOrLogs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: orlogs LOGS WORD CMD [ARGS...]")
	}
	err := ts.Exec(args[2], args[3:]...)
	ts.Logf("%s", ts.ReadFile("stdout"))
	if err == nil {
		return
	}
	ts.Logf("%s", ts.ReadFile("stderr"))
	paths, _ := filepath.Glob(ts.MkAbs(args[0]))
	for _, p := range paths {
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, args[1]) && !strings.Contains(l, "level=DEBUG") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 200 {
			lines = lines[len(lines)-200:]
		}
		ts.Logf("%s, lines with %q (the last 200):\n%s", filepath.Base(p), args[1], strings.Join(lines, "\n"))
	}
	ts.Fatalf("%s: %v", strings.Join(args[2:], " "), err)
}
