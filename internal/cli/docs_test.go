package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/cdcctl/cdcctl/internal/playground"
)

// The docs' commands are the program's: every cdcctl command line in
// docs/*.md and the README (synopses in backquotes, examples in code
// blocks) names a command that exists, with flags it has, and as many
// arguments as it takes. Concrete examples — code-block lines after a
// `$ ` prompt — must also be run verbatim by a runbook in
// testdata/script, so what they print is checked too.
func TestTheDocsCommandsAreTheProgramsCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"))
	scripts, _ := filepath.Glob(filepath.Join(root, "testdata", "script", "*.txtar"))
	var runbooks strings.Builder
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		runbooks.Write(b)
	}
	checked := 0
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range docCommands(string(body)) {
			if deliberatelyWrong[ex.line] {
				continue
			}
			for _, line := range expandSynopsis(ex.line) {
				if err := checkCommandLine(line); err != nil {
					t.Errorf("%s:%d: %q: %v", filepath.Base(f), ex.at, line, err)
				}
				checked++
			}
			if ex.prompt && !strings.Contains(runbooks.String(), "cdcctl "+strings.TrimPrefix(ex.line, "cdcctl ")+"\n") {
				t.Errorf("%s:%d: the example %q is run by no runbook in testdata/script (exec %s)", filepath.Base(f), ex.at, ex.line, ex.line)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d command lines found in the docs", checked)
	}
	t.Logf("%d command lines of the docs checked against the program", checked)
}

// deliberatelyWrong are the docs' examples of mistakes (exit-codes.md).
var deliberatelyWrong = map[string]bool{"cdcctl partition frobnicate": true}

// commandLike: "cdcctl" and then words, placeholders, flags and
// brackets; not a diagram's arrows.
var commandLike = regexp.MustCompile(`^cdcctl( [-A-Za-z0-9_.=/:|\[\]<>*'",@{}?&%~$()+!]+)+$`)

type docCommand struct {
	line   string
	at     int  // line number in the file
	prompt bool // an example after "$ ", to be run as written
}

var inlineCommand = regexp.MustCompile("`(cdcctl [^`]+)`")

// docCommands finds the cdcctl command lines of a markdown file.
func docCommands(md string) []docCommand {
	var out []docCommand
	inCode := false
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			cmd, prompt := strings.CutPrefix(trimmed, "$ ")
			if !strings.HasPrefix(cmd, "cdcctl ") {
				continue
			}
			if c, _, ok := strings.Cut(cmd, " #"); ok {
				cmd = strings.TrimSpace(c)
			}
			if strings.HasSuffix(cmd, "\\") || !commandLike.MatchString(cmd) {
				continue // continued on the next line, or a diagram
			}
			out = append(out, docCommand{line: cmd, at: i + 1, prompt: prompt})
			continue
		}
		for _, m := range inlineCommand.FindAllStringSubmatch(line, -1) {
			if commandLike.MatchString(m[1]) {
				out = append(out, docCommand{line: m[1], at: i + 1})
			}
		}
	}
	return out
}

// expandSynopsis turns a synopsis into command lines: "a | b NAME"
// alternatives of a group into one line each, optional parts kept
// (their flags must exist), placeholders as they are.
func expandSynopsis(line string) []string {
	fields := strings.Fields(line)
	// Top-level alternatives: "cdcctl plan list | show ID | watch ID".
	var alts [][]string
	depth := 0
	cur := []string{}
	for _, f := range fields {
		if f == "|" && depth == 0 {
			alts = append(alts, cur)
			cur = []string{}
			continue
		}
		// "(--source URI | --source-file FILE)": one of them, required.
		depth += strings.Count(f, "[") + strings.Count(f, "(") - strings.Count(f, "]") - strings.Count(f, ")")
		cur = append(cur, f)
	}
	alts = append(alts, cur)
	// The words before the first alternative's last subcommand are the
	// others' prefix: "cdcctl plan" for "show ID".
	prefix := alts[0][:min(2, len(alts[0]))]
	// "split|move|rebalance" as a subcommand: one line each.
	var expanded [][]string
	for _, a := range alts {
		expanded = append(expanded, a)
		for j, w := range a {
			if j < 1 || !strings.Contains(w, "|") || strings.HasPrefix(w, "-") || strings.HasPrefix(a[j-1], "--") {
				continue
			}
			expanded = expanded[:len(expanded)-1]
			for _, choice := range strings.Split(w, "|") {
				b := append(append(append([]string(nil), a[:j]...), choice), a[j+1:]...)
				expanded = append(expanded, b)
			}
			break
		}
	}
	alts = expanded
	var out []string
	for i, a := range alts {
		words := a
		if i > 0 && !strings.HasPrefix(strings.Join(a, " "), "cdcctl ") {
			words = append(append([]string(nil), prefix...), a...)
		}
		var kept []string
		for _, w := range words {
			w = strings.Trim(w, "[]()")
			// "--advance D | --state STATE" inside brackets: keep each.
			if w == "|" || w == "..." || w == "<command>" || w == "global" || w == "flags" || w == "" {
				continue
			}
			kept = append(kept, w)
		}
		out = append(out, strings.Join(kept, " "))
	}
	return out
}

// checkCommandLine finds the command a line names and checks its flags
// and the count of its arguments, without running it.
// shellFields splits a command line into words as a shell does, a quoted
// value with spaces in it one word (--exec 'kill -HUP $PID').
func shellFields(line string) []string {
	var out []string
	var cur strings.Builder
	quote, in := rune(0), false
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
			cur.WriteRune(r)
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

func checkCommandLine(line string) error {
	o := &options{v: viper.New(), in: strings.NewReader(""), out: io.Discard, errOut: io.Discard, now: time.Now}
	root := newRootCommand(o)
	args := shellFields(line)[1:]
	// Values in the synopses are placeholders or examples: "--nodes N".
	var words []string
	flags := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			flags[name] = true
			if !strings.Contains(a, "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && takesValue(root, args, name) {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, "-") && len(a) == 2 {
			if i+1 < len(args) {
				i++
			}
			continue
		}
		words = append(words, a)
	}
	cmd, rest, err := root.Find(words)
	if err != nil {
		return err
	}
	// A group takes no arguments of its own ("capture"), unlike a
	// command with subcommands that does ("drain CAPTURE").
	if len(rest) > 0 && cmd.HasSubCommands() && len(strings.Fields(cmd.Use)) == 1 {
		return &docError{"no command " + rest[0] + " under " + cmd.CommandPath()}
	}
	if cmd.Name() == "playground" {
		// cdcctl playground passes its flags to cdc-agent playground.
		cmd = playground.NewCommand()
	}
	for name := range flags {
		if cmd.Flags().Lookup(name) == nil && cmd.InheritedFlags().Lookup(name) == nil && root.PersistentFlags().Lookup(name) == nil {
			return &docError{cmd.CommandPath() + " has no flag --" + name}
		}
	}
	// A bare "cdcctl drain" in prose names the command; anything more is
	// a command line, whose arguments must fit.
	if cmd.Args != nil && (len(rest) > 0 || len(flags) > 0) {
		if err := cmd.Args(cmd, rest); err != nil {
			return err
		}
	}
	return nil
}

// takesValue tells whether a flag takes a value (a bool flag does not).
func takesValue(root *cobra.Command, args []string, name string) bool {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	cmd, _, err := root.Find(words)
	if err != nil {
		cmd = root
	}
	if cmd.Name() == "playground" {
		cmd = playground.NewCommand()
	}
	f := cmd.Flags().Lookup(name)
	if f == nil {
		f = cmd.InheritedFlags().Lookup(name)
	}
	if f == nil {
		f = root.PersistentFlags().Lookup(name)
	}
	return f == nil || f.NoOptDefVal == ""
}

type docError struct{ msg string }

func (e *docError) Error() string { return e.msg }
