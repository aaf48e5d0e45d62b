// Package cli is cdcctl: cobra commands, one file per command group. It
// reaches a cluster only through api.Client (and starts agents only in
// the playground); it never imports the engine.
package cli

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/configfile"
	"github.com/cdcctl/cdcctl/internal/redact"
	"github.com/cdcctl/cdcctl/internal/version"
)

// DefaultServers are the playground's first three captures, so that a
// fresh playground needs no configuration and survives losing capture-1.
const DefaultServers = "127.0.0.1:8301,127.0.0.1:8302,127.0.0.1:8303"

// Main is the cdcctl program.
func Main() {
	os.Exit(Execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Execute runs cdcctl with arguments and returns the exit code.
func Execute(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o := &options{v: viper.New(), in: stdin, out: stdout, errOut: stderr, now: time.Now}
	root := newRootCommand(o)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	if strings.HasPrefix(err.Error(), "unknown command ") {
		// cobra's own, for the root: bad arguments, like any usage error.
		err = usageErr(err)
	}
	code := exitCodeOf(err)
	if code != ExitDryRunChanges {
		o.printError(err, code)
	}
	return code
}

// options are the global flags and the streams every command uses.
type options struct {
	v      *viper.Viper
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	now    func() time.Time
	// tokenFile is the --token-file flag: given, it wins over
	// CDCCTL_TOKEN, which wins over a token file of the config file.
	tokenFile *pflag.Flag
	// warned are the secret files already said to be readable by
	// others: a command that builds several clients says it once.
	warned map[string]bool
}

func (o *options) output() string { return o.v.GetString("output") }

// client builds the API client from --server / CDCCTL_SERVER / config.
func (o *options) client() (*api.Client, error) {
	return o.clientWithTimeout(o.v.GetDuration("request-timeout"))
}

// clientWithTimeout is client() for a request known to take longer.
func (o *options) clientWithTimeout(d time.Duration) (*api.Client, error) {
	// A string "a,b" and a YAML list [a, b] both work.
	servers := o.v.GetStringSlice("server")
	c, err := api.NewClient(servers, d)
	if err != nil {
		return nil, usageErr(err)
	}
	token, err := o.token()
	if err != nil {
		return nil, usageErr(err)
	}
	c.SetToken(token)
	if path := o.v.GetString("ca-file"); path != "" {
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, usageErr(fmt.Errorf("--ca-file: %w", err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErr(fmt.Errorf("--ca-file %s holds no PEM certificate", path))
		}
		c.SetTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool})
	}
	return c, nil
}

// token is the bearer token for agents that check them: --token-file
// (or CDCCTL_TOKEN_FILE), else CDCCTL_TOKEN, else token-file in the config
// file or its context. The environment overrides the config file, as it
// does every key: a context's admin token file must not beat the viewer
// token an operator exported to be safe. A token is never a flag's value:
// ps shows arguments to everyone.
func (o *options) token() (string, error) {
	given := o.tokenFile != nil && o.tokenFile.Changed
	if env, ok := os.LookupEnv("CDCCTL_TOKEN_FILE"); ok && env != "" {
		given = true
	}
	if tok := strings.TrimSpace(o.v.GetString("token")); tok != "" && !given {
		return tok, nil
	}
	if path := o.v.GetString("token-file"); path != "" {
		// The path is a file's, also a standard input's name: the token
		// is read when a request is made, after any flag that read
		// standard input. Not warned of when others may read it: it is
		// read by every command, and a mounted Kubernetes secret is such
		// a file by default; a warning on each would be noise that
		// scripts reading stderr trip on.
		s, err := o.readSecretFile("token-file", path, false, false)
		if err != nil {
			return "", err
		}
		return s.oneLine("token")
	}
	return strings.TrimSpace(o.v.GetString("token")), nil
}

func (o *options) render(v any, table func(tw tableWriter)) error {
	return render(o.out, o.output(), o.v.GetBool("no-headers"), v, table)
}

// printError writes the error for a human, or as JSON on stderr with -o
// json so that scripts can parse failures too.
func (o *options) printError(err error, code int) {
	var ae *api.Error
	if pe, ok := api.PlanError(err); ok && !errors.As(err, &ae) {
		// Refused by the planner here, before the cluster was asked:
		// shown exactly as the cluster would have refused it.
		err = pe
	}
	// What the agent sent is masked already; what failed here (a URI
	// this command refused, a library's error) is masked the same way.
	if errors.As(err, &ae) {
		ae = api.Redacted(ae)
		if strings.HasPrefix(ae.Hint, "send {") {
			// A hint for an API caller, about the JSON to send: cdcctl
			// wrote that body, so it is no fix for its user.
			bare := *ae
			bare.Hint = ""
			ae = &bare
		}
	}
	if o.v.GetString("output") == formatJSON {
		body := map[string]any{"version": api.SchemaVersion, "exit_code": code}
		if ae != nil {
			body["error"] = ae
		} else {
			body["error"] = map[string]string{"code": clientErrorCode(code), "message": redact.Text(err.Error())}
		}
		b, _ := json.Marshal(body)
		fmt.Fprintln(o.errOut, string(b))
		return
	}
	if ae != nil {
		fmt.Fprintf(o.errOut, "Error: %s\n", ae.Message)
		for _, c := range ae.Changed {
			fmt.Fprintf(o.errOut, "  changed: %s\n", c)
		}
		if ae.Hint != "" {
			fmt.Fprintf(o.errOut, "Hint: %s\n", ae.Hint)
		}
		return
	}
	fmt.Fprintf(o.errOut, "Error: %s\n", redact.Text(err.Error()))
	if code == ExitUsage {
		fmt.Fprintln(o.errOut, "Run 'cdcctl --help' (or the command with --help) for usage.")
	}
}

func newRootCommand(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "cdcctl",
		Short: "Operate cdcctl change-data-capture clusters",
		Long: `cdcctl is the operator's tool for a cdcctl replication cluster: it shows the
cluster's state, computes plans (drain, move, split), submits them and
follows them. It talks to any cdc-agent's HTTP API; writes are forwarded
to the coordinator.

Configuration: flags, then CDCCTL_* environment variables (CDCCTL_SERVER,
CDCCTL_OUTPUT), then the config file (--config, default
~/.config/cdcctl/config.yaml), then defaults.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.loadConfig(cmd.Root().PersistentFlags()); err != nil {
				var ce contextError
				if !errors.As(err, &ce) || cmd.Parent() == nil || cmd.Parent().Name() != "config" {
					return usageErr(err)
				}
			}
			return usageErrOrNil(validFormat(o.output()))
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	pf := root.PersistentFlags()
	pf.String("server", DefaultServers, "agent API addresses, comma-separated; cdcctl fails over between them")
	pf.StringP("output", "o", formatTable, "output format: table, wide (more columns), json, yaml or jsonpath=TEMPLATE (kubectl's templates over the JSON form)")
	pf.Bool("no-headers", false, "leave out the header line of lists (table and wide)")
	pf.String("config", "", "config file (default ~/.config/cdcctl/config.yaml if it exists)")
	pf.String("context", "", "the config file's context (named cluster) to use instead of its current-context")
	pf.Duration("request-timeout", 30*time.Second, "timeout of one API request")
	pf.String("token-file", "", "file holding the bearer token for agents that check tokens (or CDCCTL_TOKEN)")
	pf.String("ca-file", "", "CA certificates (PEM) to trust for https:// agent addresses (or CDCCTL_CA_FILE)")
	o.tokenFile = pf.Lookup("token-file")
	for _, name := range []string{"server", "output", "no-headers", "config", "context", "request-timeout", "token-file", "ca-file"} {
		_ = o.v.BindPFlag(name, pf.Lookup(name))
	}
	o.v.SetEnvPrefix("CDCCTL")
	o.v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	o.v.AutomaticEnv()
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{formatTable, formatWide, formatJSON, formatYAML, formatJSONPath}, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace))

	root.AddCommand(
		newVersionCommand(o),
		newClusterCommand(o),
		newCaptureCommand(o),
		newCoordinatorCommand(o),
		newChangefeedCommand(o),
		newPartitionCommand(o),
		newVerifyCommand(o),
		newDrainCommand(o),
		newRolloutCommand(o),
		newPlanCommand(o),
		newPlaygroundCommand(o),
		newConfigCommand(o),
	)
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return o.contextNames(), cobra.ShellCompDirectiveNoFileComp
	})
	root.InitDefaultCompletionCmd()
	completeArgsAndFlags(o, root)
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes a command group given an unknown
// subcommand ("cdcctl partition frobnicate") a usage error (exit 64),
// as the root is: cobra would print the group's help and exit 0, and a
// script with a typo would go on as if it had run. A group alone still
// prints its help.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if cmd.Runnable() || !cmd.HasSubCommands() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErr(fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
		}
		return cmd.Help()
	}
}

func usageErrOrNil(err error) error {
	if err == nil {
		return nil
	}
	return usageErr(err)
}

// loadConfig reads the config file: the one named, or the default one if
// it exists. A named file that cannot be read is an error.
func (o *options) loadConfig(keys *pflag.FlagSet) error {
	path := o.v.GetString("config")
	if path == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return o.applyContext("")
		}
		def := filepath.Join(dir, "cdcctl", "config.yaml")
		if _, err := os.Stat(def); err != nil {
			return o.applyContext("")
		}
		path = def
	}
	if err := configfile.CheckSections(path, configExtraKeys, configSections, keys); err != nil {
		return fmt.Errorf("read config file %s: %w", path, err)
	}
	o.v.SetConfigFile(path)
	if err := o.v.ReadInConfig(); err != nil {
		return fmt.Errorf("read config file %s: %w", path, err)
	}
	return o.applyContext(path)
}
