package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
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

// readURIFile reads the one URI in the file at path ("-": standard
// input) for flag. A file others may read is said, not refused: the
// operator may have reasons (a group of operators), and the URI may
// hold no secret.
func (o *options) readURIFile(flag, path string) (string, error) {
	var r io.Reader = o.in
	where := fmt.Sprintf("--%s %s", flag, path)
	if path == "-" {
		where = fmt.Sprintf("--%s - (standard input)", flag)
	} else {
		f, err := os.Open(path)
		if err != nil {
			return "", usageErr(fmt.Errorf("--%s: %w", flag, err))
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o077 != 0 {
			fmt.Fprintf(o.errOut, "Warning: %s can be read by other users (mode %04o); a password in it is theirs too: chmod 600 %s\n", where, st.Mode().Perm(), path)
		}
		r = f
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

// errTwoStdin refuses two flags that would both read standard input.
var errTwoStdin = usageErr(errors.New("only one of --source-file and --sink-file can be - (standard input)"))
