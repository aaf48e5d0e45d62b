// Package cloud registers the object stores' bucket drivers: s3:// (and
// S3-compatible stores through endpoint=), gs:// and azblob://. The
// bucket package itself opens only file:// and mem://.
//
// They are their own package, imported by the cdc-agent command and by
// the tests that use them, because their SDKs (AWS, Google Cloud with
// its gRPC stack, Azure) are about a third of everything the engine
// links: every engine package's test binary linked them, at about seven
// seconds of the linker's CPU each (docs/benchmarks.md, the test suite's
// own time). A program that opens a bucket URL of these schemes without
// importing this package is told that no driver is registered for it.
package cloud

import (
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/s3blob"    // s3://
)
