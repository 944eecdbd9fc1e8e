package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An agent that asks for basic auth the client did not give gets a 401
// whose error says which settings to give.
func TestUnauthorizedSaysWhatToSet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	}))
	defer srv.Close()
	_, err := NewClient(srv.URL).Jobs(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Code != 401 || !strings.Contains(e.Message, "[agent.client]") {
		t.Fatalf("got %v, want a 401 naming [agent.client]", err)
	}
}
