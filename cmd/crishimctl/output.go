package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// outputFormat is -o: table, json or yaml.
type outputFormat string

func (o *outputFormat) String() string { return string(*o) }
func (o *outputFormat) Type() string   { return "format" }

func (o *outputFormat) Set(s string) error {
	switch s {
	case "table", "json", "yaml":
	case "text": // status's name for table before crishimctl had yaml
		s = "table"
	default:
		return fmt.Errorf("want table, json or yaml")
	}
	*o = outputFormat(s)
	return nil
}

// addOutputFlag registers -o on a command with output.
func addOutputFlag(cmd *cobra.Command) *outputFormat {
	o := outputFormat("table")
	cmd.Flags().VarP(&o, "output", "o", "output format: table, json or yaml (field names in docs/crishimctl.md)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return &o
}

// printProto writes a crishim.v1 answer as JSON or YAML, with every field
// (zero values too, so that scripts see a fixed set of names) under its
// proto JSON name, or as a table.
func printProto(out io.Writer, o outputFormat, m proto.Message, table func(io.Writer) error) error {
	if o == "table" {
		return table(out)
	}
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return printJSON(out, o, b)
}

// printValue writes v (with json tags) as JSON or YAML, or as a table.
func printValue(out io.Writer, o outputFormat, v any, table func(io.Writer) error) error {
	if o == "table" {
		return table(out)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return printJSON(out, o, b)
}

// printJSON writes compact JSON indented, or as YAML: protojson's own
// spacing varies on purpose, crishimctl's does not.
func printJSON(out io.Writer, o outputFormat, b []byte) error {
	if o == "yaml" {
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		_, err = out.Write(y)
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	buf.WriteByte('\n')
	_, err := buf.WriteTo(out)
	return err
}
