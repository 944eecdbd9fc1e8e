package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v2"
)

// pressureMetrics are the per-job pressure stall (PSI) series: "some"
// lines as waiting, "full" lines as stalled (cgroup.Group.Pressure). A
// kernel that keeps no PSI gives none of them.
var pressureMetrics = []string{
	"berth_job_pressure_cpu_waiting_seconds_total",
	"berth_job_pressure_memory_waiting_seconds_total",
	"berth_job_pressure_io_waiting_seconds_total",
	"berth_job_pressure_cpu_stalled_seconds_total",
	"berth_job_pressure_memory_stalled_seconds_total",
	"berth_job_pressure_io_stalled_seconds_total",
}

const (
	rulesDir      = "../packaging/prometheus"
	dashboardFile = "../packaging/grafana/berth.json"
)

// ruleFiles are the rule files Prometheus loads, in rulesDir.
var ruleFiles = []string{"rules.yml", "alerts.yml"}

// needTool skips unless the named program (from Debian's prometheus
// package, which .ci/run installs) is on PATH, and returns its path.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (apt-get install prometheus): %v", name, err)
	}
	return p
}

// ruleFile is the shape of a Prometheus rule file
// (https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/).
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// rule is one recording or alerting rule of the packaged files.
type rule struct {
	file, name, expr string
	alert            bool
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var out []rule
	for _, f := range ruleFiles {
		b, err := os.ReadFile(filepath.Join(rulesDir, f))
		if err != nil {
			t.Fatal(err)
		}
		var rf ruleFile
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				name, alert := r.Record, false
				if r.Alert != "" {
					name, alert = r.Alert, true
				}
				out = append(out, rule{file: f, name: name, expr: strings.TrimSpace(r.Expr), alert: alert})
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no rules in %v", ruleFiles)
	}
	return out
}

// promtool check rules is clean on the packaged files, and promtool test
// rules passes with a case in which every alert fires and one in which it
// stays quiet.
func TestPrometheusRulesUnit(t *testing.T) {
	promtool := needTool(t, "promtool")
	args := []string{"check", "rules"}
	for _, f := range ruleFiles {
		args = append(args, filepath.Join(rulesDir, f))
	}
	if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yml")
	cmd.Dir = rulesDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules tests.yml: %v\n%s", err, out)
	}

	b, err := os.ReadFile(filepath.Join(rulesDir, "tests.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range loadRules(t) {
		if !r.alert {
			continue
		}
		if !fires[r.name] {
			t.Errorf("tests.yml has no case in which %s fires", r.name)
		}
		if !quiet[r.name] {
			t.Errorf("tests.yml has no case in which %s stays quiet", r.name)
		}
	}
}

// expression is one PromQL expression of the dashboard or the rule files.
type expression struct {
	where string // "alerts.yml BerthJobDown", "dashboard panel 12 \"CPU\" A"
	expr  string
}

// grafanaDashboard is the part of a Grafana JSON model the test reads.
type grafanaDashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *struct {
				Type string `json:"type"`
				UID  string `json:"uid"`
			} `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	ID         int                 `json:"id"`
	Type       string              `json:"type"`
	Title      string              `json:"title"`
	GridPos    *struct{ H, W int } `json:"gridPos"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's panels
}

// loadDashboard reads the dashboard and checks its shape: unique panel IDs,
// every panel placed and on the ${datasource} variable, every target with
// a refId and an expression.
func loadDashboard(t *testing.T) (grafanaDashboard, []grafanaPanel) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: uid %q, title %q: both are required", dashboardFile, d.UID, d.Title)
	}
	var panels []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			panels = append(panels, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	ids := map[int]bool{}
	rows, queries := 0, 0
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("dashboard: panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("dashboard: panel %d %q has no gridPos", p.ID, p.Title)
		}
		if p.Type == "row" {
			rows++
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("dashboard: panel %d %q: datasource %+v, want prometheus ${datasource}", p.ID, p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("dashboard: panel %d %q has no query", p.ID, p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if tg.RefID == "" || strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("dashboard: panel %d %q: target %+v without refId or expr", p.ID, p.Title, tg)
			}
		}
	}
	if rows < 3 || queries == 0 {
		t.Errorf("dashboard: %d rows, %d queries: want the cluster, host and job rows", rows, queries)
	}
	return d, panels
}

// The packaged Grafana dashboard is well formed (read without a server).
func TestGrafanaDashboardShape(t *testing.T) {
	loadDashboard(t)
}

// promAPI is a Prometheus server's HTTP API.
type promAPI struct {
	base string
}

// sample is one series of an instant query's result.
type sample struct {
	Metric map[string]string `json:"metric"`
}

// query runs an instant query and returns its series (a scalar result is
// one series without labels).
func (p promAPI) query(expr string) ([]sample, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	switch r.Data.ResultType {
	case "vector":
		var s []sample
		err := json.Unmarshal(r.Data.Result, &s)
		return s, err
	case "scalar":
		return []sample{{Metric: map[string]string{}}}, nil
	}
	return nil, fmt.Errorf("query %q: result type %s", expr, r.Data.ResultType)
}

// labelValues returns the values of label on the series matching selector
// (what Grafana's label_values(selector, label) lists).
func (p promAPI) labelValues(label, selector string) ([]string, error) {
	var r struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	if err := p.get("/api/v1/label/"+url.PathEscape(label)+"/values", url.Values{"match[]": {selector}}, &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("label values %s of %s: %s", label, selector, r.Error)
	}
	return r.Data, nil
}

func (p promAPI) get(path string, q url.Values, v any) error {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %s: %w: %s", path, resp.Status, err, b)
	}
	return nil
}

// startPrometheus runs Debian's prometheus scraping target every second and
// evaluating the packaged rule files every second, with its storage in a
// temporary directory; t.Cleanup stops it. scrape holds more keys of the
// scrape configuration ("scheme: https", a tls_config block), each line
// as written at the job's indentation.
func startPrometheus(t *testing.T, bin, target string, scrape ...string) promAPI {
	t.Helper()
	dir := t.TempDir()
	var files []string
	for _, f := range ruleFiles {
		abs, err := filepath.Abs(filepath.Join(rulesDir, f))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fmt.Sprintf("  - %q", abs))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
%s
scrape_configs:
  - job_name: berth
    static_configs:
      - targets: [%q]
`, strings.Join(files, "\n"), target)
	for _, l := range scrape {
		cfg += "    " + l + "\n"
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreePort(t)
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out)
		}
	})
	api := promAPI{base: "http://" + addr}
	testutil.Eventually(t, 30*time.Second, "prometheus ready", func() bool {
		select {
		case err := <-waited:
			waited <- err
			t.Fatalf("prometheus exited: %v\n%s", err, out)
		default:
		}
		resp, err := http.Get(api.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return api
}

// grafanaVars are Grafana's built-in variables, set to what a dashboard
// over the test's few seconds of 1 s scrapes would use.
var grafanaVars = map[string]string{
	"$__rate_interval": "1m",
	"$__interval":      "15s",
	"$__range":         "10m",
}

// labelValuesQuery is a Grafana Prometheus variable query.
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// A real Prometheus scrapes a real agent running a few jobs and evaluates
// the packaged rule files; then every dashboard variable, panel query,
// recording rule and alert expression runs through its HTTP API. Each must
// parse, every metric selector in it must match series (a typo in a metric
// name or a label matcher matches nothing), every label it groups or
// matches on must exist on those series, and the expression with its
// thresholds removed (an alert is legitimately quiet) must return series,
// for every job when it keeps job_id. promtool check metrics is clean on
// the agent's /metrics.
func TestDashboardAndRulesOnRealPrometheus(t *testing.T) {
	testutil.NeedRoot(t)
	prom := needTool(t, "prometheus")
	promtool := needTool(t, "promtool")
	dash, panels := loadDashboard(t)
	rules := loadRules(t)

	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["burner"]
tasks = ["sink-0", "sink-1"]

[[group]]
name = "g1"
limits = { cpu = 1, memory = "256MiB" }

[[connector]]
name = "burner"
  [connector.run]
  command = ["/bin/sh", "-c", "while :; do :; done"]
  limits = { cpu = 0.1, memory = "64MiB" }

[[connector]]
name = "sink"
tasks = 2
group = "g1"
  [connector.task]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
  limits = { cpu = 0.2, memory = "32MiB" }
`)
	e.start()
	jobs := []string{"burner", "sink-0", "sink-1"}
	e.waitRunning(jobs...)
	api := startPrometheus(t, prom, e.addr)

	// The known-missing names, and every recording rule built on them.
	missing := map[string]bool{}
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Logf("the kernel keeps no PSI (%v): pressure expressions are parsed and run only", err)
		for _, n := range pressureMetrics {
			missing[n] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, r := range rules {
			if r.alert || missing[r.name] {
				continue
			}
			for _, n := range metricNames(t, r.expr) {
				if missing[n] {
					missing[r.name], changed = true, true
				}
			}
		}
	}
	// Every rule is loaded and evaluates without error.
	testutil.Eventually(t, 60*time.Second, "every rule loaded and evaluated", func() bool {
		return rulesHealthy(t, api, rules) == nil
	})

	// Dashboard variables: label_values queries list the agent and its
	// jobs; their values stand in for $instance and $job_id.
	var exprs []expression
	vars := map[string]string{}
	testutil.Eventually(t, 30*time.Second, "dashboard variables resolve", func() bool {
		exprs, vars = exprs[:0], map[string]string{}
		for _, v := range dash.Templating.List {
			if v.Type != "query" {
				continue
			}
			q := variableQuery(t, v.Query)
			q = substitute(q, vars)
			mm := labelValuesQuery.FindStringSubmatch(q)
			if mm == nil {
				t.Fatalf("dashboard variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q)
			}
			vals, err := api.labelValues(mm[2], mm[1])
			if err != nil || len(vals) == 0 {
				return false
			}
			if v.Name == "job_id" && !containsAll(vals, jobs) {
				return false
			}
			if v.Name == "instance" && !slices.Contains(vals, e.addr) {
				return false
			}
			vars["$"+v.Name] = regexAlternation(vals)
			exprs = append(exprs, expression{where: "dashboard variable " + v.Name, expr: mm[1]})
		}
		return true
	})
	for _, p := range panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, expression{
				where: fmt.Sprintf("dashboard panel %d %q query %s", p.ID, p.Title, tg.RefID),
				expr:  substitute(tg.Expr, vars),
			})
		}
	}
	for _, r := range rules {
		exprs = append(exprs, expression{where: r.file + " " + r.name, expr: r.expr})
	}

	// Run them all until they all return what they must (series come in
	// scrape by scrape, recording rules a second later), or report.
	var problems []string
	deadline := time.Now().Add(testutil.Deadline(60 * time.Second))
	for {
		problems = problems[:0]
		labelsOf := map[string]map[string]bool{} // selector -> label names, per round
		for _, x := range exprs {
			problems = append(problems, checkExpression(t, api, x, jobs, missing, labelsOf)...)
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range problems {
		t.Error(p)
	}
	n := 0
	for _, x := range exprs {
		if usesMissing(t, x.expr, missing) {
			n++
			t.Logf("not exported (yet), parsed and run only: %s: %s", x.where, x.expr)
		}
	}
	t.Logf("%d expressions checked (%d of them wait for the pressure series)", len(exprs), n)

	// promtool check metrics: the live exposition follows Prometheus'
	// naming and help conventions.
	resp, err := http.Get("http://" + e.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("promtool check metrics on the agent's /metrics: %v\n%s", err, out)
	}
}

// variableQuery returns a Grafana query variable's PromQL: the query is a
// string, or an object with a "query" field.
func variableQuery(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("dashboard variable query %s: %v", raw, err)
	}
	return o.Query
}

// substitute replaces Grafana's built-in variables and the dashboard's
// variables ($name and ${name}) in expr.
func substitute(expr string, vars map[string]string) string {
	all := map[string]string{}
	for k, v := range grafanaVars {
		all[k] = v
	}
	for k, v := range vars {
		all[k] = v
	}
	// Longest names first: $__rate_interval before $__range.
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		expr = strings.ReplaceAll(expr, "${"+k[1:]+"}", all[k])
		expr = strings.ReplaceAll(expr, k, all[k])
	}
	return expr
}

// regexAlternation is what Grafana puts for a multi-value variable in
// =~"...": the values, regex-quoted, joined by |, escaped for a PromQL
// string.
func regexAlternation(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`)
	}
	return "(" + strings.Join(q, "|") + ")"
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// rulesHealthy reports an error until Prometheus has loaded every rule of
// the packaged files and evaluated each without error.
func rulesHealthy(t *testing.T, api promAPI, rules []rule) error {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Groups []struct {
				File  string `json:"file"`
				Rules []struct {
					Name           string    `json:"name"`
					Health         string    `json:"health"`
					LastError      string    `json:"lastError"`
					LastEvaluation time.Time `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := api.get("/api/v1/rules", nil, &r); err != nil {
		return err
	}
	loaded := map[string]bool{}
	for _, g := range r.Data.Groups {
		for _, lr := range g.Rules {
			if lr.LastError != "" {
				t.Fatalf("rule %s in %s: %s", lr.Name, g.File, lr.LastError)
			}
			if lr.Health != "ok" || lr.LastEvaluation.Year() < 2000 {
				return fmt.Errorf("rule %s: health %q", lr.Name, lr.Health)
			}
			loaded[lr.Name] = true
		}
	}
	for _, want := range rules {
		if !loaded[want.name] {
			return fmt.Errorf("rule %s of %s not loaded", want.name, want.file)
		}
	}
	return nil
}

// metricNames lists the metric names of every selector in expr.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	var names []string
	for _, vs := range selectors(e) {
		names = append(names, vs.Name)
	}
	return names
}

// usesMissing reports whether expr uses a series not yet exported.
func usesMissing(t *testing.T, expr string, missing map[string]bool) bool {
	t.Helper()
	for _, n := range metricNames(t, expr) {
		if missing[n] {
			return true
		}
	}
	return false
}

// selectors lists the vector selectors under node, ranges included.
func selectors(node parser.Node) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// checkExpression runs one expression and returns what is wrong with it.
// labelsOf caches the label names of each selector's series.
func checkExpression(t *testing.T, api promAPI, x expression, jobs []string, missing map[string]bool, labelsOf map[string]map[string]bool) []string {
	t.Helper()
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, x.where+": "+fmt.Sprintf(format, args...)+"\n\t"+x.expr)
	}
	e, err := parser.ParseExpr(x.expr)
	if err != nil {
		bad("does not parse: %v", err)
		return problems
	}
	if _, err := api.query(x.expr); err != nil {
		bad("Prometheus refuses it: %v", err)
		return problems
	}
	if usesMissing(t, x.expr, missing) {
		return problems
	}

	// Every selector matches series: a wrong metric name or label matcher
	// matches nothing.
	labelNames := func(vs *parser.VectorSelector) map[string]bool {
		plain := &parser.VectorSelector{Name: vs.Name, LabelMatchers: vs.LabelMatchers}
		key := plain.String()
		if l, ok := labelsOf[key]; ok {
			return l
		}
		ss, err := api.query(key)
		if err != nil {
			bad("selector %s: %v", key, err)
			return nil
		}
		if len(ss) == 0 {
			bad("selector %s matches no series", key)
			return nil
		}
		l := map[string]bool{}
		for _, s := range ss {
			for k := range s.Metric {
				l[k] = true
			}
		}
		labelsOf[key] = l
		return l
	}
	union := func(n parser.Node) map[string]bool {
		u := map[string]bool{}
		for _, vs := range selectors(n) {
			for k := range labelNames(vs) {
				u[k] = true
			}
		}
		return u
	}
	for _, vs := range selectors(e) {
		labelNames(vs)
	}
	if len(problems) > 0 {
		return problems
	}

	// Every label grouped or matched on exists on the series it applies to.
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			u := union(n.Expr)
			for _, l := range n.Grouping {
				if !u[l] {
					bad("%s by/without label %q: no series under it has it", n.Op, l)
				}
			}
		case *parser.BinaryExpr:
			vm := n.VectorMatching
			if vm == nil {
				return nil
			}
			lhs, rhs := union(n.LHS), union(n.RHS)
			for _, l := range vm.MatchingLabels {
				if vm.On && (!lhs[l] || !rhs[l]) || !vm.On && !lhs[l] && !rhs[l] {
					bad("%s on/ignoring label %q: not on both sides", n.Op, l)
				}
			}
			for _, l := range vm.Include {
				if !lhs[l] && !rhs[l] {
					bad("%s group_left/right label %q: on neither side", n.Op, l)
				}
			}
		}
		return nil
	})
	if len(problems) > 0 {
		return problems
	}

	// With its thresholds removed, the expression returns series, and one
	// for every job when it keeps job_id.
	stripped := stripThresholds(e).String()
	ss, err := api.query(stripped)
	if err != nil {
		bad("without thresholds (%s): %v", stripped, err)
		return problems
	}
	if len(ss) == 0 {
		bad("without thresholds it returns no series: %s", stripped)
		return problems
	}
	seen := map[string]bool{}
	perJob := false
	for _, s := range ss {
		if id, ok := s.Metric["job_id"]; ok {
			perJob = true
			seen[id] = true
		}
	}
	if perJob {
		for _, j := range jobs {
			if !seen[j] {
				bad("without thresholds it has no series for job %s: %s", j, stripped)
			}
		}
	}
	return problems
}

// stripThresholds replaces every comparison of an expression with a number
// (x > 0.9, 0 < x) by the expression itself, so that the rest, which is
// what can name a wrong metric or label, must return series even while
// the alert is quiet. Comparisons with bool are kept: they return series.
func stripThresholds(e parser.Expr) parser.Expr {
	switch n := e.(type) {
	case *parser.BinaryExpr:
		n.LHS, n.RHS = stripThresholds(n.LHS), stripThresholds(n.RHS)
		if n.Op.IsComparisonOperator() && !n.ReturnBool {
			if isNumber(n.RHS) {
				return n.LHS
			}
			if isNumber(n.LHS) {
				return n.RHS
			}
		}
	case *parser.ParenExpr:
		n.Expr = stripThresholds(n.Expr)
	case *parser.UnaryExpr:
		n.Expr = stripThresholds(n.Expr)
	case *parser.AggregateExpr:
		n.Expr = stripThresholds(n.Expr)
	case *parser.SubqueryExpr:
		n.Expr = stripThresholds(n.Expr)
	case *parser.Call:
		for i, a := range n.Args {
			n.Args[i] = stripThresholds(a)
		}
	}
	return e
}

// isNumber reports whether e is a number literal, maybe in parentheses or
// negated.
func isNumber(e parser.Expr) bool {
	switch n := e.(type) {
	case *parser.NumberLiteral:
		return true
	case *parser.ParenExpr:
		return isNumber(n.Expr)
	case *parser.UnaryExpr:
		return isNumber(n.Expr)
	}
	return false
}
