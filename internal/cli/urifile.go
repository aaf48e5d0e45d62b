package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// A URI that holds a password is better kept off cdcctl's command line,
// where the shell's history and the process list show it. --source-file
// and --sink-file read it from a file (what a secret store writes, a
// mounted Kubernetes secret, a file only its owner reads) or, given "-",
// from standard input. Nothing of what the file holds is ever shown in
// an error: it is a password's neighbour.

// maxURIFile bounds what is read: a URI is a line, not a file's worth.
const maxURIFile = 64 << 10

// uriFlag is the URI given by --name or by --name-file: one of them
// ("" when neither; both is a usage error).
func (o *options) uriFlag(name, value, path string) (string, error) {
	if path == "" {
		return value, nil
	}
	if value != "" {
		return "", usageErr(fmt.Errorf("give --%s or --%s-file, not both", name, name))
	}
	return o.readURIFile(name+"-file", path)
}

// isStdin says a URI file's path is standard input: "-", or one of the
// names the system gives it.
func isStdin(path string) bool {
	switch path {
	case "-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0":
		return true
	}
	return false
}

// readURIFile reads the one URI in the file at path (standard input for
// "-") for flag. A terminal is refused: what is typed there is shown, and
// the URI holds a password. A file others may read is said, not
// refused: the operator may have reasons (a group of operators), and the
// URI may hold no secret.
func (o *options) readURIFile(flag, path string) (string, error) {
	var f *os.File
	where := fmt.Sprintf("--%s %s", flag, path)
	if isStdin(path) {
		where = fmt.Sprintf("--%s %s (standard input)", flag, path)
		if isTerminal(o.in) {
			return "", usageErr(fmt.Errorf("%s is a terminal, which would show the URI as it is typed: pipe it in (… | cdcctl … --%s -), or give a file only you can read", where, flag))
		}
		f, _ = o.in.(*os.File)
	} else {
		var err error
		if f, err = os.Open(path); err != nil {
			return "", usageErr(fmt.Errorf("--%s: %w", flag, err))
		}
		defer f.Close()
	}
	var r io.Reader = o.in
	if f != nil {
		r = f
		o.warnReadable(f, where, path)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxURIFile+1))
	if err != nil {
		return "", usageErr(fmt.Errorf("%s: %w", where, err))
	}
	if len(b) > maxURIFile {
		return "", usageErr(fmt.Errorf("%s holds more than %d KiB: want the URI alone, on one line", where, maxURIFile>>10))
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	switch len(lines) {
	case 0:
		return "", usageErr(fmt.Errorf("%s is empty: write the URI in it, on one line", where))
	case 1:
		return lines[0], nil
	}
	return "", usageErr(fmt.Errorf("%s holds %d lines: want the URI alone, on one line (none of them is shown here: a URI may hold a password)", where, len(lines)))
}

// warnReadable says when the file a URI is read from may be read by
// other users, naming the file to chmod (the one a link or standard
// input leads to). Mounted Kubernetes secrets are such files unless
// their defaultMode says otherwise.
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
	fmt.Fprintf(o.errOut, "Warning: %s can be read by other users (mode %04o); a password in it is theirs too: chmod 600 %s\n", where, st.Mode().Perm(), name)
}

// errTwoStdin refuses two flags that would both read standard input.
var errTwoStdin = usageErr(errors.New("only one of --source-file and --sink-file can be - (standard input)"))
