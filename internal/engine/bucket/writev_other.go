//go:build !linux

package bucket

import "os"

// writeChunks writes chunks to f in order, one write each.
func writeChunks(f *os.File, chunks [][]byte) (int64, error) {
	var total int64
	for _, c := range chunks {
		n, err := f.Write(c)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
