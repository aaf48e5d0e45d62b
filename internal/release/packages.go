package release

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// PackageFormats are the package formats released.
var PackageFormats = []string{"deb", "rpm"}

// Completions writes cdcctl's shell completion scripts into
// b.Bin/completion, where deploy/nfpm.yaml takes them from. They do not
// depend on the architecture, so cdcctl is any binary that runs here.
func (b Build) Completions(cdcctl string) error {
	dir := filepath.Join(b.Bin, "completion")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(cdcctl, "completion", shell)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		// Keep the builder's own cdcctl config out of it.
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+dir, "HOME="+dir)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("cdcctl completion %s: %v: %s", shell, err, stderr.String())
		}
		if err := os.WriteFile(filepath.Join(dir, "cdcctl."+shell), stdout.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Packages writes the deb and rpm packages that deploy/nfpm.yaml
// describes, for the build's version and architecture.
func (b Build) Packages() ([]string, error) {
	for _, name := range Binaries {
		if _, err := b.binary(name); err != nil {
			return nil, err
		}
	}
	env := map[string]string{"VERSION": b.version(), "ARCH": b.Arch, "BIN_DIR": b.Bin}
	cfg, err := nfpm.ParseFileWithEnvMapping(filepath.Join(b.Root, "deploy", "nfpm.yaml"), func(k string) string {
		return env[k]
	})
	if err != nil {
		return nil, fmt.Errorf("deploy/nfpm.yaml: %w", err)
	}
	var out []string
	for _, format := range PackageFormats {
		info, err := cfg.Get(format)
		if err != nil {
			return nil, err
		}
		b.rootPaths(info)
		info.MTime = b.Created
		for _, c := range info.Contents {
			if c.FileInfo != nil {
				c.FileInfo.MTime = b.Created
			}
		}
		// The build host's name is not part of a release.
		info.RPM.BuildHost = "cdcctl-release"
		if b.Stored {
			info.Deb.Compression, info.RPM.Compression = "none", "gzip:0"
		}
		info = nfpm.WithDefaults(info)
		if err := nfpm.PrepareForPackager(info, format); err != nil {
			return nil, fmt.Errorf("deploy/nfpm.yaml for %s: %w", format, err)
		}
		pkgr, err := nfpm.Get(format)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(b.Out, pkgr.ConventionalFileName(info))
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		if err := pkgr.Package(info, f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s package: %w", format, err)
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		out = append(out, path)
	}
	return out, nil
}

// rootPaths makes the config's relative paths relative to the
// repository's root, as if nfpm ran there.
func (b Build) rootPaths(info *nfpm.Info) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(b.Root, *p)
		}
	}
	for _, c := range info.Contents {
		abs(&c.Source)
	}
	abs(&info.Scripts.PreInstall)
	abs(&info.Scripts.PostInstall)
	abs(&info.Scripts.PreRemove)
	abs(&info.Scripts.PostRemove)
}
