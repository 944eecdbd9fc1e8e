package limits

import (
	"fmt"
	"strconv"
	"strings"
)

// Validate checks the rules that span a workload's groups and connectors:
// duplicate group or connector names, a job ID used twice (connector "a-0"
// and task 0 of connector "a"), and a connector naming a group that is not
// defined. It returns nil or *Errors whose keys are "group[i]..." and
// "connector[i]..." paths into w. Each connector's and group's own fields
// are checked when they are parsed (ParseConnector, ParseGroup, Parse).
func (w *Workload) Validate() error {
	var errs errorList
	w.check(&errs)
	return errs.result("", nil)
}

// check records the cross-definition problems of w in errs.
func (w *Workload) check(errs *errorList) {
	groups := map[string]int{}
	for i, g := range w.Groups {
		if g.Name == "" {
			continue
		}
		if j, dup := groups[g.Name]; dup {
			errs.add(fmt.Sprintf("group[%d].name", i), "group %q is already defined by group[%d]", g.Name, j)
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
			errs.add(fmt.Sprintf("connector[%d].name", i), "connector %q is already defined by connector[%d]", c.Name, j)
			continue
		}
		names[c.Name] = i
	}
	// Job IDs: every connector name is a job ID (whether or not it has a
	// [connector.run]), and so is every task ID.
	owner := map[string]string{}
	for i, c := range w.Connectors {
		if c.Name != "" {
			if _, dup := owner[c.Name]; !dup {
				owner[c.Name] = fmt.Sprintf("connector[%d]", i)
			}
		}
	}
	for i, c := range w.Connectors {
		if c.Name == "" || names[c.Name] != i {
			continue
		}
		for n := 0; n < c.Tasks; n++ {
			id := TaskID(c.Name, n)
			if other, clash := owner[id]; clash {
				errs.add(fmt.Sprintf("connector[%d].tasks", i), "task %d has job ID %q, which %s (connector %q) already uses", n, id, other, id)
				continue
			}
			owner[id] = fmt.Sprintf("task %d of connector[%d]", n, i)
		}
		if c.Group != "" {
			if _, ok := groups[c.Group]; !ok {
				errs.add(fmt.Sprintf("connector[%d].group", i), "group %q is not defined by any [[group]]", c.Group)
			}
		}
	}
}

// checkStatic checks [static] against the connectors: a tasks entry naming
// a known connector's task must be in range. Entries naming connectors that
// do not exist are allowed (DESIGN rule 3).
func (c *Config) checkStatic(errs *errorList) {
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
