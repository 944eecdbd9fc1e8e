package metrics

import (
	"compress/gzip"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/berthd/berth/worker"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

type fakeLister struct{ s Snapshot }

func (f fakeLister) Snapshot() Snapshot { return f.s }

// scrape serves one /metrics request and parses the answer as Prometheus
// does (the text format), failing on a family written twice.
func scrape(t *testing.T, r *Registry, acceptGzip bool) map[string]*dto.MetricFamily {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if acceptGzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != textFormat {
		t.Fatalf("Content-Type %q", ct)
	}
	var body io.Reader = rec.Body
	if acceptGzip {
		if rec.Header().Get("Content-Encoding") != "gzip" {
			t.Fatal("gzip accepted but not used")
		}
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	text, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(text), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ = strings.Cut(name, " ")
			if seen[name] {
				t.Fatalf("family %s written twice", name)
			}
			seen[name] = true
		}
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(text)))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, text)
	}
	return mfs
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Per-job samples are written by the job table, in the text format, with
// every label escaped; one sample per job and label value; families
// without samples are absent; the Registry's families come too.
func TestExpositionOfJobTable(t *testing.T) {
	odd := `we"ird\id` + "\n"
	s := Snapshot{
		Jobs: []Job{
			{ID: "a", Connector: "a", Kind: "connector", State: worker.Running, Restarts: 2},
			{ID: odd, Connector: "c", Kind: "task", Group: "g", State: worker.Failed, UpdateBlocked: true},
		},
		Assigned:         map[string]bool{"a": true, odd: true},
		Generation:       7,
		ReloadSuccessful: true,
		Membership:       Membership{Up: true},
	}
	r, err := NewRegistry(slog.New(slog.DiscardHandler), fakeLister{s})
	if err != nil {
		t.Fatal(err)
	}
	for _, gz := range []bool{false, true} {
		mfs := scrape(t, r, gz)
		for _, name := range []string{"go_goroutines", "berth_assignment_generation", "berth_member_up", "berth_scrape_collector_success"} {
			if mfs[name] == nil {
				t.Errorf("no %s", name)
			}
		}
		if mfs["berth_job_cpu_seconds_total"] != nil {
			t.Error("a family with no sample (no job has a cgroup) is written")
		}
		up := mfs["berth_job_up"]
		if up.GetType() != dto.MetricType_GAUGE || len(up.GetMetric()) != 2 {
			t.Fatalf("berth_job_up: %v", up)
		}
		byID := map[string]*dto.Metric{}
		for _, m := range up.GetMetric() {
			byID[label(m, "job_id")] = m
		}
		if m := byID["a"]; m == nil || m.GetGauge().GetValue() != 1 || label(m, "kind") != "connector" {
			t.Errorf("job a: %v", m)
		}
		if m := byID[odd]; m == nil || m.GetGauge().GetValue() != 0 || label(m, "group") != "g" || label(m, "connector") != "c" {
			t.Errorf("job with quote, backslash and newline in its ID: %v (jobs %v)", m, byID)
		}
		st := mfs["berth_job_state"]
		if len(st.GetMetric()) != 2*len(worker.States()) {
			t.Fatalf("berth_job_state has %d samples", len(st.GetMetric()))
		}
		for _, m := range st.GetMetric() {
			want := 0.0
			if (label(m, "job_id") == "a" && label(m, "state") == "running") || (label(m, "job_id") == odd && label(m, "state") == "failed") {
				want = 1
			}
			if m.GetGauge().GetValue() != want {
				t.Errorf("berth_job_state %v = %v, want %v", m.GetLabel(), m.GetGauge().GetValue(), want)
			}
		}
		rs := mfs["berth_job_restarts_total"]
		if rs.GetType() != dto.MetricType_COUNTER || rs.GetMetric()[0].GetCounter().GetValue() != 2 {
			t.Errorf("berth_job_restarts_total: %v", rs)
		}
	}
}

// appendFloat writes what strconv's 'g' with the shortest precision
// writes (client_golang's text format), whole numbers included.
func TestAppendFloatMatchesStrconv(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 7, 42, 999999, -999999, 1e6, -1e6, 1234567, 0.5, 1.25, 123456.5, 1e21, 2.5e-7, math.MaxInt64, math.NaN(), math.Inf(1), math.Inf(-1)}
	for i := range 200000 {
		vals = append(vals, float64(i*7), float64(i)/8)
	}
	for _, v := range vals {
		want := strconv.FormatFloat(v, 'g', -1, 64)
		switch {
		case math.IsNaN(v):
			want = "NaN"
		case math.IsInf(v, 1):
			want = "+Inf"
		case math.IsInf(v, -1):
			want = "-Inf"
		}
		if got := string(appendFloat(nil, v)); got != want {
			t.Errorf("appendFloat(%v) = %q, want %q", v, got, want)
		}
	}
}
