package cli

import (
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A rollout by hook is refused, naming the captures and what to do,
// while a capture runs a version without rollout hooks (registered
// without features): it could coordinate the plan and drop the hook.
func TestARolloutByHookNeedsEveryCaptureToKnowHooks(t *testing.T) {
	s := &model.Snapshot{Nodes: []model.NodeState{
		{Info: model.NodeInfo{ID: "capture-1", Version: "v2", Features: model.BuildFeatures}},
		{Info: model.NodeInfo{ID: "capture-2", Version: "v2", Features: model.BuildFeatures}},
	}}
	if err := hooksKnownToAll(s); err != nil {
		t.Fatalf("every capture of this version: %v", err)
	}
	s.Nodes = append(s.Nodes, model.NodeState{Info: model.NodeInfo{ID: "capture-3", Version: "v1"}})
	err := hooksKnownToAll(s)
	for _, want := range []string{"capture-3 (version v1) runs a version without rollout hooks", "cdcctl rollout restart", "without --exec"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a capture of an earlier version: %v; want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "capture-1") {
		t.Fatalf("names a capture that knows hooks: %v", err)
	}
}
