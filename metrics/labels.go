package metrics

import "github.com/prometheus/client_golang/prometheus"

// jobLabels are the labels of every per-job series.
var jobLabels = []string{"job_id", "connector", "kind", "group"}

func jobDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, jobLabels...), extra...), nil)
}

// with returns a job's label values followed by extra ones, in a new slice.
func with(l []string, extra ...string) []string {
	return append(append(make([]string, 0, len(l)+len(extra)), l...), extra...)
}
