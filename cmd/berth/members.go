package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/host"
	"github.com/spf13/cobra"
)

// memberInfo is one live member as "berth members --json" prints it: its
// registered record and the jobs the published assignment gives it.
type memberInfo struct {
	ID         string    `json:"id"`
	Protocol   string    `json:"protocol"`
	Connectors []string  `json:"connectors"` // declared static.connectors
	Tasks      []string  `json:"tasks"`      // declared static.tasks
	Addr       string    `json:"addr"`
	Started    time.Time `json:"started"`
	Jobs       []string  `json:"jobs"` // assigned job IDs, sorted
}

// membersOutput is "berth members --json": the live members and the
// published assignment (generation 0 and leader "" when none yet).
type membersOutput struct {
	Generation int64             `json:"generation"`
	Leader     string            `json:"leader"`
	Members    []memberInfo      `json:"members"`
	Unassigned map[string]string `json:"unassigned"` // job ID -> reason
	Conflicts  []conflictInfo    `json:"conflicts"`
}

// conflictInfo is a job declared by more than one live member (rule 4), as
// GET /v1/assignment shapes it.
type conflictInfo struct {
	Job     string   `json:"job"`
	Members []string `json:"members"` // declaring member IDs, sorted
	Winner  string   `json:"winner"`  // the member that runs it (lowest ID)
}

func membersCmd(configPath *string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "members",
		Short: "List the cluster's members and the published assignment",
		Long: `List the live members of the cluster and the published assignment. The
table has ID PROTOCOL CONNECTORS TASKS (the declared static assignment) JOBS
(how many jobs the published assignment gives the member) ADDR STARTED; above
it the generation and leader of the assignment, below it the unassigned jobs
with their reasons and the static conflicts.`,
		Example: `  berth members
  berth members --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var (
				recs []cluster.MemberRecord
				pub  cluster.Published
				name string
			)
			err := withStore(cmd.Context(), *configPath, host.Local(), func(ctx context.Context, c *cluster.Client) (err error) {
				name = c.Config().Name
				if recs, err = c.Members(ctx); err != nil {
					return err
				}
				pub, err = c.Assignment(ctx)
				return err
			})
			if err != nil {
				return err
			}
			out := membersFrom(recs, pub)
			if asJSON {
				printJSON(cmd.OutOrStdout(), out)
				return nil
			}
			printMembers(cmd.OutOrStdout(), out, name)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: generation, leader, members, unassigned, conflicts")
	return c
}

func membersFrom(recs []cluster.MemberRecord, pub cluster.Published) membersOutput {
	out := membersOutput{Generation: pub.Generation, Leader: pub.Leader, Members: []memberInfo{},
		Unassigned: map[string]string{}, Conflicts: []conflictInfo{}}
	for _, cf := range pub.Assignment.Conflicts {
		out.Conflicts = append(out.Conflicts, conflictInfo{Job: cf.Job, Members: cf.Members, Winner: cf.Winner})
	}
	for j, why := range pub.Assignment.Unassigned {
		out.Unassigned[j] = why
	}
	for _, r := range recs {
		jobs := append([]string{}, pub.Assignment.Members[r.ID]...)
		sort.Strings(jobs)
		out.Members = append(out.Members, memberInfo{ID: r.ID, Protocol: string(r.Protocol),
			Connectors: nonNil(r.Connectors), Tasks: nonNil(r.Tasks), Addr: r.Addr, Started: r.Started, Jobs: jobs})
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func printMembers(w io.Writer, m membersOutput, clusterName string) {
	if m.Generation == 0 {
		fmt.Fprintf(w, "cluster %s: no assignment published yet\n", clusterName)
	} else {
		fmt.Fprintf(w, "cluster %s: assignment generation %d, leader %s\n", clusterName, m.Generation, m.Leader)
	}
	list := func(s []string) string {
		if len(s) == 0 {
			return "-"
		}
		return strings.Join(s, ",")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROTOCOL\tCONNECTORS\tTASKS\tJOBS\tADDR\tSTARTED")
	for _, r := range m.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Protocol, list(r.Connectors), list(r.Tasks),
			len(r.Jobs), r.Addr, r.Started.Local().Format(time.RFC3339))
	}
	tw.Flush()
	if len(m.Members) == 0 {
		fmt.Fprintln(w, "no live members")
	}
	jobs := make([]string, 0, len(m.Unassigned))
	for j := range m.Unassigned {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	for _, j := range jobs {
		fmt.Fprintf(w, "unassigned %s: %s\n", j, m.Unassigned[j])
	}
	for _, cf := range m.Conflicts {
		fmt.Fprintf(w, "conflict %s: declared by %s; runs on %s\n", cf.Job, strings.Join(cf.Members, ", "), cf.Winner)
	}
}
