package bucket

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// writeChunks writes chunks to f in order, several chunks a system call
// (writev) up to about callBytes: a storage sink's file is its batches'
// chunks (256 rows are ~80 KiB), and one write each cost more calls than
// the same bytes in 256 KiB writes. Not the whole file in one call: a
// call of megabytes loses its thread's processor to the encoding
// goroutines, and then waits for one to be scheduled again (writes of
// 5 MiB took up to 80 ms, and the sink ran at a third of its rate).
func writeChunks(f *os.File, chunks [][]byte) (int64, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	// Written or empty chunks are passed over first: a writev of
	// nothing but empty ones writes 0 bytes, as a short write does.
	for chunks = written(chunks, 0); len(chunks) > 0; {
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			n, werr = unix.Writev(int(fd), chunks[:callChunks(chunks)])
			return true // a regular file: never waited for
		}); err != nil {
			return total, err
		}
		switch {
		case werr == unix.EINTR:
			continue
		case werr != nil:
			return total, &os.PathError{Op: "writev", Path: f.Name(), Err: werr}
		case n == 0:
			return total, io.ErrShortWrite
		}
		total += int64(n)
		chunks = written(chunks, n)
	}
	return total, nil
}

// written is what is left of chunks once n bytes of them are written,
// from the first chunk not empty.
// A chunk written in part is cut in a new slice: the caller's chunks are
// left as they are (their buffers are reused whole).
func written(chunks [][]byte, n int) [][]byte {
	for len(chunks) > 0 && n >= len(chunks[0]) {
		n -= len(chunks[0])
		chunks = chunks[1:]
	}
	if n > 0 {
		chunks = append([][]byte{chunks[0][n:]}, chunks[1:]...)
	}
	return chunks
}

// callChunks is how many of chunks one writev writes: about callBytes,
// at most iovMax.
func callChunks(chunks [][]byte) int {
	size := 0
	for i, c := range chunks {
		if size += len(c); size >= callBytes || i+1 == iovMax {
			return i + 1
		}
	}
	return len(chunks)
}

const (
	// iovMax is how many buffers one writev takes (IOV_MAX).
	iovMax    = 1024
	callBytes = 256 << 10
)
