package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/supervisor"
)

// runStatus prints the jobs of a running agent as a table, read from its
// GET /v1/jobs. The address is --addr, else agent.listen of --config.
func runStatus(args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	config := fs.String("config", defaultConfig, "configuration file (for agent.listen)")
	addr := fs.String("addr", "", "agent address HOST:PORT (default: agent.listen of --config)")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *addr == "" {
		listen, err := listenOf(*config)
		if err != nil {
			fmt.Fprintf(os.Stderr, "berth status: no --addr, and %v\n", err)
			return 2
		}
		*addr = listen
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + *addr + "/v1/jobs")
	if err != nil {
		fmt.Fprintf(os.Stderr, "berth status: is the agent running? %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "berth status: GET /v1/jobs: %s\n", resp.Status)
		return 1
	}
	var jobs []supervisor.JobInfo
	if err := json.NewDecoder(resp.Body).Decode(&jobs); err != nil {
		fmt.Fprintf(os.Stderr, "berth status: decode /v1/jobs: %v\n", err)
		return 1
	}
	if *asJSON {
		printJSON(jobs)
		return 0
	}
	printJobs(jobs)
	return 0
}

func printJobs(jobs []supervisor.JobInfo) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tKIND\tGROUP\tSTATE\tPID\tRESTARTS\tCPU\tMEMORY\tLIMIT\tOOM\tLAST EXIT\tCGROUP")
	for _, j := range jobs {
		cpu, mem, limit, oom := "-", "-", "-", "-"
		if u := j.Usage; u != nil {
			cpu = fmt.Sprintf("%.1fs", u.CPUSeconds)
			mem = bytesHuman(u.MemoryBytes)
			if u.MemoryLimitBytes > 0 {
				limit = bytesHuman(u.MemoryLimitBytes)
			}
			oom = fmt.Sprint(u.OOMKills)
		}
		pid := "-"
		if j.PID > 0 {
			pid = fmt.Sprint(j.PID)
		}
		last := "-"
		if j.LastExit != nil {
			last = j.LastExit.Reason
		}
		state := string(j.State)
		if j.Reason != "" {
			state += " (" + j.Reason + ")"
		}
		group := j.Group
		if group == "" {
			group = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Kind, group,
			strings.TrimSpace(state), pid, j.Restarts, cpu, mem, limit, oom, last, j.Cgroup)
	}
	tw.Flush()
}

// bytesHuman prints n in binary units (KiB, MiB, GiB), as limits are written.
func bytesHuman(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// listenOf returns agent.listen of the configuration file. A file that does
// not validate (a refused reload is when status is most needed) is still
// read for that one key, with a warning.
func listenOf(path string) (string, error) {
	cfg, err := limits.Load(path)
	if err == nil {
		return cfg.Agent.Listen, nil
	}
	var raw struct {
		Agent struct {
			Listen string `toml:"listen"`
		} `toml:"agent"`
	}
	if _, derr := toml.DecodeFile(path, &raw); derr != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "berth status: warning: %s does not validate (the agent keeps its last good configuration):\n%v\n", path, err)
	if raw.Agent.Listen == "" {
		return limits.DefaultListen, nil
	}
	return raw.Agent.Listen, nil
}
