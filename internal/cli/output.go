package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/util/jsonpath"
)

// Output formats of -o.
const (
	formatTable = "table"
	formatWide  = "wide"
	formatJSON  = "json"
	formatYAML  = "yaml"
	// formatJSONPath prefixes a template: -o jsonpath='{.captures[*].id}'.
	formatJSONPath = "jsonpath="
)

func validFormat(f string) error {
	switch f {
	case formatTable, formatWide, formatJSON, formatYAML:
		return nil
	}
	if tmpl, ok := strings.CutPrefix(f, formatJSONPath); ok {
		_, err := parseJSONPath(tmpl)
		return err
	}
	return fmt.Errorf("unknown output format %q: use -o table, wide, json, yaml or jsonpath=TEMPLATE (e.g. -o jsonpath='{.changefeeds[*].id}')", f)
}

func parseJSONPath(tmpl string) (*jsonpath.JSONPath, error) {
	if tmpl == "" {
		return nil, fmt.Errorf("-o jsonpath= needs a template, e.g. -o jsonpath='{.changefeeds[*].id}'")
	}
	jp := jsonpath.New("output")
	if err := jp.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("-o jsonpath=%s: %v; templates are kubectl's, e.g. '{.changefeeds[*].id}' or '{range .captures[*]}{.id}{\"\\n\"}{end}'", tmpl, err)
	}
	return jp, nil
}

// tableWriter aligns columns of the human output, and knows whether the
// operator asked for wide columns (-o wide) and for no header line
// (--no-headers, for scripts reading a list).
type tableWriter = *table

type table struct {
	*tabwriter.Writer
	wide, noHeaders bool
}

// header writes a list's header line unless --no-headers.
func (t *table) header(line string) {
	if !t.noHeaders {
		fmt.Fprintln(t, line)
	}
}

// render writes v in the chosen format; table draws the human form.
// JSON, YAML and jsonpath come from the same versioned types, so they
// carry the same field names and the same "version".
func render(w io.Writer, format string, noHeaders bool, v any, draw func(tw tableWriter)) error {
	switch format {
	case formatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case formatYAML:
		return writeYAML(w, v)
	}
	if tmpl, ok := strings.CutPrefix(format, formatJSONPath); ok {
		return writeJSONPath(w, tmpl, v)
	}
	tw := &table{Writer: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), wide: format == formatWide, noHeaders: noHeaders}
	draw(tw)
	return tw.Flush()
}

// writeJSONPath applies a kubectl-style template to v's JSON form (the
// names -o json shows), and ends the output with a newline.
func writeJSONPath(w io.Writer, tmpl string, v any) error {
	jp, err := parseJSONPath(tmpl)
	if err != nil {
		return usageErr(err)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// Numbers stay as written: a position (checkpoint_ts) is a uint64
	// that a float64 would round and print as 4.7e+17.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	var out bytes.Buffer
	if err := jp.Execute(&out, doc); err != nil {
		return usageErr(fmt.Errorf("-o jsonpath=%s: %v (see -o json for the names)", tmpl, err))
	}
	if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		out.WriteByte('\n')
	}
	_, err = w.Write(out.Bytes())
	return err
}

// writeYAML goes through JSON so YAML keys are the JSON names, in the same
// order, without a second set of struct tags.
func writeYAML(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(data, &node); err != nil {
		return err
	}
	blockStyle(&node)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// blockStyle undoes the flow style that JSON input gives every node.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = 0
	}
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// age renders how long ago t was, the way operators read uptimes.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
