package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A cancelled step's line says cancelled, and so does its count: not
// "[1/1 done]" for a plan whose one step was cancelled.
func TestACancelledStepsLineCountsItCancelled(t *testing.T) {
	st := plan.Step{Kind: plan.StepMovePartition, Partition: "p7", From: "capture-1", To: "capture-2"}
	var b strings.Builder
	printEvent(&b, "", exec.Event{Time: time.Unix(1000, 0), Type: exec.EventStep, Step: &st, State: exec.StepCancelled,
		Progress: &exec.Progress{Cancelled: 1, Total: 1}})
	if got := b.String(); !strings.HasSuffix(got, ": cancelled [0/1 done, 1 cancelled, 0 running]\n") {
		t.Fatalf("the line: %q", got)
	}
}
