package cloud

import (
	"testing"

	"gocloud.dev/blob"
)

// Imported, the package makes the object stores' URLs openable: what
// cdc-agent relies on for s3://, gs:// and azblob:// sinks and checkpoint
// stores (the bucket package registers file:// and mem://).
func TestTheObjectStoresSchemesAreRegistered(t *testing.T) {
	for _, scheme := range []string{"s3", "gs", "azblob"} {
		if !blob.DefaultURLMux().ValidBucketScheme(scheme) {
			t.Errorf("no bucket driver registered for %s://", scheme)
		}
	}
}
