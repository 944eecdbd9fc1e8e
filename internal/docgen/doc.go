// Package docgen writes the documentation berth generates from its code.
//
// Generated, it cannot drift from the code: the configuration reference
// (docs/config.md and the man page berth.toml(5)) from the key table of
// package config (config.Sections), the metrics reference (docs/metrics.md)
// from the descriptors of package metrics (metrics.Reference), and one man
// page per command from the CLI's cobra command tree (cobra/doc). `berth
// gendocs` runs it; `make docs` refreshes docs/config.md and
// docs/metrics.md and `make man` builds the man pages. Its tests also hold
// the repository's documentation to the code: a stale reference, a TOML
// example with an unknown key or a false default, and a Markdown link or
// #anchor that does not resolve in a clone each fail.
package docgen
