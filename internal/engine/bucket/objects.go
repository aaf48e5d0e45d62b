package bucket

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Bucket is an opened bucket that also writes whole objects (Put).
type Bucket struct {
	*blob.Bucket
	// dir is set for file:// buckets, which Put writes itself.
	dir *dirWrites
}

// ErrExists is Put's answer when ifNotExist finds the object there.
var ErrExists = errors.New("the object already exists")

// TempDir is the directory, under a file:// bucket's root, where objects
// are written before they are renamed into place. Readers that list the
// whole bucket skip it.
const TempDir = ".cdcctl-tmp"

// Put writes an object whole from its chunks, in order: readers see all
// of it or nothing. With ifNotExist an existing object is left as it is
// and ErrExists returned.
func (b *Bucket) Put(ctx context.Context, key string, chunks [][]byte, ifNotExist bool) error {
	return b.PutWith(ctx, key, chunks, Options{IfNotExist: ifNotExist})
}

// PutFrom is Put with the object's bytes read from r (a disk spool's
// segments): the object is written as it is read, not held in memory.
func (b *Bucket) PutFrom(ctx context.Context, key string, r io.Reader, ifNotExist bool) error {
	return b.PutFromWith(ctx, key, r, Options{IfNotExist: ifNotExist})
}

// Options are a write's: whether it may replace an object, and the note
// it carries (note.go).
type Options struct {
	IfNotExist bool
	Note       string
}

// PutWith is Put with options.
func (b *Bucket) PutWith(ctx context.Context, key string, chunks [][]byte, o Options) error {
	if b.dir == nil && len(chunks) == 1 {
		// One request to an object store, not a streamed upload (and
		// with the body's MD5, which the store checks).
		wo, err := o.writer(key)
		if err != nil {
			return err
		}
		return existed(b.WriteAll(ctx, key, chunks[0], wo), o.IfNotExist)
	}
	return b.PutFromWith(ctx, key, &chunkReader{chunks: chunks}, o)
}

// PutFromWith is PutFrom with options.
func (b *Bucket) PutFromWith(ctx context.Context, key string, r io.Reader, o Options) error {
	if b.dir != nil {
		if !plainKey(key) {
			return fmt.Errorf("object key %q is not a plain relative path (no control characters, \"//\", \"..\" or trailing slash)", key)
		}
		if !NoteFits(o.Note) {
			return noteTooLong(key, o.Note)
		}
		return b.dir.put(ctx, key, r, o.IfNotExist, o.Note)
	}
	wo, err := o.writer(key)
	if err != nil {
		return err
	}
	return existed(b.writeFrom(ctx, key, r, wo), o.IfNotExist)
}

// existed is ErrExists for an object store's refusal of an if-not-exist
// write, else err.
func existed(err error, ifNotExist bool) error {
	if ifNotExist && gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return ErrExists
	}
	return err
}

func (b *Bucket) writeFrom(ctx context.Context, key string, r io.Reader, opts *blob.WriterOptions) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.NewWriter(wctx, key, opts)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel() // abandons the object
		_ = w.Close()
		return err
	}
	return w.Close()
}

// chunkReader reads chunks in order, leaving them as they are; io.Copy
// writes them whole (WriteTo), without copying them through a buffer.
type chunkReader struct {
	chunks [][]byte
	off    int // read of chunks[0]
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && c.off == len(c.chunks[0]) {
		c.chunks, c.off = c.chunks[1:], 0
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0][c.off:])
	c.off += n
	return n, nil
}

func (c *chunkReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; len(c.chunks) > 0; c.chunks, c.off = c.chunks[1:], 0 {
		n, err := w.Write(c.chunks[0][c.off:])
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// dirWrites writes a file:// bucket's objects: each into a temporary file
// under the root's TempDir, then renamed into place.
//
// gocloud's fileblob writes its temporary files into the process's
// $TMPDIR instead. A rename from there fails when the bucket is on
// another filesystem (a mounted volume: every write failed with "invalid
// cross-device link"), and every sink of every process on the machine
// then creates and renames its files through one directory, whose lock
// held a capture at about 270 files a second (30,000 tables). Temporary
// files in the target's own directory would be seen, and vanish, in the
// middle of a listing, which fileblob's List then fails.
type dirWrites struct {
	root  string
	token string // tells this process's temporary files apart
	// sync makes each object durable before it is placed, and its place
	// after (Open's fsync, true unless fsync=false): an object written
	// is what the sink's checkpoint goes past, and without fsync a power
	// loss or a crash of the machine could lose it, or leave it empty
	// under its name, after the checkpoint said it was written.
	sync  bool
	group *groupSync   // with sync, where the file system can be synced whole
	syncs atomic.Int64 // syncs waited for, for the tests
	seq   atomic.Uint64
	// open counts the staged objects whose files are open (staged.go).
	open atomic.Int64
	// lock is held while this process may have staged objects here
	// (sweep.go); mu guards it.
	mu   sync.Mutex
	lock *os.File
	// notes is whether the file system keeps extended attributes (the
	// objects' notes), tried once.
	notes     sync.Once
	keepsNote bool
}

// tempShards spreads the temporary files over directories: creating
// and renaming files in one directory serializes on its lock.
const tempShards = 64

func newDirWrites(root string, sync bool) *dirWrites {
	d := &dirWrites{root: root, sync: sync, token: fmt.Sprintf("%d-%08x", os.Getpid(), rand.Uint32())}
	if sync {
		d.group = newGroupSync(root)
	}
	return d
}

// fsync makes a written file's contents durable (with sync): with the
// file system's group sync, together with every other writer's.
func (d *dirWrites) fsync(ctx context.Context, f *os.File) error {
	if !d.sync {
		return nil
	}
	d.syncs.Add(1)
	if d.group != nil {
		return d.group.wait(ctx)
	}
	return f.Sync()
}

// syncDir makes a directory's entries durable: an object placed in it,
// or a directory made in it.
func (d *dirWrites) syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	d.syncs.Add(1)
	return f.Sync()
}

// put writes an object, with its note when note is not "".
func (d *dirWrites) put(ctx context.Context, key string, r io.Reader, ifNotExist bool, note string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	final := filepath.Join(d.root, filepath.FromSlash(key))
	f, tmp, err := d.temp(key)
	if err != nil {
		return err
	}
	if c, ok := r.(*chunkReader); ok && c.off == 0 {
		_, err = writeChunks(f, c.chunks)
	} else {
		_, err = io.Copy(f, r)
	}
	if err == nil && note != "" {
		err = setNote(f, note)
	}
	if err == nil {
		err = d.fsync(ctx, f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err() // a write that outlived its deadline is abandoned
	}
	if err == nil {
		err = d.place(ctx, tmp, final, ifNotExist)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// temp creates a temporary file for key's object.
func (d *dirWrites) temp(key string) (*os.File, string, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	shard := filepath.Join(d.root, TempDir, fmt.Sprintf("%02x", h.Sum32()%tempShards))
	tmp := filepath.Join(shard, fmt.Sprintf("%s-%d.tmp", d.token, d.seq.Add(1)))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if errors.Is(err, os.ErrNotExist) {
		if err = os.MkdirAll(shard, 0o755); err == nil {
			f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		}
	}
	return f, tmp, err
}

// plainKey says whether a key is its file's path as it is, which is
// what fileblob reads back for it: it escapes the others (control
// characters, "//", "../", a trailing slash). The engine makes none.
func plainKey(key string) bool {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "//") ||
		strings.Contains(key, "../") || key == ".." || strings.HasSuffix(key, "/..") || strings.HasPrefix(key, TempDir+"/") {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 32 {
			return false
		}
	}
	return true
}

// place moves a written temporary file to its object's path.
func (d *dirWrites) place(ctx context.Context, tmp, final string, ifNotExist bool) error {
	move := os.Rename
	if ifNotExist {
		// A link fails if the object exists; a rename would replace it.
		move = func(tmp, final string) error {
			err := os.Link(tmp, final)
			if errors.Is(err, os.ErrExist) {
				return ErrExists
			}
			if err == nil {
				_ = os.Remove(tmp)
			}
			return err
		}
	}
	err := move(tmp, final)
	made := false
	if errors.Is(err, os.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(final), 0o755); err == nil {
			made = true
			err = move(tmp, final)
		}
	}
	if err != nil || !d.sync {
		return err
	}
	if d.group != nil {
		// The object's entry and any directory made for it, with the
		// rest of the file system.
		d.syncs.Add(1)
		if err := d.group.wait(ctx); err != nil {
			return fmt.Errorf("sync of %s's file system after %s was placed: %w", d.root, final, err)
		}
		return nil
	}
	// The object's entry; with directories made for it, each of theirs
	// in its parent too, up to the root.
	for dir := filepath.Dir(final); ; dir = filepath.Dir(dir) {
		if err := d.syncDir(dir); err != nil {
			return fmt.Errorf("fsync of directory %s: %w", dir, err)
		}
		if !made || dir == d.root || len(dir) <= len(d.root) {
			return nil
		}
	}
}

// Walk passes on the key of every object under prefix, the writers'
// temporary files left out.
//
// A file:// bucket is walked in one pass over its directories. fileblob's
// List walks the whole tree under the prefix again for every page of
// 1,000 keys, and fails when a file vanishes during the walk: a verify of
// a sink of 30,000 tables had not finished in 11 minutes.
func (b *Bucket) Walk(ctx context.Context, prefix string, fn func(key string) error) error {
	if b.dir != nil {
		return b.dir.walk(ctx, prefix, fn)
	}
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !strings.HasPrefix(obj.Key, TempDir+"/") {
			if err := fn(obj.Key); err != nil {
				return err
			}
		}
	}
}

func (d *dirWrites) walk(ctx context.Context, prefix string, fn func(key string) error) error {
	start := d.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(d.root, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == start && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil // gone while walking (a temporary file), or unreadable
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		rel, rerr := filepath.Rel(d.root, p)
		if rerr != nil || rel == "." {
			return nil
		}
		key := filepath.ToSlash(rel)
		if e.IsDir() {
			if strings.HasPrefix(e.Name(), ".") {
				return filepath.SkipDir // TempDir
			}
			if len(key)+1 > len(prefix) && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) || strings.HasSuffix(key, ".attrs") {
			return nil // .attrs: the sidecars fileblob wrote before
		}
		return fn(key)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
