package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berthd/berth/limits"
)

// Workload is a set of sharing groups and connectors: the [[group]] and
// [[connector]] blocks of an agent file or of a connector file, or the
// definitions kept in the cluster store.
type Workload struct {
	Groups     []Group
	Connectors []Connector
}

// Group is a [[group]]: a sharing group whose limits cap the sum of its
// jobs on one host (FLINK-3315's named slot-sharing group).
type Group struct {
	Name   string
	Limits limits.Limits
}

// Connector is a [[connector]].
type Connector struct {
	// Name is the connector's name and the job ID of its own job.
	Name string
	// Tasks is the number of task jobs, <Name>-0 .. <Name>-<Tasks-1>.
	Tasks int
	// Group names a [[group]], or "".
	Group string
	// Run is the connector's own job ([connector.run]); nil when absent.
	Run *Process
	// Task is the template of each task job ([connector.task]); nil when
	// absent, which is allowed only when Tasks is 0.
	Task *Process
}

// Process is how a job's worker is run: [connector.run] or [connector.task].
type Process struct {
	// Command is argv; Command[0] is an absolute path or a name resolved
	// through PATH when the worker starts. In a Connector it holds the
	// unexpanded ${...} references; in a Job they are expanded.
	Command []string
	// Env is extra environment (name -> value) for the worker.
	Env map[string]string
	// EnvFile is the absolute path of a file of KEY=VALUE lines (ReadEnvFile)
	// read on the host that runs the job, whose values are added to Env
	// and override it, as systemd's EnvironmentFile= overrides
	// Environment=; "" for none. The definition holds the path only.
	EnvFile string
	// User is "" (the agent's user), "user" or "user:group", names or
	// numeric IDs, resolved when the worker starts.
	User string
	// Dir is the absolute working directory, or "" for "/".
	Dir string
	// Restart is the restart policy (default DefaultRestart).
	Restart Restart
	// StopTimeout overrides [agent] stop_timeout when non-zero; in a Job it
	// holds the effective value.
	StopTimeout time.Duration
	// Limits are the job's resource limits.
	Limits limits.Limits
}

// Validate checks the rules that span a workload's groups and connectors:
// duplicate group or connector names, a job ID used twice (connector "a-0"
// and task 0 of connector "a"), and a connector naming a group that is not
// defined. It returns nil or *Problems whose keys are "group[i]..." and
// "connector[i]..." paths into w and whose Def names the definition each
// problem belongs to (for a job ID used twice: the connector whose task
// clashes). Each connector's and group's own fields are checked when they
// are parsed (ParseConnector, ParseGroup, Parse).
func (w *Workload) Validate() error {
	var errs problemList
	w.check(&errs)
	return errs.result("", nil)
}

// check records the cross-definition problems of w in errs.
func (w *Workload) check(errs *problemList) {
	groups := map[string]int{}
	for i, g := range w.Groups {
		if g.Name == "" {
			continue
		}
		if j, dup := groups[g.Name]; dup {
			errs.addDef(DefGroup, g.Name, fmt.Sprintf("group[%d]", i), "name", "group %q is already defined by group[%d]", g.Name, j)
			continue
		}
		groups[g.Name] = i
	}
	names := map[string]int{}
	for i, c := range w.Connectors {
		if c.Name == "" {
			continue
		}
		if j, dup := names[c.Name]; dup {
			errs.addDef(DefConnector, c.Name, fmt.Sprintf("connector[%d]", i), "name", "connector %q is already defined by connector[%d]", c.Name, j)
			continue
		}
		names[c.Name] = i
	}
	// Job IDs: every connector name is a job ID (whether or not it has a
	// [connector.run]), and so is every task ID.
	owner := map[string]string{}
	for _, c := range w.Connectors {
		if c.Name != "" {
			owner[c.Name] = fmt.Sprintf("connector %q", c.Name)
		}
	}
	for i, c := range w.Connectors {
		if c.Name == "" || names[c.Name] != i {
			continue
		}
		path := fmt.Sprintf("connector[%d]", i)
		for n := 0; n < c.Tasks; n++ {
			id := TaskID(c.Name, n)
			if other, clash := owner[id]; clash {
				errs.addDef(DefConnector, c.Name, path, "tasks", "task %d has job ID %q, which %s already uses", n, id, other)
				continue
			}
			owner[id] = fmt.Sprintf("task %d of connector %q", n, c.Name)
		}
		if c.Group != "" {
			if _, ok := groups[c.Group]; !ok {
				errs.addDef(DefConnector, c.Name, path, "group", "group %q is not defined by any [[group]]", c.Group)
			}
		}
	}
}

// checkStatic checks [static] against the connectors: a tasks entry naming
// a known connector's task must be in range. Entries naming connectors that
// do not exist are allowed (docs/design.md, assignment rule 3).
func (c *Config) checkStatic(errs *problemList) {
	byName := map[string]Connector{}
	for _, k := range c.Connectors {
		byName[k.Name] = k
	}
	seen := map[string]int{}
	for i, s := range c.Static.Connectors {
		if err := validName(s); err != nil {
			errs.add(fmt.Sprintf("static.connectors[%d]", i), "connector name %v", err)
		}
		if j, dup := seen[s]; dup {
			errs.add(fmt.Sprintf("static.connectors[%d]", i), "%q is declared twice (also static.connectors[%d])", s, j)
		}
		seen[s] = i
	}
	seen = map[string]int{}
	for i, s := range c.Static.Tasks {
		key := fmt.Sprintf("static.tasks[%d]", i)
		if err := validName(s); err != nil {
			errs.add(key, "task ID %v", err)
			continue
		}
		if j, dup := seen[s]; dup {
			errs.add(key, "%q is declared twice (also static.tasks[%d])", s, j)
		}
		seen[s] = i
		for cut := strings.LastIndexByte(s, '-'); cut > 0; cut = strings.LastIndexByte(s[:cut], '-') {
			k, ok := byName[s[:cut]]
			if !ok {
				continue
			}
			n, err := strconv.Atoi(s[cut+1:])
			if err != nil || n < 0 || strconv.Itoa(n) != s[cut+1:] {
				continue
			}
			if n >= k.Tasks {
				errs.add(key, "task %d of connector %q is out of range (tasks = %d)", n, k.Name, k.Tasks)
			}
			break
		}
	}
}
