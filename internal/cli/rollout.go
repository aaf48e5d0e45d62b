package cli

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

func newRolloutCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "rollout", Short: "Restart every capture in turn, as one plan (rolling restart or upgrade)"}
	cmd.AddCommand(newRolloutRestartCommand(o), newRolloutUpgradeCommand(o))
	return cmd
}

// rolloutFlags are what both rollouts take besides the plan's flags.
type rolloutFlags struct {
	batch    int
	captures []string
	f        planFlags
}

func (r *rolloutFlags) register(cmd *cobra.Command, o *options) {
	r.f.register(cmd, 60*time.Minute)
	cmd.Flags().IntVar(&r.batch, "batch", 1, "maintainers moved at once while each capture drains")
	cmd.Flags().StringSliceVar(&r.captures, "captures", nil, "the captures to restart, in this order (default: every Alive capture; the coordinator's goes last)")
	_ = cmd.RegisterFlagCompletionFunc("captures", completeCaptures(o))
}

// run computes the rollout (made the hook's with byHook) and shows,
// saves or submits it.
func (r *rolloutFlags) run(cmd *cobra.Command, o *options, byHook bool) error {
	if err := checkBatch(r.batch); err != nil {
		return err
	}
	ids := make([]model.NodeID, len(r.captures))
	for i, c := range r.captures {
		ids[i] = model.NodeID(c)
	}
	return runPlan(cmd.Context(), o, &r.f, func(s *model.Snapshot) (*plan.Plan, error) {
		if byHook {
			if err := hooksKnownToAll(s); err != nil {
				return nil, err
			}
		}
		p, err := plan.Rollout(s, ids, r.batch, plan.DefaultCosts)
		if err == nil && byHook {
			p.ByHook()
		}
		return p, err
	}, applyPlan)
}

// hooksKnownToAll refuses a rollout by hook while a capture runs a
// version without rollout hooks: any capture may coordinate the plan (a
// failover), and one of such a version drops the hook and asks each
// capture to exit, which on Kubernetes' OnDelete recipe restarts it in
// its pod on the old image while the plan ends as succeeded.
func hooksKnownToAll(s *model.Snapshot) error {
	var without []string
	for _, n := range s.Nodes {
		if !n.Info.Has(model.FeatureRolloutHooks) {
			without = append(without, fmt.Sprintf("%s (version %s)", n.Info.ID, cmp.Or(n.Info.Version, "unknown")))
		}
	}
	if len(without) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s a version without rollout hooks: a coordinator of that version would drop the hook and restart the captures in place; upgrade from it without --exec ('cdcctl rollout restart' once the new version is installed, or your platform's own rolling update), and use 'rollout upgrade --exec' from then on",
		strings.Join(without, ", "), plural(len(without), "runs", "run"))
}

func newRolloutRestartCommand(o *options) *cobra.Command {
	var r rolloutFlags
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Restart captures one at a time: hand the coordinator role over, drain, restart, wait for it to be given work again",
		Long: `Restart captures one at a time, as one plan: for each capture in turn,
it hands the coordinator role over if it holds it, is drained as 'cdcctl
drain' drains it (its partitions move gracefully: exactly-once), is asked
to exit, comes back Alive when its service manager starts it again (a new
binary, for an upgrade), and is given its share of work again before the
next capture goes. The coordinator's capture goes last, so the role moves
once.

The agent exits with code 75 when asked; systemd (the shipped unit's
Restart=on-failure), compose (restart: on-failure), Kubernetes and the
playground start it again. A capture that does not come back
stalls the plan (a 'stalled' event names it) until it does or the plan is
cancelled.

The plan is watchable, pausable and resumable like every plan, goes on
under a new coordinator, and takes the lag budget (--max-lag): it holds
before each next step while a changefeed lags over it.`,
		Example: `  cdcctl rollout restart --dry-run
  cdcctl rollout restart --yes --watch --max-lag 30s
  cdcctl rollout restart --captures capture-2,capture-3 --batch 2 --yes --watch -o json   # CI: NDJSON events`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return r.run(cmd, o, false) },
	}
	r.register(cmd, o)
	return cmd
}

func newRolloutUpgradeCommand(o *options) *cobra.Command {
	var (
		r  rolloutFlags
		hf hookFlags
	)
	cmd := &cobra.Command{
		Use:   "upgrade --exec CMD",
		Short: "Restart captures one at a time with a hook of yours (a new version): drain each, run the hook, wait for it to rejoin",
		Long: `A rolling upgrade whose restarts are yours: as 'rollout restart', one
capture at a time (the coordinator's last, after it hands the role over),
each drained gracefully first; then, instead of asking the capture to
exit, this cdcctl runs --exec's command for it, and the plan waits until
the capture rejoins Alive as a new incarnation and is given work again.
The hook restarts the capture however your deployment does (it is run by
/bin/sh, here, with CDCCTL_CAPTURE, CDCCTL_CAPTURE_ADDR, CDCCTL_CAPTURE_PID
and CDCCTL_PLAN set); its output is printed under the capture's name.

It follows the plan (--watch is implied). A hook that fails or outruns
--exec-timeout pauses the plan and exits 11: the capture is drained and
still running; fix the hook and run 'cdcctl plan watch ID --exec CMD' and
'cdcctl plan resume ID'. If this cdcctl stops, the plan waits at that
capture's restart ("waiting for the rollout's hook") until 'cdcctl plan
watch ID --exec CMD' runs the hook, or you restart the capture yourself.
A hook may run again for a capture that way: make it safe to repeat.`,
		Example: `  cdcctl rollout upgrade --exec 'kubectl -n cdcctl delete pod "$CDCCTL_CAPTURE" --wait=false' --yes
  cdcctl rollout upgrade --exec 'ssh "${CDCCTL_CAPTURE_ADDR%:*}" sudo systemctl restart cdc-agent' --max-lag 30s --yes
  cdcctl rollout upgrade --exec 'docker compose -f deploy/compose/compose.yaml up -d --no-deps --force-recreate "$CDCCTL_CAPTURE"' --yes -o json
  cdcctl rollout upgrade --exec 'kill -HUP $CDCCTL_CAPTURE_PID' --yes    # the playground: the agent exits 75, restarted`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if hf.command == "" {
				return usageErr(fmt.Errorf("an upgrade needs its hook: --exec 'CMD' restarts one capture (CDCCTL_CAPTURE names it); without one, use 'cdcctl rollout restart'"))
			}
			hook, err := hf.hook()
			if err != nil {
				return err
			}
			r.f.hook, r.f.watch = hook, true
			return r.run(cmd, o, true)
		},
	}
	r.register(cmd, o)
	hf.register(cmd, "the command that restarts one capture, run by /bin/sh for each in turn after its drain")
	return cmd
}
