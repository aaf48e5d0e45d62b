package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A secret is better kept off cdcctl's command line, where the shell's
// history and the process list show it. A URI that holds a password
// (--source-file, --sink-file), a sink's credentials (--sink-option-file)
// and a bearer token (--token-file) are read from a file instead: what a
// secret store writes, a mounted Kubernetes secret, a file only its
// owner reads, or, given "-", standard input. Nothing of what such a
// file holds is ever shown in an error: it is a password's neighbour.
// One reader, one set of rules for all of them.

// maxSecretFile bounds what is read: a URI, a token or a few options
// are lines, not a file's worth.
const maxSecretFile = 64 << 10

// isStdin says a file's path is standard input: "-", or one of the names
// the system gives it.
func isStdin(path string) bool {
	switch path {
	case "-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0":
		return true
	}
	return false
}

// secretFile is what readSecretFile read: the file's lines that are not
// blank, trimmed, their numbers in the file, and how errors name it.
type secretFile struct {
	lines []string
	nums  []int
	where string
}

// readSecretFile reads the file at path for flag. Standard input is
// read where stdin says it may be (a terminal is refused: what is typed
// there is shown). With warn, a file others may read is said once, not
// refused: the operator may have reasons (a group of operators), and it
// may hold no secret. Its errors are the caller's to classify (a flag's
// are usage errors); none shows the file's content.
func (o *options) readSecretFile(flag, path string, stdin, warn bool) (secretFile, error) {
	var f *os.File
	where := fmt.Sprintf("--%s %s", flag, path)
	if stdin && isStdin(path) {
		where = fmt.Sprintf("--%s %s (standard input)", flag, path)
		if isTerminal(o.in) {
			return secretFile{}, fmt.Errorf("%s is a terminal, which would show what is typed: pipe it in (… | cdcctl … --%s -), or give a file only you can read", where, flag)
		}
		f, _ = o.in.(*os.File)
	} else {
		var err error
		if f, err = os.Open(path); err != nil {
			return secretFile{}, fmt.Errorf("--%s: %w", flag, err)
		}
		defer f.Close()
	}
	var r io.Reader = o.in
	if f != nil {
		r = f
		if warn {
			o.warnReadable(f, where, path)
		}
	}
	b, err := io.ReadAll(io.LimitReader(r, maxSecretFile+1))
	if err != nil {
		return secretFile{}, fmt.Errorf("%s: %w", where, err)
	}
	if len(b) > maxSecretFile {
		return secretFile{}, fmt.Errorf("%s holds more than %d KiB", where, maxSecretFile>>10)
	}
	out := secretFile{where: where}
	for i, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out.lines = append(out.lines, l)
			out.nums = append(out.nums, i+1)
		}
	}
	return out, nil
}

// oneLine is the one line a file of what (a URI, a token) holds.
func (s secretFile) oneLine(what string) (string, error) {
	switch len(s.lines) {
	case 0:
		return "", fmt.Errorf("%s is empty: write the %s in it, on one line", s.where, what)
	case 1:
		return s.lines[0], nil
	}
	return "", fmt.Errorf("%s holds %d lines: want the %s alone, on one line (none of them is shown here: it may be a secret)", s.where, len(s.lines), what)
}

// uriFlag is the URI given by --name or by --name-file: one of them
// ("" when neither; both is a usage error).
func (o *options) uriFlag(name, value, path string) (string, error) {
	if path == "" {
		return value, nil
	}
	if value != "" {
		return "", usageErr(fmt.Errorf("give --%s or --%s-file, not both", name, name))
	}
	s, err := o.readSecretFile(name+"-file", path, true, true)
	if err == nil {
		value, err = s.oneLine("URI")
	}
	if err != nil {
		return "", usageErr(err)
	}
	return value, nil
}

// sinkOptionsFile reads --sink-option-file: a K=V a line, as
// --sink-option takes them, lines starting with # ignored. A line that
// is not K=V is named by its number alone: it may be the password.
func (o *options) sinkOptionsFile(path string) ([]string, error) {
	s, err := o.readSecretFile("sink-option-file", path, true, true)
	if err != nil {
		return nil, usageErr(err)
	}
	var out []string
	for i, l := range s.lines {
		if strings.HasPrefix(l, "#") {
			continue
		}
		// The key checked here, by its shape: a line that is a secret
		// alone (a password, a base64 key) would otherwise reach the
		// agent, which names an unknown option in its refusal.
		if k, _, ok := strings.Cut(l, "="); !ok || !optionName.MatchString(k) {
			return nil, usageErr(fmt.Errorf("%s: line %d is not K=V, K a sink option's name (e.g. sasl-password=…, with no space around =; the line is not shown here: it may be a secret)", s.where, s.nums[i]))
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, usageErr(fmt.Errorf("%s has no K=V line: write the sink options in it, one a line", s.where))
	}
	return out, nil
}

// warnReadable says when the file a secret is read from may be read by
// other users, naming the file to chmod (the one a link or standard
// input leads to), once a file. Mounted Kubernetes secrets are such
// files unless their defaultMode says otherwise.
func (o *options) warnReadable(f *os.File, where, path string) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o044 == 0 {
		return
	}
	name := path
	if isStdin(path) {
		name = "the file given as standard input"
	} else if real, err := filepath.EvalSymlinks(path); err == nil {
		name = real
	}
	if o.warned[name] {
		return
	}
	if o.warned == nil {
		o.warned = map[string]bool{}
	}
	o.warned[name] = true
	fmt.Fprintf(o.errOut, "Warning: %s can be read by other users (mode %04o); a secret in it is theirs too: chmod 600 %s\n", where, st.Mode().Perm(), name)
}

// optionName is the shape of a sink URI parameter's name.
var optionName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// errTwoStdin refuses two flags that would both read standard input.
var errTwoStdin = usageErr(errors.New("only one of the file flags (--source-file, --sink-file, --sink-option-file) can be - (standard input)"))
