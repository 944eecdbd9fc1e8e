package main

import (
	"encoding/json"
	"io"

	"github.com/berthd/berth/limits"
)

// printJSON writes v as indented JSON (the --json of every command).
func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// bytesHuman prints n in binary units (KiB, MiB, GiB), as limits are
// written: "512B", "32.0MiB".
func bytesHuman(n uint64) string { return limits.FormatBytes(n, "") }
