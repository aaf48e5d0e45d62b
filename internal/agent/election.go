package agent

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
)

// checkElection refuses, at start, an election database that does not
// answer (--election mysql), rather than finding out at the first
// campaign.
func (n *Node) checkElection(ctx context.Context) error {
	if n.cfg.Election != "mysql" {
		return nil
	}
	probe, err := election.NewMySQL(election.MySQLConfig{DSN: n.cfg.ElectionDSN})
	if err != nil {
		return err
	}
	defer probe.Close()
	return probe.Prepare(ctx)
}

// mysqlElector is an incarnation's election backend under --election
// mysql: the MySQL lock, whose terms are raised in etcd on the member's
// lease (so that they fence, and go with the member).
func (n *Node) mysqlElector(store *meta.Store, member *cluster.Member) (election.Elector, error) {
	lease := member.Session().Lease()
	return election.NewMySQL(election.MySQLConfig{
		DSN: n.cfg.ElectionDSN, ClusterID: n.cfg.ClusterID, Self: n.ID(), Incarnation: member.Info().Incarnation, TTL: n.cfg.ElectionTTL,
		Raise: func(ctx context.Context, epoch uint64) (meta.Fence, error) {
			return store.RaiseTerm(ctx, epoch, n.ID(), lease)
		},
		End: store.EndTerm,
		Log: n.log,
	})
}
