package test

import (
	"go/build"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// module is this repository's module path (go.mod).
const module = "github.com/berthd/berth"

// importRule is one of the package map's rules that must never break
// (docs/design.md, "Rules that must never break"): no package in from's
// import closure within this module may be, or import directly, a package
// named in never: exactly, or any under it where the entry ends in "/".
type importRule struct {
	from  string
	never []string
	why   string
}

var importRules = []importRule{
	{"guard", []string{module + "/daemon", module + "/supervisor", module + "/supervisor/", module + "/cluster", module + "/cluster/", "go.etcd.io/"},
		"the guard outlives the agent and holds the jobs: it must not link the agent's loop or the store"},
	{"supervisor/plan", []string{module + "/cluster", module + "/cluster/", "go.etcd.io/", "google.golang.org/grpc", "google.golang.org/grpc/", "github.com/BurntSushi/toml", module + "/config"},
		"the plan is a pure function: no etcd, gRPC or TOML in its dependencies"},
	{"spec", []string{module + "/cluster", module + "/config", module + "/worker", module + "/cgroup", "go.etcd.io/", "github.com/BurntSushi/toml"},
		"spec is the leaf vocabulary every package uses"},
	{"worker", []string{module + "/daemon", module + "/supervisor", module + "/supervisor/", module + "/cluster", module + "/cluster/", "go.etcd.io/"},
		"a job's process knows nothing of the loop above it or of the store"},
	{"handover", []string{module + "/daemon", module + "/supervisor"},
		"the hand-over is loaded below the loop that uses it"},
}

// closure returns the packages of this module that pkg (a path relative
// to the repository) imports, directly or not, itself included, and every
// import path any of them names directly. Test files are not read.
func closure(t *testing.T, root, pkg string) (own map[string]bool, named map[string][]string) {
	t.Helper()
	own, named = map[string]bool{}, map[string][]string{}
	var visit func(rel string)
	visit = func(rel string) {
		if own[rel] {
			return
		}
		own[rel] = true
		p, err := build.ImportDir(filepath.Join(root, rel), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", rel, err)
		}
		for _, imp := range p.Imports {
			named[imp] = append(named[imp], rel)
			if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				visit(rest)
			}
		}
	}
	visit(pkg)
	return own, named
}

// The package map's rules hold in the code: read from the sources with
// go/build, so a new import that breaks one fails here, naming the chain's
// importer.
func TestPackageImportRules(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := build.ImportDir(filepath.Join(root, "supervisor/plan"), 0); err != nil {
		t.Skipf("the sources are not beside the tests (a prebuilt binary's lane): %v", err)
	}
	for _, r := range importRules {
		_, named := closure(t, root, r.from)
		var bad []string
		for imp, by := range named {
			for _, n := range r.never {
				if imp == n || (strings.HasSuffix(n, "/") && strings.HasPrefix(imp, n)) {
					sort.Strings(by)
					bad = append(bad, imp+" (imported by "+strings.Join(by, ", ")+")")
				}
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%s must not depend on %s (%s), but its closure imports:\n  %s", r.from, strings.Join(r.never, ", "), r.why, strings.Join(bad, "\n  "))
		}
	}
}
