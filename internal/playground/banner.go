package playground

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// printBanner is what the playground prints once its captures are ready:
// where everything is, and what to try next.
func printBanner(w io.Writer, st State) {
	etcd := st.Etcd
	if strings.HasPrefix(etcd, "https://") {
		etcd += " (TLS; it asks for a client certificate of the CA)"
	}
	fmt.Fprintf(w, "cdcctl playground: %d captures on embedded etcd %s\n", len(st.Captures), etcd)
	if st.Reused {
		fmt.Fprintf(w, "  (the cluster state of an earlier run in %s: its changefeeds and plans are back; --fresh starts anew)\n", st.Dir)
	}
	for _, c := range st.Captures {
		fmt.Fprintf(w, "  %-10s %-16s pid %-7d log %s\n", c.ID, c.Address, c.PID, c.Log)
	}
	if st.ElectionDSN != "" {
		db := st.ElectionDSN
		if st.ElectionPID != 0 {
			db += fmt.Sprintf(" (the playground's MariaDB, pid %d)", st.ElectionPID)
		}
		fmt.Fprintf(w, "coordinator election: mysql lock in %s\n", db)
	}
	fmt.Fprintf(w, "state: %s\n\n", filepath.Join(st.Dir, "playground.json"))
	fmt.Fprintln(w, "Next, in another terminal:")
	printHints(w, nextHints(st))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Press Ctrl-C to stop the playground.")
}

// hint is one line of the banner's "Next" list: a command, and what it
// does ("" for nothing; lines after the first go under it).
type hint struct{ cmd, why string }

func nextHints(st State) []hint {
	file := func(uri string) string { return strings.TrimPrefix(strings.Split(uri, "?")[0], "file://") }
	hs := []hint{{"export CDCCTL_SERVER=" + st.Server, ""}}
	if st.CAFile != "" {
		hs = append(hs, hint{"export CDCCTL_CA_FILE=" + st.CAFile, ""},
			hint{"export CDCCTL_TOKEN_FILE=" + st.AdminTokenFile, "or " + st.ViewerTokenFile + ": reads only"})
	}
	hs = append(hs, hint{"cdcctl capture list", ""}, hint{"cdcctl cluster status", ""})
	if st.Demo != "" {
		hs = append(hs, hint{"cdcctl changefeed list", "the demo changefeed replicates into " + file(st.Demo)},
			hint{"cdcctl partition list --changefeed demo", ""},
			hint{"cdcctl verify --changefeed demo", "prove nothing was lost"})
	}
	if st.DemoPG != "" {
		hs = append(hs, hint{"cdcctl changefeed get demo-pg", "PostgreSQL (" + st.Postgres + ") into " + file(st.DemoPG)},
			hint{"cdcctl verify --changefeed demo-pg", "the tables rebuilt from the sink equal PostgreSQL's"})
	}
	if st.DemoMySQL != "" {
		hs = append(hs, mysqlHint(st.MySQL, st.DemoMySQL),
			hint{"cdcctl verify --changefeed demo-mysql", "the tables rebuilt from the sink equal MariaDB's"})
	}
	if st.Kafka != "" {
		hs = append(hs, kafkaHint(st.Kafka))
	}
	if len(st.Captures) > 2 {
		hs = append(hs, hint{fmt.Sprintf("cdcctl drain %s --batch 2 --watch", st.Captures[2].ID), "move everything off it, then it is Stopping"})
	}
	hs = append(hs, hint{"cdcctl coordinator resign", "capture-1 leads at start; this hands the role over"})
	// Who leads after a resign is for capture list to say: the operator
	// picks the coordinator's pid there (marked *).
	if len(st.Captures) > 0 {
		hs = append(hs, hint{fmt.Sprintf("kill -9 %d", st.Captures[0].PID),
			"crash capture-1 (the coordinator unless resigned): another capture takes over,\n" +
				"and its partitions move after the session TTL; after a resign, kill the PID capture list marks *"})
	}
	return hs
}

// maxHintWidth bounds the command column: a longer command (a Kafka
// changefeed's create, a token file's path) has its comment on the next
// line rather than pushing every comment past it.
const maxHintWidth = 48

// printHints prints hints in two columns: the comments all start at one
// column, past the widest command that fits maxHintWidth.
func printHints(w io.Writer, hs []hint) {
	col := 0
	for _, h := range hs {
		if n := len(h.cmd); h.why != "" && n <= maxHintWidth {
			col = max(col, n)
		}
	}
	pad := "  " + strings.Repeat(" ", col) + "  "
	for _, h := range hs {
		if h.why == "" {
			fmt.Fprintf(w, "  %s\n", h.cmd)
			continue
		}
		lines := strings.Split(h.why, "\n")
		if len(h.cmd) > col {
			fmt.Fprintf(w, "  %s\n", h.cmd)
		} else {
			fmt.Fprintf(w, "  %-*s  # %s\n", col, h.cmd, lines[0])
			lines = lines[1:]
		}
		for _, l := range lines {
			fmt.Fprintf(w, "%s# %s\n", pad, l)
		}
	}
}
