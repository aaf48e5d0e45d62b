package deps

import (
	"bytes"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/cdcctl/cdcctl/"

// allowed is DESIGN §3 as a table: a package (or "dir/*" for the
// packages under dir) and the module's packages it may import ("dir/*"
// for any under dir). Imports point down the layers: model knows nobody,
// plan only model, exec plan and model; sources and sinks know the row
// model, their contract and their own helpers, and only the registries
// name a concrete one; api knows model, plan and exec; the CLI talks to a
// cluster only through api's client.
var allowed = map[string][]string{
	"internal/model":  nil,
	"internal/plan":   {"internal/model"},
	"internal/exec":   {"internal/plan", "internal/model"},
	"internal/redact": nil, "internal/version": nil, "internal/configfile": nil, "internal/certs": nil,
	"internal/embedetcd": nil, "internal/embedetcd/etcdtest": {"internal/embedetcd"},
	"internal/pgserver": nil, "internal/pgserver/pgtest": {"internal/pgserver"}, "internal/mysqlserver": nil, "internal/mysqlserver/mysqltest": {"internal/mysqlserver"},
	"internal/release": nil, "internal/release/mkrelease": {"internal/release"},
	"internal/deps": nil,

	"internal/engine/bucket":            nil,
	"internal/engine/bucket/cloud":      nil,
	"internal/engine/bucket/buckettest": {"internal/engine/bucket/cloud"},
	"internal/engine/actor":             {"internal/model"},
	"internal/engine/transport":         {"internal/model"},
	"internal/engine/meta":              {"internal/model"},
	"internal/engine/cluster":           {"internal/engine/meta", "internal/model"},
	"internal/engine/election":          {"internal/engine/cluster", "internal/engine/meta", "internal/model"},
	"internal/engine/checkpoint":        {"internal/engine/actor", "internal/engine/bucket", "internal/engine/meta", "internal/model"},
	"internal/engine/eventlog":          {"internal/engine/source", "internal/engine/transport", "internal/model"},

	// The source contract, the concrete sources, the registry.
	"internal/engine/row":             {"internal/model"},
	"internal/engine/source":          {"internal/engine/row", "internal/model"},
	"internal/engine/source/*":        {"internal/engine/source", "internal/engine/row", "internal/model", "internal/redact"},
	"internal/engine/source/registry": {"internal/engine/source", "internal/engine/source/*", "internal/model", "internal/redact"},
	// The PostgreSQL source's tests through a cluster: only tests.
	"internal/engine/source/postgres/changefeeds": nil,
	"internal/engine/source/postgres/lifecycle":   nil,
	"internal/engine/source/mysql/changefeeds":    nil,
	// The sink contract, the codec, the concrete sinks, the registry.
	"internal/engine/sink":                 {"internal/engine/row", "internal/model"},
	"internal/engine/sink/codec":           {"internal/engine/row", "internal/model"},
	"internal/engine/sink/compat":          nil,
	"internal/engine/sink/kafka/kafkatest": nil,
	// The sinks' tests' dispatchers.
	"internal/engine/sink/sinktest": {"internal/engine/dispatcher", "internal/engine/sink", "internal/engine/source/gen", "internal/model"},
	"internal/engine/sink/*":        {"internal/engine/sink", "internal/engine/sink/codec", "internal/engine/row", "internal/engine/bucket", "internal/model", "internal/redact"},
	"internal/engine/sink/registry": {"internal/engine/sink", "internal/engine/sink/*", "internal/model", "internal/redact"},

	"internal/engine/coordinator": {"internal/engine/cluster", "internal/engine/election", "internal/engine/meta", "internal/engine/source",
		"internal/engine/source/registry", "internal/engine/sink/registry", "internal/exec", "internal/plan", "internal/model", "internal/redact"},
	"internal/engine/maintainer": {"internal/engine/actor", "internal/engine/checkpoint", "internal/engine/cluster", "internal/engine/eventlog",
		"internal/engine/meta", "internal/engine/source", "internal/engine/source/registry", "internal/engine/transport", "internal/plan", "internal/model"},
	"internal/engine/dispatcher": {"internal/engine/actor", "internal/engine/checkpoint", "internal/engine/cluster", "internal/engine/eventlog",
		"internal/engine/meta", "internal/engine/sink", "internal/engine/sink/registry", "internal/engine/source", "internal/engine/source/registry",
		"internal/engine/transport", "internal/model"},

	// One capture's engine, assembled (the agent's and enginetest's).
	"internal/engine/capture": {"internal/engine/checkpoint", "internal/engine/cluster", "internal/engine/coordinator", "internal/engine/dispatcher",
		"internal/engine/election", "internal/engine/eventlog", "internal/engine/maintainer", "internal/engine/meta", "internal/engine/sink",
		"internal/engine/sink/registry", "internal/engine/transport", "internal/model"},

	// The in-process cluster harness the engine's packages test on.
	"internal/engine/enginetest": {"internal/embedetcd/etcdtest", "internal/engine/capture", "internal/engine/checkpoint", "internal/engine/coordinator", "internal/engine/election",
		"internal/engine/meta", "internal/engine/sink/codec", "internal/engine/source/gen", "internal/engine/transport", "internal/exec", "internal/plan", "internal/model", "internal/verify"},

	"internal/verify": {"internal/engine/bucket", "internal/engine/sink/codec", "internal/engine/sink/registry", "internal/engine/source", "internal/model"},
	"internal/api":    {"internal/model", "internal/plan", "internal/exec", "internal/redact"},
	"internal/tui":    {"internal/exec", "internal/plan", "internal/model"},
	// The agent opens sources and sinks through their registries: it
	// names no concrete one.
	"internal/agent": {"internal/api", "internal/engine/capture", "internal/engine/checkpoint", "internal/engine/cluster", "internal/engine/coordinator",
		"internal/engine/dispatcher", "internal/engine/election", "internal/engine/eventlog", "internal/engine/meta", "internal/engine/sink",
		"internal/engine/sink/registry", "internal/engine/source", "internal/engine/source/registry", "internal/engine/transport", "internal/engine/bucket",
		"internal/exec", "internal/plan", "internal/model", "internal/verify",
		"internal/configfile", "internal/embedetcd", "internal/playground", "internal/redact", "internal/version"},
	// The playground runs in cdc-agent: etcd, the demo databases, the
	// MySQL election's check.
	"internal/playground": {"internal/api", "internal/certs", "internal/embedetcd", "internal/pgserver", "internal/mysqlserver", "internal/engine/election",
		"internal/model", "internal/configfile"},
	"internal/cli": {"internal/api", "internal/plan", "internal/exec", "internal/tui", "internal/model",
		"internal/configfile", "internal/redact", "internal/version"},
	// The runbooks' harness (internal/cli's tests and its own): the
	// programs as processes, a playground's state, a Kafka in process.
	"internal/runbook": {"internal/engine/sink/kafka/kafkatest", "internal/playground"},
	"cmd/cdcctl":       {"internal/cli"},
	"cmd/cdc-agent":    {"internal/agent", "internal/engine/bucket/cloud"},
}

// debts are the imports against the table the tree still has, each
// "importer -> imported". The test fails on any other, and on a debt
// that is gone, so this list only ever shrinks. Issue 29 paid off the
// last ones (session 20): keep it empty.
var debts []string

// heavy are what the cdcctl binary must not link (DESIGN §3).
var heavy = []string{"github.com/cockroachdb/pebble", "github.com/jackc/pgx/v5", "github.com/IBM/sarama", "go.etcd.io/etcd/server/v3", "github.com/go-sql-driver/mysql"}

func goList(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestImportsFollowDesign holds every package of the module to the table.
func TestImportsFollowDesign(t *testing.T) {
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		imports[pkg] = nil
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	var linked []string
	for _, dep := range strings.Fields(goList(t, "-deps", "./cmd/cdcctl")) {
		for _, h := range heavy {
			if dep == h || strings.HasPrefix(dep, h+"/") {
				linked = append(linked, "cmd/cdcctl links "+h)
			}
		}
	}
	problems := check(imports, linked, allowed, debts)
	for _, p := range problems {
		t.Error(p)
	}
}

// check returns what breaks the rules: an import the table does not
// allow and that is not a known debt, a package the table has no row
// for, a debt that no longer exists.
func check(imports map[string][]string, linked []string, allowed map[string][]string, debts []string) []string {
	var problems []string
	seen := map[string]bool{}
	pkgs := make([]string, 0, len(imports))
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		rule, ok := ruleOf(allowed, pkg)
		if !ok {
			problems = append(problems, "package "+pkg+" has no row in the import table (internal/deps): add what it may import, as DESIGN §3 says")
			continue
		}
		for _, imp := range imports[pkg] {
			if matchesAny(rule, imp) {
				continue
			}
			edge := pkg + " -> " + imp
			if slices.Contains(debts, edge) {
				seen[edge] = true
				continue
			}
			problems = append(problems, edge+": DESIGN §3 does not allow this import (allowed: "+strings.Join(rule, ", ")+"); go through the contract or registry instead")
		}
	}
	for _, l := range linked {
		if slices.Contains(debts, l) {
			seen[l] = true
			continue
		}
		problems = append(problems, l+": the cdcctl binary must link no engine (DESIGN §3)")
	}
	for _, d := range debts {
		if !seen[d] {
			problems = append(problems, "debt "+d+" is gone: remove it from the list in internal/deps")
		}
	}
	return problems
}

// ruleOf finds a package's row: its own, else its parent's "dir/*".
func ruleOf(allowed map[string][]string, pkg string) ([]string, bool) {
	if r, ok := allowed[pkg]; ok {
		return r, true
	}
	r, ok := allowed[path.Dir(pkg)+"/*"]
	return r, ok
}

func matchesAny(patterns []string, imp string) bool {
	for _, p := range patterns {
		if p == imp || strings.HasSuffix(p, "/*") && strings.HasPrefix(imp, strings.TrimSuffix(p, "*")) {
			return true
		}
	}
	return false
}

// concrete are the packages of one source or sink, which only their
// registry names; the test harnesses that drive a generator are the
// exceptions DESIGN §3 lists (enginetest's cluster, sinktest's
// dispatchers).
var concrete = []string{"internal/engine/source/gen", "internal/engine/source/postgres", "internal/engine/source/mysql",
	"internal/engine/sink/storage", "internal/engine/sink/kafka", "internal/engine/sink/blackhole"}

// TestOnlyTheRegistriesNameAConcreteSourceOrSink reads the table itself:
// a row that lets a package other than a registry (or a concrete one's
// own subpackages, or the two harnesses) import a concrete source or
// sink, even through a "dir/*", is a hole in DESIGN §3's rule (the
// agent's row was "internal/engine/*" until it named the storage sink for
// its memory budget and metrics, which the registry now names).
func TestOnlyTheRegistriesNameAConcreteSourceOrSink(t *testing.T) {
	may := map[string]bool{"internal/engine/source/registry": true, "internal/engine/sink/registry": true,
		"internal/engine/enginetest": true, "internal/engine/sink/sinktest": true}
	for pkg, rule := range allowed {
		if may[pkg] {
			continue
		}
		for _, c := range concrete {
			if strings.HasPrefix(pkg, c) {
				continue
			}
			if matchesAny(rule, c) {
				t.Errorf("the import table lets %s import %s: only the registries name a concrete source or sink", pkg, c)
			}
		}
	}
}

// The checker catches a wrong import, a package without a row and a debt
// paid off, and passes what the table allows.
func TestTheCheckerCatchesAWrongImport(t *testing.T) {
	table := map[string][]string{"internal/model": nil, "internal/plan": {"internal/model"}, "internal/engine/source/*": {"internal/engine/source"}}
	got := check(map[string][]string{
		"internal/model":                  {"internal/plan"},
		"internal/plan":                   {"internal/model"},
		"internal/engine/source/postgres": {"internal/engine/source", "internal/engine/eventlog"},
		"internal/stray":                  nil,
	}, []string{"cmd/cdcctl links github.com/jackc/pgx/v5"}, table, []string{"internal/engine/source/postgres -> internal/engine/eventlog", "internal/cli -> internal/agent"})
	want := []string{
		"internal/model -> internal/plan: DESIGN §3 does not allow",
		"package internal/stray has no row",
		"cmd/cdcctl links github.com/jackc/pgx/v5: the cdcctl binary must link no engine",
		"debt internal/cli -> internal/agent is gone",
	}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("problem %d: %q, want it to begin %q", i, got[i], w)
		}
	}
}
