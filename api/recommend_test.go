package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/recommend"
)

// recommender answers with the names it was asked for; "nope" is no job.
type recommender struct{ jobs, connectors []string }

func (r *recommender) Recommendations(jobs, connectors []string) (Recommendations, error) {
	r.jobs, r.connectors = jobs, connectors
	if slices.Contains(jobs, "nope") {
		return Recommendations{}, fmt.Errorf("%w: this agent runs no job nope", ErrNotFound)
	}
	return Recommendations{Host: recommend.Host{CPUs: 2}, Jobs: []JobRecommendation{
		{Job: "a", Connector: "a", Kind: "connector", Limits: limits.Limits{CPU: 0.5},
			Recommendation: &recommend.Recommendation{Job: "a", CPU: 0.25, Memory: 64 << 20}},
		{Job: "b-0", Connector: "b", Kind: "task"},
	}}, nil
}

// GET /v1/recommendations through the Client: repeated job= and
// connector= reach the Recommender as they were given; a job without
// samples has a null recommendation; a name that is nothing here is a
// 404 naming it; an agent without a Recommender answers 404.
func TestRecommendationsEndpoint(t *testing.T) {
	r := &recommender{}
	srv := httptest.NewServer(Handler(newSecBackend("a", nil), Options{Recommender: r}))
	defer srv.Close()
	c := NewClient(srv.URL)
	got, err := c.Recommendations(context.Background(), []string{"a", "b-0"}, []string{"b"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.jobs, []string{"a", "b-0"}) || !slices.Equal(r.connectors, []string{"b"}) {
		t.Errorf("asked for jobs %v connectors %v; want [a b-0] [b]", r.jobs, r.connectors)
	}
	if got.Host.CPUs != 2 || len(got.Jobs) != 2 || got.Jobs[0].Recommendation == nil || got.Jobs[0].Recommendation.Memory != 64<<20 ||
		got.Jobs[0].Limits.CPU != 0.5 || got.Jobs[1].Recommendation != nil || got.Jobs[1].Kind != "task" {
		t.Errorf("answer %+v", got)
	}
	if _, err := c.Recommendations(context.Background(), nil, nil); err != nil || r.jobs != nil || r.connectors != nil {
		t.Errorf("with no names: %v, asked for %v %v; want every job (nil, nil)", err, r.jobs, r.connectors)
	}
	var ae *Error
	if _, err := c.Recommendations(context.Background(), []string{"nope"}, nil); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("an unknown job: %v; want a 404", err)
	}
	bare := httptest.NewServer(Handler(newSecBackend("a", nil), Options{}))
	defer bare.Close()
	if _, err := NewClient(bare.URL).Recommendations(context.Background(), nil, nil); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("without a Recommender: %v; want a 404", err)
	}
}
