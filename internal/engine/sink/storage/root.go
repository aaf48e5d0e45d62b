package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/redact"
)

// ErrOutsideRoot is the error of a file:// sink outside the agent's sink
// root.
var ErrOutsideRoot = errors.New("outside the sink root")

// CheckRoot refuses a storage sink URI that would make the agent write
// outside root (its --sink-root): a file:// sink's directory, and a disk
// spool's spool-dir with any scheme. An API caller must not make an
// agent write where it pleases (/etc, another changefeed's files). A
// ".." in a path is refused outright, and symbolic links are resolved on
// both sides, so neither escapes the root. Other schemes, and URIs that
// name no local directory, pass.
func CheckRoot(uri, root string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return nil // a bad URI fails its own parse
	}
	if u.Scheme == "file" {
		if err := underRoot(u.Path, root); err != nil {
			return fmt.Errorf("sink URI %s: %w", redact.URI(uri), err)
		}
	}
	if dir := u.Query().Get("spool-dir"); dir != "" && slices.Contains(Schemes, u.Scheme) {
		if err := underRoot(dir, root); err != nil {
			return fmt.Errorf("sink URI %s: spool-dir %w", redact.URI(uri), err)
		}
	}
	return nil
}

// underRoot refuses a directory that is not under root once every
// symbolic link of both is resolved, or whose path has a "..".
func underRoot(dir, root string) error {
	for _, seg := range strings.Split(dir, "/") {
		if seg == ".." {
			return fmt.Errorf("%s: %w: the path may not contain \"..\"; name a directory under %s", dir, ErrOutsideRoot, root)
		}
	}
	r, err := resolve(root)
	if err != nil {
		return fmt.Errorf("the agent's sink root %s: %w", root, err)
	}
	p, err := resolve(filepath.Clean(dir))
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	rel, err := filepath.Rel(r, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s is %w %s of this agent: name a directory under it (cdc-agent --sink-root sets the root)", dir, ErrOutsideRoot, root)
	}
	return nil
}

// missingDirs are dir and those of its parents that do not exist yet,
// deepest first: what creating dir creates, and what removing it
// afterwards must remove.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return out
		}
		out = append(out, d)
		if filepath.Dir(d) == d {
			return out
		}
	}
}

// removeDirs removes the directories missingDirs named, deepest first,
// as long as they are empty: what was put in them since stays.
func removeDirs(dirs []string) {
	for _, d := range dirs {
		if os.Remove(d) != nil {
			return
		}
	}
}

// resolve is path made absolute with every symbolic link of its longest
// existing prefix resolved; the part that does not exist yet is appended
// as it is (it will be created as plain directories).
func resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	existing, rest := abs, ""
	for {
		real, err := filepath.EvalSymlinks(existing)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
}
