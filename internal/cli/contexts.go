package cli

// Contexts: named clusters in cdcctl's config file, as kubeconfig has
// them, so one operator can switch between several clusters:
//
//	current-context: prod
//	contexts:
//	  prod:
//	    server: 10.0.0.1:8301,10.0.0.2:8301
//	    ca-file: /etc/cdcctl/prod-ca.pem
//	    token-file: /etc/cdcctl/prod.token
//	  staging:
//	    server: 10.1.0.1:8301
//
// The chosen context (--context, CDCCTL_CONTEXT, else current-context)
// sets its keys at the config file's precedence: flags and environment
// still override them.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/configfile"
)

// contextKeys are what a context may set: where and how to reach its
// cluster.
var contextKeys = []string{"server", "ca-file", "token-file", "request-timeout"}

// configSections are the config file's nested parts, for its key check.
var configSections = []configfile.Section{{Name: "contexts", Keys: contextKeys}}

// configExtraKeys are the config file's keys that are not flags.
var configExtraKeys = []string{"current-context"}

// contextName is the context in use: --context or CDCCTL_CONTEXT, else
// the file's current-context; "" for none.
func (o *options) contextName() string {
	if n := o.v.GetString("context"); n != "" {
		return n
	}
	return o.v.GetString("current-context")
}

// contextNames are the contexts of the config file, sorted.
func (o *options) contextNames() []string {
	var names []string
	for n := range o.v.GetStringMap("contexts") {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// contextError is a context that cannot be used; the config commands,
// which fix it, run anyway.
type contextError struct{ error }

// applyContext merges the chosen context's keys into the config file's
// layer. path is the config file ("" if none).
func (o *options) applyContext(path string) error {
	if err := o.mergeContext(path); err != nil {
		return contextError{err}
	}
	return nil
}

func (o *options) mergeContext(path string) error {
	name := o.contextName()
	if name == "" {
		return nil
	}
	if path == "" {
		return fmt.Errorf("context %q: there is no config file to hold contexts; create %s with a contexts: section (see docs/cli.md)", name, defaultConfigPath())
	}
	// viper folds keys to lower case; so are context names.
	raw, ok := o.v.GetStringMap("contexts")[strings.ToLower(name)]
	if !ok {
		known := o.contextNames()
		if len(known) == 0 {
			return fmt.Errorf("context %q: config file %s has no contexts: section", name, path)
		}
		return fmt.Errorf("context %q is not in config file %s; its contexts: %s", name, path, strings.Join(known, ", "))
	}
	m, _ := raw.(map[string]any)
	return o.v.MergeConfigMap(m)
}

func defaultConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "~/.config/cdcctl/config.yaml"
	}
	return filepath.Join(dir, "cdcctl", "config.yaml")
}

// ContextList is `cdcctl config get-contexts -o json`.
type ContextList struct {
	Version  int           `json:"version"`
	Current  string        `json:"current,omitempty"`
	Contexts []ContextInfo `json:"contexts"`
}

// ContextInfo is one context.
type ContextInfo struct {
	Name           string `json:"name"`
	Server         string `json:"server,omitempty"`
	CAFile         string `json:"ca_file,omitempty"`
	TokenFile      string `json:"token_file,omitempty"`
	RequestTimeout string `json:"request_timeout,omitempty"`
}

func newConfigCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "The config file's contexts: named clusters to switch between",
		Long: `Contexts are named clusters in cdcctl's config file, each with its
servers, CA file, token file and request timeout:

  current-context: prod
  contexts:
    prod:
      server: 10.0.0.1:8301,10.0.0.2:8301
      ca-file: /etc/cdcctl/prod-ca.pem
      token-file: /etc/cdcctl/prod.token
    staging:
      server: 10.1.0.1:8301

--context (or CDCCTL_CONTEXT) picks one for a command; use-context makes
one the default. Flags and environment variables still override what a
context sets.`,
	}
	list := &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the one in use",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			out := ContextList{Version: api.SchemaVersion, Current: strings.ToLower(o.contextName())}
			all := o.v.GetStringMap("contexts")
			for _, n := range o.contextNames() {
				m, _ := all[n].(map[string]any)
				str := func(k string) string {
					switch v := m[k].(type) {
					case nil:
						return ""
					case []any:
						parts := make([]string, len(v))
						for i, p := range v {
							parts[i] = fmt.Sprint(p)
						}
						return strings.Join(parts, ",")
					default:
						return fmt.Sprint(v)
					}
				}
				out.Contexts = append(out.Contexts, ContextInfo{Name: n, Server: str("server"), CAFile: str("ca-file"), TokenFile: str("token-file"), RequestTimeout: str("request-timeout")})
			}
			return o.render(out, func(tw tableWriter) {
				tw.header("CURRENT\tNAME\tSERVER\tCA FILE\tTOKEN FILE")
				for _, c := range out.Contexts {
					mark := ""
					if c.Name == out.Current {
						mark = "*"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", mark, c.Name, orDash(c.Server), orDash(c.CAFile), orDash(c.TokenFile))
				}
			})
		},
	}
	current := &cobra.Command{
		Use:   "current-context",
		Short: "Print the context in use",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			name := o.contextName()
			if name == "" {
				return fmt.Errorf("no context is in use: set current-context with 'cdcctl config use-context NAME'")
			}
			return o.render(contextInUse{Version: 1, CurrentContext: name}, func(tw tableWriter) { fmt.Fprintln(tw, name) })
		},
	}
	use := &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make NAME the context every command uses (written to the config file)",
		Args:  exactArgs(1, "the context's name (see 'cdcctl config get-contexts')"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return o.contextNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			path := o.v.ConfigFileUsed()
			if path == "" {
				return usageErr(fmt.Errorf("there is no config file: create %s with a contexts: section (see docs/cli.md)", defaultConfigPath()))
			}
			name := strings.ToLower(args[0])
			if _, ok := o.v.GetStringMap("contexts")[name]; !ok {
				return usageErr(fmt.Errorf("context %q is not in config file %s; its contexts: %s", args[0], path, strings.Join(o.contextNames(), ", ")))
			}
			if err := setCurrentContext(path, name); err != nil {
				return err
			}
			return o.render(contextInUse{Version: 1, CurrentContext: name}, func(tw tableWriter) {
				fmt.Fprintf(tw, "Switched to context %q.\n", name)
			})
		},
	}
	cmd.AddCommand(list, current, use)
	return cmd
}

// setCurrentContext writes current-context into the YAML file at path,
// keeping everything else in it (comments too), and replaces the file
// whole.
func setCurrentContext(path, name string) error {
	body, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s is not a YAML mapping; current-context cannot be set in it", path)
	}
	top := doc.Content[0]
	found := false
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "current-context" {
			top.Content[i+1].SetString(name)
			found = true
		}
	}
	if !found {
		k, v := &yaml.Node{}, &yaml.Node{}
		k.SetString("current-context")
		v.SetString(name)
		top.Content = append([]*yaml.Node{k, v}, top.Content...)
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".cdcctl-config-*")
	if err != nil {
		return fmt.Errorf("write config file %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("write config file %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// contextInUse is what current-context and use-context say (-o json).
type contextInUse struct {
	Version        int    `json:"version"`
	CurrentContext string `json:"current_context"`
}
