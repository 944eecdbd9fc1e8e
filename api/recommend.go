package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/recommend"
)

// Recommendations is GET /v1/recommendations: the recommended limits of
// some of this agent's jobs, from the usage history the agent keeps
// (package recommend), with what they were computed for.
type Recommendations struct {
	// Host is this host as the recommendations were capped (its CPUs)
	// and are written for (whether the kernel enforces memory_high).
	Host recommend.Host `json:"host"`
	// Jobs are the jobs asked for, sorted by ID.
	Jobs []JobRecommendation `json:"jobs"`
}

// JobRecommendation is one job's recommendation beside its definition's
// limits.
type JobRecommendation struct {
	Job       string `json:"job"`
	Connector string `json:"connector"`
	Kind      string `json:"kind"` // "connector" or "task"
	// Limits are the limits of the job's definition in force.
	Limits limits.Limits `json:"limits"`
	// Recommendation is the recommendation with its evidence; nil when
	// the job has no usage sample yet (it has not run on this host since
	// its history began, or it was expired).
	Recommendation *recommend.Recommendation `json:"recommendation"`
}

// Recommender is what GET /v1/recommendations asks the agent.
type Recommender interface {
	// Recommendations returns the recommendations of the jobs named in
	// jobs and of every job of the connectors named in connectors (its
	// own job and its tasks) that this agent has; of every job this agent
	// has when both are empty.
	//
	// Errors: wrapping ErrNotFound, naming them, when a name is no job or
	// connector of this agent's.
	Recommendations(jobs, connectors []string) (Recommendations, error)
}

// recommendations serves GET /v1/recommendations?job=ID&connector=NAME
// (each repeatable) from r; 404 without r, or for a name that is no job
// or connector of this agent's.
func recommendations(r Recommender) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if r == nil {
			WriteError(w, http.StatusNotFound, "this agent keeps no usage history")
			return
		}
		q := req.URL.Query()
		out, err := r.Recommendations(q["job"], q["connector"])
		switch {
		case errors.Is(err, ErrNotFound):
			WriteError(w, http.StatusNotFound, err.Error())
		case err != nil:
			WriteError(w, http.StatusServiceUnavailable, err.Error())
		default:
			writeJSON(w, http.StatusOK, out)
		}
	}
}

// Recommendations is GET /v1/recommendations for jobs and connectors (all
// of the agent's jobs when both are empty).
func (c *Client) Recommendations(ctx context.Context, jobs, connectors []string) (Recommendations, error) {
	q := url.Values{}
	for _, j := range jobs {
		q.Add("job", j)
	}
	for _, n := range connectors {
		q.Add("connector", n)
	}
	p := "/v1/recommendations"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var r Recommendations
	return r, c.Get(ctx, p, &r)
}
