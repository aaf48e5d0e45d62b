package cli

import (
	"context"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/version"
)

// VersionInfo is 'cdcctl version -o json'.
type VersionInfo struct {
	Version int          `json:"version"`
	Client  BuildVersion `json:"client"`
	// Server is the answering agent's version; absent with --client or
	// when no agent answered.
	Server *ServerVersion `json:"server,omitempty"`
}

// BuildVersion describes this binary.
type BuildVersion struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// ServerVersion describes the agent that answered.
type ServerVersion struct {
	Version  string `json:"version"`
	ServedBy string `json:"served_by"`
}

func newVersionCommand(o *options) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and, if reachable, the server's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := VersionInfo{Version: api.SchemaVersion, Client: BuildVersion{
				Version: version.Version, Commit: version.Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
			}}
			var serverErr error
			if !clientOnly {
				c, err := o.client()
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), shortTimeout)
				defer cancel()
				if st, err := c.Status(ctx); err == nil {
					info.Server = &ServerVersion{Version: st.ServerVersion, ServedBy: st.ServedBy}
				} else {
					serverErr = err
				}
			}
			return o.render(info, func(tw tableWriter) {
				fmt.Fprintf(tw, "Client:\t%s (%s, %s)\n", info.Client.Version, info.Client.GoVersion, info.Client.Platform)
				switch {
				case info.Server != nil:
					fmt.Fprintf(tw, "Server:\t%s (answered by %s)\n", info.Server.Version, info.Server.ServedBy)
				case serverErr != nil:
					fmt.Fprintf(tw, "Server:\tunreachable (%v)\n", serverErr)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only the client's version; do not contact a server")
	return cmd
}
