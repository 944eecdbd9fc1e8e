package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/worker"
)

// byName indexes the reference's families by name, failing on a name
// listed twice.
func byName(t *testing.T) map[string]Family {
	t.Helper()
	out := map[string]Family{}
	for _, c := range Reference() {
		for _, f := range c.Families {
			if _, dup := out[f.Name]; dup {
				t.Errorf("%s is listed twice in the reference", f.Name)
			}
			out[f.Name] = f
		}
	}
	return out
}

// Every family this package declares is in the reference: every per-job
// family, and every string literal of the package's code that is a berth_
// metric name (a descriptor made with prometheus.NewDesc, a Counter, a
// Histogram). A metric added without its line in reference() fails here.
func TestReferenceComplete(t *testing.T) {
	ref := byName(t)
	for _, f := range jobFamilies {
		if _, ok := ref[f.name]; !ok {
			t.Errorf("per-job family %s is not in reference() (metrics/reference.go)", f.name)
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^berth_[a-z0-9_]+$`)
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, file, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && name.MatchString(s) {
				if _, ok := ref[s]; !ok {
					t.Errorf("%s: %s is not in reference() (metrics/reference.go)", fset.Position(lit.Pos()), s)
				}
			}
			return true
		})
	}
}

// What a scrape serves agrees with the reference: type, help and labels of
// every berth_ family a scrape without cgroups serves (the agent's, the
// cluster's, the exporter's, the per-job families the agent collector
// fills).
func TestReferenceTypes(t *testing.T) {
	ref := byName(t)
	s := Snapshot{
		Jobs:              []Job{{ID: "a", Connector: "a", Kind: "connector", State: worker.Running}},
		Assigned:          map[string]bool{"a": true},
		ReloadSuccessful:  true,
		ReloadSuccessTime: time.Now(),
		Membership:        Membership{Up: true, LastRenewal: time.Now(), Deadline: time.Now().Add(time.Second)},
	}
	r, err := NewRegistry(slog.New(slog.DiscardHandler), fakeLister{s})
	if err != nil {
		t.Fatal(err)
	}
	r.Cluster.ObserveRenew(time.Millisecond)
	mfs := scrape(t, r, false)
	seen := 0
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "berth_") {
			continue
		}
		seen++
		f, ok := ref[name]
		if !ok {
			t.Errorf("a scrape serves %s, which is not in the reference", name)
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != f.Type {
			t.Errorf("%s: scrape type %s, reference %s", name, typ, f.Type)
		}
		if mf.GetHelp() != f.Help {
			t.Errorf("%s: scrape help %q, reference %q", name, mf.GetHelp(), f.Help)
		}
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		if !slices.Equal(labels, f.Labels) {
			t.Errorf("%s: scrape labels %v, reference %v", name, labels, f.Labels)
		}
	}
	if seen < 15 {
		t.Errorf("the scrape served only %d berth_ families", seen)
	}
}
