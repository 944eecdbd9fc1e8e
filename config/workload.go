package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berthd/berth/spec"
)

// ValidateWorkload checks the rules that span a workload's groups and connectors:
// duplicate group or connector names, a job ID used twice (connector "a-0"
// and task 0 of connector "a"), and a connector naming a group that is not
// defined. It returns nil or *Problems whose keys are "group[i]..." and
// "connector[i]..." paths into w and whose Def names the definition each
// problem belongs to (for a job ID used twice: the connector whose task
// clashes). Each connector's and group's own fields are checked when they
// are parsed (ParseConnector, ParseGroup, Parse).
func ValidateWorkload(w *spec.Workload) error {
	var errs problemList
	checkWorkload(w, &errs)
	return errs.result("", nil)
}

// checkWorkload records the cross-definition problems of w in errs.
func checkWorkload(w *spec.Workload, errs *problemList) {
	groups := map[string]int{}
	for i, g := range w.Groups {
		if g.Name == "" {
			continue
		}
		if j, dup := groups[g.Name]; dup {
			errs.addDef(spec.DefGroup, g.Name, fmt.Sprintf("group[%d]", i), "name", "group %q is already defined by group[%d]", g.Name, j)
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
			errs.addDef(spec.DefConnector, c.Name, fmt.Sprintf("connector[%d]", i), "name", "connector %q is already defined by connector[%d]", c.Name, j)
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
			id := spec.TaskID(c.Name, n)
			if other, clash := owner[id]; clash {
				errs.addDef(spec.DefConnector, c.Name, path, "tasks", "task %d has job ID %q, which %s already uses", n, id, other)
				continue
			}
			owner[id] = fmt.Sprintf("task %d of connector %q", n, c.Name)
		}
		if c.Group != "" {
			if _, ok := groups[c.Group]; !ok {
				errs.addDef(spec.DefConnector, c.Name, path, "group", "group %q is not defined by any [[group]]", c.Group)
			}
		}
	}
}

// checkStatic checks the syntax of [static]: every entry is a valid name
// and none is declared twice. Whether an entry names a job is a warning,
// not an error (CheckDeclarations): the cluster's store may define jobs the
// file does not (docs/design.md, assignment rule 3).
func (c *Config) checkStatic(errs *problemList) {
	for _, list := range []struct {
		key, what string
		names     []string
	}{{"static.connectors", "connector name", c.Static.Connectors}, {"static.tasks", "task ID", c.Static.Tasks}} {
		seen := map[string]int{}
		for i, s := range list.names {
			key := fmt.Sprintf("%s[%d]", list.key, i)
			if err := validName(s); err != nil {
				errs.add(key, "%s %v", list.what, err)
				continue
			}
			if j, dup := seen[s]; dup {
				errs.add(key, "%q is declared twice (also %s[%d])", s, list.key, j)
			}
			seen[s] = i
		}
	}
}

// CheckDeclarations returns a warning for every [static] entry of c that
// names no job of w, each "FILE:LINE:COL: static.tasks[2]: message" with
// the entry's position in c's file: a connector entry whose connector does
// not exist or has no [connector.run] (no connector job), a task entry
// that is not "<connector>-<n>" of an existing connector with n below its
// tasks (a typo in the name, a missing or out-of-range index, a connector
// name given as a task). where says what w is, for the message ("this
// file", "this file or the cluster's store"). A message suggests the
// nearest job ID of w when one is close. An entry that is not a valid
// name is left to Parse's errors. nil when every entry names a job.
//
// Such an entry is legal (KIP-987 lets a worker declare a job before it
// exists; docs/design.md, assignment rule 3) and is ignored by the
// assignment, so it is a warning; `berth validate --strict` makes it an
// error.
func (c *Config) CheckDeclarations(w *spec.Workload, where string) []*Problem {
	byName := map[string]spec.Connector{}
	var connJobs, taskJobs []string
	for _, k := range w.Connectors {
		byName[k.Name] = k
		if k.Run != nil {
			connJobs = append(connJobs, k.Name)
		}
		if k.Task != nil {
			for n := 0; n < k.Tasks; n++ {
				taskJobs = append(taskJobs, spec.TaskID(k.Name, n))
			}
		}
	}
	var l problemList
	for i, s := range c.Static.Connectors {
		key := fmt.Sprintf("static.connectors[%d]", i)
		if validName(s) != nil {
			continue
		}
		k, ok := byName[s]
		switch {
		case ok && k.Run != nil:
		case ok:
			l.add(key, "connector %q has no [connector.run], so it has no connector job%s", s, declareTasks(k))
		default:
			if k, n, ok := taskOf(byName, s); ok && n < k.Tasks {
				l.add(key, "%q is task %d of connector %q, not a connector job: declare it in static.tasks", s, n, k.Name)
			} else {
				l.add(key, "%q names no connector with a [connector.run] in %s%s; it runs only once one is defined", s, where, didYouMean(s, connJobs))
			}
		}
	}
	for i, s := range c.Static.Tasks {
		key := fmt.Sprintf("static.tasks[%d]", i)
		if validName(s) != nil {
			continue
		}
		if k, n, ok := taskOf(byName, s); ok {
			if n >= k.Tasks {
				l.add(key, "task %d of connector %q is out of range (tasks = %d: %s)", n, k.Name, k.Tasks, taskRange(k))
			}
			continue
		}
		if k, ok := byName[s]; ok {
			msg := fmt.Sprintf("%q is a connector, not a task ID", s)
			if k.Tasks > 0 {
				msg += fmt.Sprintf(": its tasks are %s", taskRange(k))
			}
			if k.Run != nil {
				msg += "; its own job is declared in static.connectors"
			}
			l.add(key, "%s", msg)
			continue
		}
		l.add(key, "%q names no task of a connector in %s%s; it runs only once one is defined", s, where, didYouMean(s, taskJobs))
	}
	return l.placed(c.File, c.pos)
}

// taskOf splits a task ID "<connector>-<n>" whose connector is in byName:
// the connector, n, and true; false when no known connector has the
// prefix or the index is not a canonical non-negative integer.
func taskOf(byName map[string]spec.Connector, s string) (spec.Connector, int, bool) {
	for cut := strings.LastIndexByte(s, '-'); cut > 0; cut = strings.LastIndexByte(s[:cut], '-') {
		k, ok := byName[s[:cut]]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s[cut+1:])
		if err != nil || n < 0 || strconv.Itoa(n) != s[cut+1:] {
			continue
		}
		return k, n, true
	}
	return spec.Connector{}, 0, false
}

// taskRange names a connector's task IDs: "orders-0" .. "orders-2".
func taskRange(k spec.Connector) string {
	switch k.Tasks {
	case 0:
		return "it has none"
	case 1:
		return strconv.Quote(spec.TaskID(k.Name, 0))
	}
	return fmt.Sprintf("%q .. %q", spec.TaskID(k.Name, 0), spec.TaskID(k.Name, k.Tasks-1))
}

// declareTasks says where a connector without a connector job declares its
// tasks, when it has any.
func declareTasks(k spec.Connector) string {
	if k.Tasks == 0 {
		return ""
	}
	return ": declare its tasks (" + taskRange(k) + ") in static.tasks"
}
