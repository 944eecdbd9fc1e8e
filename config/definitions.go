package config

import (
	"bytes"
	"fmt"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// Defs holds the workload definitions of one file, each as the standalone
// TOML text that the cluster store keeps: one [[connector]] or [[group]]
// block with its keys moved to the top level ("name = ...", "tasks = ...",
// "[run]", "[task.limits]"), exactly the input of ParseConnector and
// ParseGroup.
type Defs struct {
	// Connectors maps connector name -> its definition's TOML text.
	Connectors map[string][]byte
	// Groups maps sharing group name -> its definition's TOML text.
	Groups map[string][]byte
	// Workload is the file's validated [[group]] and [[connector]] blocks,
	// in file order, as Parse or ParseConnectors returned them.
	Workload spec.Workload
	// Warnings are the file's warnings (Config.Warnings).
	Warnings []*Problem
}

// Definitions validates the file data (named file in messages) against host
// and splits
// its [[connector]] and [[group]] blocks into standalone definitions.
//
// data is either an agent file (it has any top-level key besides "group"
// and "connector", e.g. [agent], [static] or [cluster]: validated with
// Parse) or a connectors-only file (only [[group]] and [[connector]]:
// validated with ParseConnectors, the input of "berth apply"). Tables other
// than [[group]] and [[connector]] are validated but not returned.
//
// Each definition's text is the TOML encoding (BurntSushi/toml's encoder,
// keys sorted) of that block's raw decoded table, so values keep the units
// the operator wrote ("512MiB" stays "512MiB", "1.5" cores stays 1.5); the
// same input always gives the same bytes, so a store can compare bodies to
// tell an update from no change.
//
// It returns *Problems, every entry as "FILE:LINE:COL: key: message" with
// positions in the whole file, when the file does not validate; and a plain
// error, naming the definition, when an encoded definition does not parse
// back (a bug, never expected).
func Definitions(file string, data []byte, host *host.Host) (*Defs, error) {
	root, _, err := decodeTOML(file, data)
	if err != nil {
		return nil, err
	}
	agentFile := false
	for k := range root {
		if k != "group" && k != "connector" {
			agentFile = true
		}
	}
	defs := &Defs{Connectors: map[string][]byte{}, Groups: map[string][]byte{}}
	if agentFile {
		cfg, err := Parse(file, data, host)
		if err != nil {
			return nil, err
		}
		defs.Workload, defs.Warnings = cfg.Workload, cfg.Warnings
	} else {
		w, warns, err := parseConnectors(file, data, host)
		if err != nil {
			return nil, err
		}
		defs.Workload, defs.Warnings = *w, warns
	}
	// The file validated, so "group" and "connector" are arrays of tables
	// whose every element has a valid, unique name, one per parsed entry.
	if len(blocks(root, "group")) != len(defs.Workload.Groups) || len(blocks(root, "connector")) != len(defs.Workload.Connectors) {
		return nil, fmt.Errorf("%s: [[group]]/[[connector]] blocks do not match the parsed workload", file)
	}
	for i, block := range blocks(root, "group") {
		name := defs.Workload.Groups[i].Name
		body, err := encodeDef(block)
		if err != nil {
			return nil, fmt.Errorf("%s: group %s: %w", file, name, err)
		}
		g, err := ParseGroup(file+": group "+name, body, nil)
		if err != nil || g.Name != name {
			return nil, fmt.Errorf("%s: group %s: encoded definition does not parse back: %v", file, name, err)
		}
		defs.Groups[name] = body
	}
	for i, block := range blocks(root, "connector") {
		name := defs.Workload.Connectors[i].Name
		body, err := encodeDef(block)
		if err != nil {
			return nil, fmt.Errorf("%s: connector %s: %w", file, name, err)
		}
		c, err := ParseConnector(file+": connector "+name, body, nil)
		if err != nil || c.Name != name {
			return nil, fmt.Errorf("%s: connector %s: encoded definition does not parse back: %v", file, name, err)
		}
		defs.Connectors[name] = body
	}
	return defs, nil
}

// blocks returns the elements of the array of tables root[key], in file
// order; nil when absent.
func blocks(root map[string]any, key string) []map[string]any {
	switch v := root[key].(type) {
	case []map[string]any:
		return v
	case []any:
		out := make([]map[string]any, 0, len(v))
		for _, e := range v {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}

// encodeDef encodes one decoded block as a TOML document.
func encodeDef(block map[string]any) ([]byte, error) {
	var b bytes.Buffer
	enc := toml.NewEncoder(&b)
	enc.Indent = ""
	if err := enc.Encode(block); err != nil {
		return nil, fmt.Errorf("encode definition: %w", err)
	}
	return b.Bytes(), nil
}
