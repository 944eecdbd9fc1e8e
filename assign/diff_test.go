package assign

import (
	"reflect"
	"testing"
)

func TestDiff(t *testing.T) {
	prev := Assignment{Members: map[string][]string{
		"a": {"j1", "j2"},
		"b": {"j3"},
		"c": {"j4"}, // departs
	}}
	next := Assignment{Members: map[string][]string{
		"a": {"j1"},
		"b": {"j2", "j3", "j4"},
		"d": {"j5"}, // new member, new job
	}}
	revoked, added := diff(prev, next)
	wantRevoked := map[string][]string{"a": {"j2"}, "c": {"j4"}}
	wantAdded := map[string][]string{"b": {"j2", "j4"}, "d": {"j5"}}
	if !reflect.DeepEqual(revoked, wantRevoked) {
		t.Errorf("revoked = %v, want %v", revoked, wantRevoked)
	}
	if !reflect.DeepEqual(added, wantAdded) {
		t.Errorf("added = %v, want %v", added, wantAdded)
	}
	r, a := diff(next, next)
	if len(r) != 0 || len(a) != 0 {
		t.Errorf("diff(x, x) = %v, %v; want empty", r, a)
	}
	r, a = diff(Assignment{}, next)
	if len(r) != 0 || !reflect.DeepEqual(a, map[string][]string{"a": {"j1"}, "b": {"j2", "j3", "j4"}, "d": {"j5"}}) {
		t.Errorf("diff(zero, next) = %v, %v", r, a)
	}
}
