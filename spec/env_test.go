package spec

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{EnvJobID: "c-3", EnvConnector: "c", EnvTask: "3"}
	cases := []struct{ in, want string }{
		{"--task=${BERTH_TASK}", "--task=3"},
		{"${BERTH_CONNECTOR}/${BERTH_JOB_ID}", "c/c-3"},
		{"$$", "$"},
		{"$${HOME}", "${HOME}"},
		{"echo $HOME $1 $", "echo $HOME $1 $"},
		{"$$$${BERTH_TASK}", "$${BERTH_TASK}"},
		{"$${BERTH_TASK}${BERTH_TASK}", "${BERTH_TASK}3"},
	}
	for _, c := range cases {
		if got, err := Expand(c.in, vars); err != nil || got != c.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"${HOME}", "${BERTH_CGROUP}", "${", "a${BERTH_TASK", "${}"} {
		if _, err := Expand(in, vars); err == nil {
			t.Errorf("Expand(%q): no error", in)
		}
	}
}
