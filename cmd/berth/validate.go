package main

import (
	"fmt"
	"io"

	"github.com/berthd/berth/config"
	"github.com/spf13/cobra"
)

func validateCmd(configPath *string) *cobra.Command {
	var strict bool
	c := &cobra.Command{
		Use:   "validate",
		Short: "Check a configuration file against this host and print its plan",
		Long: `Check the agent file: every key, type, unit and limit, the limits against
this host (CPUs online, block devices), and each job's user, program
(absolute, or on the job's PATH) and working directory on this host. Every
problem is printed as FILE:LINE:COL: key: message. The files the agent
reads for its security are checked too, each a problem of its key:
agent.web_config_file as the agent loads it (certificates, client CA,
bcrypt hashes), the ca, cert and key of every tls table as a client loads
them, and every password_file and env_file (only root may read or write
them).

A valid file's plan follows: the jobs this agent runs on this host, each
with its limits resolved to the numbers the kernel gets (cores and the CFS
quota/period in µs, bytes, devices as major:minor), the sharing groups
with theirs, and the jobs the file defines that this agent does not run,
with the reason. In a cluster the leader's assignment decides; the plan
shows this agent as if it were the only member.

Warnings (on standard error) are values that validate but may not mean
what was meant: a [static] entry that names no job of the file (a typo, a
task ID without its index, an index out of range) and a byte size with a
one-letter unit ("1G" is 10^9 bytes here; systemd reads 2^30).

Exit status: 0 when valid, 2 when not (or, with --strict, when there is a
warning).`,
		Example: `  berth validate --config /etc/berth/berth.toml
  berth validate --strict -c berth.toml     # warnings are errors`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host := agentHost()
			cfg, err := config.Load(*configPath, host)
			if err != nil {
				return configError(err)
			}
			printWarnings(cmd.ErrOrStderr(), cfg.Warnings)
			if strict && len(cfg.Warnings) > 0 {
				return configError(fmt.Errorf("%s: not valid with --strict: %s", *configPath, plural(len(cfg.Warnings), "warning")))
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: valid: %s, %s, %s", *configPath, plural(len(cfg.Connectors), "connector"),
				plural(len(cfg.Groups), "group"), plural(len(cfg.Jobs()), "job"))
			if n := len(cfg.Warnings); n > 0 {
				fmt.Fprintf(out, ", %s", plural(n, "warning"))
			}
			fmt.Fprintln(out)
			printHostPlan(out, cfg, host)
			return nil
		},
	}
	c.Flags().BoolVar(&strict, "strict", false, "treat warnings as errors (exit 2)")
	return c
}

// printWarnings prints each warning as "warning: FILE:LINE:COL: key: message".
func printWarnings(w io.Writer, ws []*config.Problem) {
	for _, p := range ws {
		fmt.Fprintf(w, "warning: %v\n", p)
	}
}

// plural is "1 job", "2 jobs", "0 jobs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
