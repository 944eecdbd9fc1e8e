package cgroup

import (
	"path"
	"strings"
	"testing"
)

// C15: the cgroup of a job and the cgroup of a sharing group never
// coincide, whatever the names: a connector named "g-sinks" beside group
// "sinks" (the collision of the old jobs/g-<group> layout), a job named
// like a group, a group named like a subtree.
func TestLayoutOneToOne(t *testing.T) {
	names := []string{"sinks", "g-sinks", "groups", "jobs", "a", "a-0", "agent", "x.y"}
	seen := map[string]string{}
	add := func(rel, what string) {
		if other, dup := seen[rel]; dup {
			t.Errorf("%s and %s share the cgroup %s", what, other, rel)
		}
		seen[rel] = what
	}
	for _, n := range names {
		add(GroupRel(n), "group "+n)
		add(JobRel(n, ""), "job "+n)
		for _, g := range names {
			add(JobRel(n, g), "job "+n+" of group "+g)
		}
	}
	for rel, what := range seen {
		// A group's node is never a job's, nor the parent of an ungrouped job.
		if strings.HasPrefix(what, "group ") && !strings.HasPrefix(rel, GroupsDir+"/") {
			t.Errorf("%s outside %s: %s", what, GroupsDir, rel)
		}
		if strings.HasPrefix(what, "job ") && !strings.Contains(what, " of group ") && path.Dir(rel) != JobsDir {
			t.Errorf("%s not directly under %s: %s", what, JobsDir, rel)
		}
	}
}
