package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"

	"path/filepath"
	"strings"

	"github.com/cdcctl/cdcctl/internal/redact"
)

// ErrOutsideRoot is the error of a file:// sink outside the agent's sink
// root.
var ErrOutsideRoot = errors.New("outside the sink root")

// CheckRoot refuses a file:// sink URI whose directory is not under root
// (an agent's --sink-root): an API caller must not make an agent write
// where it pleases (/etc, another changefeed's files). A ".." in the path
// is refused outright, and symbolic links are resolved on both sides, so
// neither escapes the root. Other schemes pass.
func CheckRoot(uri, root string) error {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return nil // not a local directory (a bad URI fails its own parse)
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == ".." {
			return fmt.Errorf("sink URI %s: %w: the path may not contain \"..\"; name a directory under %s", redact.URI(uri), ErrOutsideRoot, root)
		}
	}
	r, err := resolve(root)
	if err != nil {
		return fmt.Errorf("the agent's sink root %s: %w", root, err)
	}
	p, err := resolve(filepath.Clean(u.Path))
	if err != nil {
		return fmt.Errorf("sink URI %s: %w", redact.URI(uri), err)
	}
	rel, err := filepath.Rel(r, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("sink URI %s: %w %s of this agent: name a directory under it (cdc-agent --sink-root sets the root)", redact.URI(uri), ErrOutsideRoot, root)
	}
	return nil
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
