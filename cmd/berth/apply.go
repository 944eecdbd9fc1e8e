package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/workload"
	"github.com/spf13/cobra"
)

func applyCmd(configPath *string) *cobra.Command {
	var file string
	var dryRun, prune bool
	c := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Store connectors and groups in the cluster",
		Long: `Store the [[group]] and [[connector]] blocks of FILE in the cluster store.

FILE is validated first (every problem printed as FILE:LINE:COL: key:
message; exit 2, nothing stored). Then each definition is created, updated
(only when its text changed) or left unchanged and, with --prune (the
default), stored connectors and groups that FILE does not define are
deleted, so the store ends up holding exactly FILE's workload. Writes are
ordered so that no agent ever sees a connector whose group is missing; an
update restarts or updates only the jobs it changes.

--config names the agent file whose [cluster] (and, for an embedded etcd,
agent.data_dir) says which store to use.`,
		Example: `  berth apply -f connectors.toml --dry-run
  berth apply -f connectors.toml
  berth apply -f connectors.toml --prune=false    # create and update only`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError("-f FILE is required\nUsage: %s", cmd.UseLine())
			}
			var data []byte
			var err error
			name := file
			if file == "-" {
				name = "<stdin>"
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return err
			}
			// The definitions are for the whole cluster: checked against this
			// host's CPUs and devices, not its users and programs.
			host := host.Local().LimitsOnly()
			defs, err := config.Definitions(name, data, host)
			if err != nil {
				return configError(fmt.Errorf("%w\n%s is not valid; nothing was stored", err, name))
			}
			printWarnings(cmd.ErrOrStderr(), defs.Warnings)
			var plan workload.Plan
			err = withStore(cmd.Context(), *configPath, host, func(ctx context.Context, c *cluster.Client) (err error) {
				if dryRun {
					plan, err = workload.NewPlan(ctx, c.Store, defs, prune, host)
				} else {
					plan, err = workload.Apply(ctx, c.Store, defs, prune, host)
				}
				return err
			})
			wrote := len(plan.Created)+len(plan.Updated)+len(plan.Adopted)+len(plan.Deleted) > 0
			var ee *exitError
			if errors.As(err, &ee) {
				return err // the agent file does not validate
			}
			if err == nil || dryRun || wrote {
				printPlan(cmd.OutOrStdout(), plan, dryRun)
			}
			if err != nil && !dryRun && !wrote {
				return fmt.Errorf("%w\nnothing was stored", err)
			}
			return err
		},
	}
	c.Flags().StringVarP(&file, "file", "f", "", `connectors file of [[group]] and [[connector]] blocks ("-" for standard input)`)
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, store nothing")
	c.Flags().BoolVar(&prune, "prune", true, "delete stored connectors and groups that the file does not define")
	return c
}

// printPlan prints one line per definition, then a summary; a dry run
// says what would be done.
func printPlan(w io.Writer, p workload.Plan, dryRun bool) {
	verbs := [5]string{"created", "updated", "adopted", "deleted", "unchanged"}
	if dryRun {
		verbs = [5]string{"would create", "would update", "would adopt", "would delete", "unchanged"}
	}
	for i, names := range [5][]string{p.Created, p.Updated, p.Adopted, p.Deleted, p.Unchanged} {
		for _, n := range names {
			fmt.Fprintf(w, "%s %s\n", verbs[i], n)
		}
	}
	adopted := ""
	if len(p.Adopted) > 0 {
		adopted = fmt.Sprintf(" (%d stored by an agent's file become yours: no agent deletes them)", len(p.Adopted))
	}
	if dryRun {
		fmt.Fprintf(w, "dry run, nothing stored: %d to create, %d to update, %d to adopt, %d to delete, %d unchanged%s\n",
			len(p.Created), len(p.Updated), len(p.Adopted), len(p.Deleted), len(p.Unchanged), adopted)
		return
	}
	fmt.Fprintf(w, "%d created, %d updated, %d adopted, %d deleted, %d unchanged%s\n",
		len(p.Created), len(p.Updated), len(p.Adopted), len(p.Deleted), len(p.Unchanged), adopted)
}
