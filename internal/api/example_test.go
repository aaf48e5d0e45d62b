package api_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
)

// The JSON shapes scripts parse. These examples fail if a field is renamed.
func ExampleCaptureList() {
	b, _ := json.Marshal(api.CaptureList{Version: api.SchemaVersion, Captures: []api.Capture{{
		ID: "capture-1", Address: "127.0.0.1:8301", Liveness: "Alive", Coordinator: true, PID: 1234,
		StartedAt: time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC), AgentVersion: "v0.1.0",
	}}})
	fmt.Println(string(b))
	// Output:
	// {"version":1,"captures":[{"id":"capture-1","address":"127.0.0.1:8301","liveness":"Alive","coordinator":true,"pid":1234,"started_at":"2026-11-21T08:00:00Z","agent_version":"v0.1.0"}]}
}

func ExampleStatus() {
	b, _ := json.Marshal(api.Status{Version: api.SchemaVersion, ClusterID: "default", Coordinator: "capture-1", CoordinatorEpoch: 7,
		CoordinatorAddress: "127.0.0.1:8301", Election: "etcd", Captures: 3, Alive: 3, ServedBy: "capture-2", ServerVersion: "v0.1.0", Revision: 42})
	fmt.Println(string(b))
	// Output:
	// {"version":1,"cluster_id":"default","coordinator":"capture-1","coordinator_epoch":7,"coordinator_address":"127.0.0.1:8301","election":"etcd","captures":3,"alive":3,"draining":0,"stopping":0,"served_by":"capture-2","server_version":"v0.1.0","revision":42}
}

func ExampleError() {
	b, _ := json.Marshal(api.Errorf(api.CodeNotFound, "known captures: capture-1", "capture %q not found", "capture-9"))
	fmt.Println(string(b))
	// Output:
	// {"code":"not_found","message":"capture \"capture-9\" not found","hint":"known captures: capture-1"}
}
