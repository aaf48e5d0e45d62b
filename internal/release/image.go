package release

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: not root, and the uid distroless and ko use, so
// volume permissions carry over between such images.
const (
	ImageUID     = 65532
	ImageDataDir = "/var/lib/cdc-agent"
	// ImageSinksDir is where compose mounts one volume all its agents
	// share, for file:// sinks: a changefeed's partitions run on every
	// agent, and verify reads the sink on whichever agent answers.
	ImageSinksDir = ImageDataDir + "/sinks"
	imageBinDir   = "/usr/local/bin"
)

// ImageName is the repository the archive tags: cdcctl:<version> and
// cdcctl:latest.
const ImageName = "cdcctl"

// ImageFile is the name of the image archive of one build.
func (b Build) ImageFile() string {
	return fmt.Sprintf("cdcctl-image_%s_linux_%s.tar", b.version(), b.Arch)
}

// Image writes the container image as one archive that is both an OCI
// image layout (podman load, skopeo copy oci-archive:) and docker's save
// format (docker load). There is no base image: the layer holds the two
// static binaries, the non-root user, the data directory it owns, CA
// certificates (caCerts, if given) and the LICENSE. The entrypoint is
// cdc-agent; cdcctl is beside it for `docker exec`.
func (b Build) Image(caCerts string) (string, error) {
	layerPath := filepath.Join(b.Out, "."+b.ImageFile()+".layer")
	if err := b.writeImageLayer(layerPath, caCerts); err != nil {
		return "", err
	}
	defer os.Remove(layerPath)
	opts := []tarball.LayerOption{tarball.WithMediaType(types.OCILayer)}
	if b.Stored {
		opts = append(opts, tarball.WithCompressionLevel(gzip.NoCompression))
	}
	layer, err := tarball.LayerFromFile(layerPath, opts...)
	if err != nil {
		return "", err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: b.Created},
		CreatedBy: "cdcctl release: the static binaries on an empty base",
	}})
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = b.Arch, "linux"
	cfg.Created = v1.Time{Time: b.Created}
	cfg.Config = v1.Config{
		Entrypoint: []string{imageBinDir + "/cdc-agent"},
		User:       fmt.Sprintf("%d:%d", ImageUID, ImageUID),
		WorkingDir: ImageDataDir,
		// The agent's default --data-dir is relative; in the image its
		// state belongs in the volume.
		Env:          []string{"PATH=" + imageBinDir, "CDC_AGENT_DATA_DIR=" + ImageDataDir},
		ExposedPorts: map[string]struct{}{"8301/tcp": {}},
		Volumes:      map[string]struct{}{ImageDataDir: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "cdcctl",
			"org.opencontainers.image.version":  b.version(),
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.source":   "https://github.com/cdcctl/cdcctl",
			"org.opencontainers.image.created":  b.Created.UTC().Format("2006-01-02T15:04:05Z"),
		},
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	return b.writeImageArchive(img)
}

// writeImageArchive writes img as an OCI layout plus docker's
// manifest.json, tarred in a fixed order.
func (b Build) writeImageArchive(img v1.Image) (string, error) {
	dir, err := os.MkdirTemp(b.Out, ".image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	tag := ImageName + ":" + b.version()
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		// What docker save writes: containerd's full name, and the tag.
		"io.containerd.image.name":          "docker.io/library/" + tag,
		"org.opencontainers.image.ref.name": b.version(),
	})); err != nil {
		return "", err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return "", err
	}
	layers, err := img.Layers()
	if err != nil {
		return "", err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return "", err
		}
		layerPaths = append(layerPaths, "blobs/sha256/"+d.Hex)
	}
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   "blobs/sha256/" + cfgName.Hex,
		"RepoTags": []string{tag, ImageName + ":latest"},
		"Layers":   layerPaths,
	}})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(b.Out, b.ImageFile())
	return out, b.tarDir(dir, out)
}

// tarDir writes the files under dir into a tar at out, sorted, with the
// build's time and no owner, so that equal inputs give equal archives.
func (b Build) tarDir(dir, out string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, name := range names {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		h := &tar.Header{Name: name, ModTime: b.Created, Format: tar.FormatPAX}
		if st.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if err := copyFile(tw, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// layerEntry is one file or directory of the image's filesystem.
type layerEntry struct {
	name string // without the leading slash
	mode int64
	uid  int
	dir  bool
	src  string // a file to copy, or
	body string // the content
}

func (b Build) layerEntries(caCerts string) ([]layerEntry, error) {
	uid := ImageUID
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	entries := []layerEntry{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: passwd},
		{name: "etc/group", mode: 0o644, body: group},
		// Go's resolver reads it for the order of /etc/hosts and DNS.
		{name: "etc/nsswitch.conf", mode: 0o644, body: "hosts: files dns\n"},
		{name: "home", dir: true, mode: 0o755},
		{name: "home/nonroot", dir: true, mode: 0o700, uid: uid},
		{name: "tmp", dir: true, mode: 0o1777},
		{name: "usr", dir: true, mode: 0o755},
		{name: "usr/local", dir: true, mode: 0o755},
		{name: "usr/local/bin", dir: true, mode: 0o755},
		{name: "usr/share", dir: true, mode: 0o755},
		{name: "usr/share/doc", dir: true, mode: 0o755},
		{name: "usr/share/doc/cdcctl", dir: true, mode: 0o755},
		{name: "usr/share/doc/cdcctl/LICENSE", mode: 0o644, src: filepath.Join(b.Root, "LICENSE")},
		{name: "var", dir: true, mode: 0o755},
		{name: "var/lib", dir: true, mode: 0o755},
		// A named volume mounted here takes this owner, so the agent
		// can write its state without running as root.
		{name: strings.TrimPrefix(ImageDataDir, "/"), dir: true, mode: 0o750, uid: uid},
		{name: strings.TrimPrefix(ImageSinksDir, "/"), dir: true, mode: 0o750, uid: uid},
	}
	for _, name := range Binaries {
		path, err := b.binary(name)
		if err != nil {
			return nil, err
		}
		entries = append(entries, layerEntry{name: strings.TrimPrefix(imageBinDir, "/") + "/" + name, mode: 0o755, src: path})
	}
	if caCerts != "" {
		// Go reads this path first on Linux: the sinks' HTTPS (S3, GCS)
		// needs public CAs.
		entries = append(entries,
			layerEntry{name: "etc/ssl", dir: true, mode: 0o755},
			layerEntry{name: "etc/ssl/certs", dir: true, mode: 0o755},
			layerEntry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, src: caCerts})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

func (b Build) writeImageLayer(path, caCerts string) error {
	entries, err := b.layerEntries(caCerts)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: b.Created, Format: tar.FormatPAX}
		if e.uid != 0 {
			h.Uname, h.Gname = "nonroot", "nonroot"
		} else {
			h.Uname, h.Gname = "root", "root"
		}
		switch {
		case e.dir:
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		case e.src != "":
			st, err := os.Stat(e.src)
			if err != nil {
				return err
			}
			h.Typeflag, h.Size = tar.TypeReg, st.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if err := copyFile(tw, e.src); err != nil {
				return err
			}
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, e.body); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
