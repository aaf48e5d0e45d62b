package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/model"
)

// snapshotFile is what `cluster snapshot` saves: everything the planners
// and the pre-checks read, so that a plan can be computed, checked and
// reviewed with no cluster (--from-snapshot), then applied later by
// `plan apply`, which refuses it if what it read has changed since.
type snapshotFile struct {
	Version  int            `json:"version"`
	Kind     string         `json:"kind"` // "cluster-snapshot"
	TakenAt  time.Time      `json:"taken_at"`
	Snapshot model.Snapshot `json:"snapshot"`
	checkData
}

const snapshotKind = "cluster-snapshot"

func newClusterSnapshotCommand(o *options) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "snapshot [--out FILE]",
		Short: "Save what the planners read, to plan offline with --from-snapshot",
		Long: `Save the cluster's snapshot (captures, liveness, maintainers, partitions,
each with its etcd revision) and what the pre-checks read (each
changefeed's state and lag, and what a database source keeps of its log)
as JSON, to stdout or --out FILE. Every planning command computes a
plan from it with --from-snapshot FILE --dry-run, asking no cluster; a
plan saved so (--plan-out) applies later with 'cdcctl plan apply',
which refuses it (exit 5) if what it read has changed; 'cdcctl plan
diff PLAN SNAPSHOT' says what.`,
		Example: `  cdcctl cluster snapshot --out before.json
  cdcctl drain capture-3 --from-snapshot before.json --dry-run --plan-out drain.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			snap, err := c.Snapshot(cmd.Context())
			if err != nil {
				return err
			}
			data, err := fetchCheckData(cmd.Context(), c, nil)
			if err != nil {
				return err
			}
			f := snapshotFile{Version: 1, Kind: snapshotKind, TakenAt: o.now().UTC(), Snapshot: snap.Snapshot, checkData: *data}
			b, _ := json.MarshalIndent(f, "", "  ")
			if out == "" {
				_, err := o.out.Write(append(b, '\n'))
				return err
			}
			if err := os.WriteFile(out, append(b, '\n'), 0o600); err != nil {
				return err
			}
			saved := snapshotSaved{Version: 1, Path: out, ClusterID: f.Snapshot.ClusterID, Revision: int64(f.Snapshot.Revision),
				Captures: len(f.Snapshot.Nodes), Changefeeds: len(f.Snapshot.Changefeeds), Partitions: len(f.Snapshot.Partitions)}
			return o.render(saved, func(tw tableWriter) {
				fmt.Fprintf(tw, "Snapshot of cluster %s at revision %d saved to %s: %d captures, %d changefeeds, %d partitions.\n",
					saved.ClusterID, saved.Revision, out, saved.Captures, saved.Changefeeds, saved.Partitions)
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write it to this file instead of stdout")
	return cmd
}

// readSnapshotFile reads a file `cluster snapshot` wrote.
func readSnapshotFile(path string) (*snapshotFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr(fmt.Errorf("read the snapshot: %w", err))
	}
	var f snapshotFile
	if err := json.Unmarshal(b, &f); err != nil || f.Kind != snapshotKind {
		return nil, usageErr(fmt.Errorf("%s is not a cluster snapshot (a file from 'cdcctl cluster snapshot')", path))
	}
	if f.Version != 1 {
		return nil, usageErr(fmt.Errorf("%s: snapshot version %d, want 1 (take it again with 'cdcctl cluster snapshot')", path, f.Version))
	}
	return &f, nil
}

// snapshotSaved is what cluster snapshot --out says it wrote (-o json).
type snapshotSaved struct {
	Version     int    `json:"version"`
	Path        string `json:"path"`
	ClusterID   string `json:"cluster_id"`
	Revision    int64  `json:"revision"`
	Captures    int    `json:"captures"`
	Changefeeds int    `json:"changefeeds"`
	Partitions  int    `json:"partitions"`
}
