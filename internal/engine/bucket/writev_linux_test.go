package bucket

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A file put from chunks holds the chunks in order: empty ones among
// them, and more than one writev takes; the chunks are left as they were
// (the storage sink reuses their buffers).
func TestAFilePutFromChunksHoldsThemInOrder(t *testing.T) {
	for _, n := range []int{0, 1, 3, iovMax, 2*iovMax + 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var chunks [][]byte
			var want bytes.Buffer
			for i := range n {
				c := []byte(fmt.Sprintf("row %d\n", i))
				if i%5 == 2 {
					c = nil
				}
				chunks = append(chunks, c)
				want.Write(c)
			}
			kept := make([][]byte, len(chunks))
			copy(kept, chunks)
			dir := t.TempDir()
			b, err := Open(context.Background(), "file://"+dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.PutWith(context.Background(), "t/f.json", chunks, Options{}); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "t", "f.json"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("the file holds %d bytes, not the chunks' %d in order", len(got), want.Len())
			}
			for i := range chunks {
				if len(chunks[i]) != len(kept[i]) || len(kept[i]) > 0 && &chunks[i][0] != &kept[i][0] {
					t.Fatalf("chunk %d was changed", i)
				}
			}
		})
	}
}

// What is left of chunks after a write of n bytes, a chunk cut where
// the write ended, and the caller's chunks unchanged.
func TestWrittenLeavesWhatIsLeft(t *testing.T) {
	chunks := [][]byte{[]byte("ab"), nil, []byte("cde"), []byte("f")}
	for n, want := range []string{"abcdef", "bcdef", "cdef", "def", "ef", "f", ""} {
		var got []byte
		for _, c := range written(chunks, n) {
			got = append(got, c...)
		}
		if string(got) != want {
			t.Errorf("after %d bytes: %q left, want %q", n, got, want)
		}
		if rest := written(chunks, n); len(rest) > 0 && len(rest[0]) == 0 {
			t.Errorf("after %d bytes the first chunk left is empty", n)
		}
	}
	if string(chunks[2]) != "cde" {
		t.Fatalf("the caller's chunk was cut: %q", chunks[2])
	}
}

// A writev writes about callBytes, and at most iovMax chunks.
func TestACallWritesAboutCallBytes(t *testing.T) {
	big := make([]byte, 100<<10)
	if n := callChunks([][]byte{big, big, big, big, big}); n != 3 {
		t.Errorf("chunks of 100 KiB: %d a call, want 3 (300 KiB, the first past %d)", n, callBytes)
	}
	if n := callChunks([][]byte{big, nil}); n != 2 {
		t.Errorf("what is left under callBytes: %d chunks a call, want 2", n)
	}
	small := make([][]byte, 3*iovMax)
	for i := range small {
		small[i] = []byte("x")
	}
	if n := callChunks(small); n != iovMax {
		t.Errorf("tiny chunks: %d a call, want iovMax (%d)", n, iovMax)
	}
}
