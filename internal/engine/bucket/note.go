package bucket

// This file is an object's note: a short text written with the object,
// in the same write, and read without reading the object. The storage
// sink notes on each data file where the file's rows reach, so that
// exactly-once delivery needs no object of its own for most flushes.
// On an object store the note is the object's metadata (one header of
// the same PUT); on a file:// bucket, an extended attribute set on the
// temporary file before it is renamed into place, so the file and its
// note appear together.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// noteKey is the metadata key of an object's note ("user.cdcctl" as an
// extended attribute).
const noteKey = "cdcctl"

// MaxNote is the longest note Put accepts, as an object store gets it:
// they cap all of an object's metadata at about 2 KiB.
const MaxNote = 1536

// NoteFits says whether note fits in MaxNote as an object store gets it:
// S3's and Azure's drivers path-escape a metadata value, and JSON's
// quotes and braces, and each byte of a character outside ASCII (a key
// in Chinese), take three bytes there. Measured as written, a note of
// 900 bytes went over S3's 2 KiB, was refused, and failed its flush.
func NoteFits(note string) bool { return len(url.PathEscape(note)) <= MaxNote }

// ErrNoNotes is the error of a noted write to a bucket that cannot keep
// notes (a file system without extended attributes).
var ErrNoNotes = errors.New("this bucket cannot keep notes on its objects")

// writer is the object store's options of a write.
func (o Options) writer(key string) (*blob.WriterOptions, error) {
	wo := &blob.WriterOptions{IfNotExist: o.IfNotExist}
	if o.Note != "" {
		if !NoteFits(o.Note) {
			return nil, noteTooLong(key, o.Note)
		}
		wo.Metadata = map[string]string{noteKey: o.Note}
	}
	return wo, nil
}

func noteTooLong(key, note string) error {
	return fmt.Errorf("a note of %d bytes (%d escaped) on %s: at most %d fit", len(note), len(url.PathEscape(note)), key, MaxNote)
}

// Note reads an object's note: found false when there is no such object,
// "" when it has no note.
func (b *Bucket) Note(ctx context.Context, key string) (note string, found bool, err error) {
	if b.dir != nil {
		if !plainKey(key) {
			return "", false, fmt.Errorf("object key %q is not a plain relative path", key)
		}
		return b.dir.note(key)
	}
	a, err := b.Attributes(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return a.Metadata[noteKey], true, nil
}

// KeepsNotes says whether the bucket keeps the notes of its writes: object
// stores do; a file:// bucket does where its file system keeps extended
// attributes, which it tries once.
func (b *Bucket) KeepsNotes(ctx context.Context) bool {
	if b.dir == nil {
		return true
	}
	return b.dir.keepsNotes(ctx)
}

func (d *dirWrites) note(key string) (string, bool, error) {
	return readNote(filepath.Join(d.root, filepath.FromSlash(key)))
}

// keepsNotes tries once whether a temporary file takes a note.
func (d *dirWrites) keepsNotes(ctx context.Context) bool {
	d.notes.Do(func() {
		f, tmp, err := d.temp(".notes")
		if err != nil {
			return
		}
		d.keepsNote = setNote(f, "{}") == nil
		_ = f.Close()
		_ = os.Remove(tmp)
	})
	return d.keepsNote
}
