package assign

import (
	"reflect"
	"testing"

	"github.com/berthd/berth/spec"
)

func TestJobs(t *testing.T) {
	tests := []struct {
		name string
		in   []Connector
		want []Job
	}{
		{"empty", nil, []Job{}},
		{"run and tasks", []Connector{{Name: "orders-sink", Run: true, Tasks: 2, Group: "g"}}, []Job{
			{ID: "orders-sink", Connector: "orders-sink", Group: "g", Kind: spec.KindConnector, Task: -1},
			{ID: "orders-sink-0", Connector: "orders-sink", Group: "g", Kind: spec.KindTask, Task: 0},
			{ID: "orders-sink-1", Connector: "orders-sink", Group: "g", Kind: spec.KindTask, Task: 1},
		}},
		{"no run: no connector job", []Connector{{Name: "a", Tasks: 1}}, []Job{
			{ID: "a-0", Connector: "a", Kind: spec.KindTask, Task: 0},
		}},
		{"negative tasks and empty name ignored", []Connector{{Name: "a", Run: true, Tasks: -3}, {Name: "", Run: true, Tasks: 2}}, []Job{
			{ID: "a", Connector: "a", Kind: spec.KindConnector, Task: -1},
		}},
		{"sorted by ID across connectors, order-independent", []Connector{{Name: "b", Run: true}, {Name: "a", Tasks: 1}}, []Job{
			{ID: "a-0", Connector: "a", Kind: spec.KindTask, Task: 0},
			{ID: "b", Connector: "b", Kind: spec.KindConnector, Task: -1},
		}},
		{"duplicate name: Run first, then more tasks", []Connector{{Name: "a", Tasks: 1}, {Name: "a", Run: true}, {Name: "a", Run: true, Tasks: 1, Group: "z"}}, []Job{
			{ID: "a", Connector: "a", Group: "z", Kind: spec.KindConnector, Task: -1},
			{ID: "a-0", Connector: "a", Group: "z", Kind: spec.KindTask, Task: 0},
		}},
		{"colliding IDs: connector whose name sorts first wins", []Connector{{Name: "a-1", Run: true}, {Name: "a", Tasks: 2}}, []Job{
			{ID: "a-0", Connector: "a", Kind: spec.KindTask, Task: 0},
			{ID: "a-1", Connector: "a", Kind: spec.KindTask, Task: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Jobs(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Jobs(%+v)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
			rev := make([]Connector, len(tt.in))
			for i, c := range tt.in {
				rev[len(tt.in)-1-i] = c
			}
			if got2 := Jobs(rev); !reflect.DeepEqual(got2, got) {
				t.Fatalf("Jobs depends on order: %+v vs %+v", got2, got)
			}
		})
	}
}
