// Package docgen writes berth's generated documentation, so that it cannot
// drift from the code: the configuration reference (docs/config.md and
// the man page berth.toml(5)) from the key table of package config
// (config.Sections), and one man page per command from the CLI's cobra
// command tree (cobra/doc). `berth gendocs` runs it; `make docs`
// refreshes docs/config.md and `make man` builds the man pages.
package docgen
