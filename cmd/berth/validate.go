package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/berthd/berth/limits"
)

// runValidate checks a configuration file: exit 0 and a summary when it is
// valid, exit 1 and every error as FILE:LINE:COL: key: message when not.
func runValidate(args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	config := fs.String("config", defaultConfig, "configuration file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := limits.Load(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s: valid: %d connectors, %d groups, %d jobs\n", *config, len(cfg.Connectors), len(cfg.Groups), len(cfg.Jobs()))
	return 0
}
