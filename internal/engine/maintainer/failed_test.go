package maintainer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A permanent error (the broker refuses the messages as too large) does
// not loop: the changefeed goes failed with the error and what to do;
// after the fix, resume replicates everything, nothing lost.
func TestAPermanentKafkaErrorFailsTheChangefeedUntilResumed(t *testing.T) {
	t.Parallel()
	kc, err := kafkatest.Start(3, "demo", 6)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(3)
	tc.CreateChangefeed("demo", "gen://?tables=8&keys=100&rate=1000", fmt.Sprintf("kafka://%s/demo?partition=table&retry-timeout=1s", kc.Addrs()), 2)
	tc.Warm("demo", 1500*time.Millisecond)
	kc.Fail(kerr.MessageTooLarge.Code)
	var failed model.ChangefeedStatus
	tc.Eventually("the changefeed fails", 30*time.Second, func() bool {
		failed = tc.Changefeed("demo").Status
		return failed.State == model.ChangefeedFailed
	})
	if !strings.Contains(failed.Error, "changefeed resume") || !strings.Contains(failed.Error, "MESSAGE_TOO_LARGE") && !strings.Contains(failed.Error, "too large") {
		t.Fatalf("failed with %q; want the error and what to do", failed.Error)
	}
	// It stays failed: nothing retries by itself.
	time.Sleep(2 * time.Second)
	if again := tc.Changefeed("demo").Status; again.State != model.ChangefeedFailed {
		t.Fatalf("a failed changefeed changed by itself: %+v", again)
	}
	kc.Heal()
	tc.SetState("demo", model.ChangefeedNormal)
	tc.WaitCheckpoint("demo", model.TsFromTime(time.Now())+model.TsFromMillis(1000))
	if now := tc.Changefeed("demo").Status; now.State != model.ChangefeedNormal || now.Error != "" {
		t.Fatalf("after resume: %+v", now)
	}
	rep := tc.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("verify after resume: %+v", rep)
	}
	t.Logf("failed with %q; after resume verified %d events: %d lost, %d duplicates", failed.Error, rep.Expected, rep.Lost, rep.Duplicates)
}
