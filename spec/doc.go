// Package spec is the vocabulary every berth package uses to speak of
// jobs: what a workload is (Workload, Connector, Group, Process), the jobs
// it expands into (Job, Kind, TaskID, Workload.Jobs, the BERTH_* variables
// of a job's environment), how they run and are assigned (Restart,
// TargetState, Protocol, DefKind), the operators' actions on them
// (Target, RestartRequest), and the client settings berth's own
// requests present (TLS, APIClient). Each name is declared here and
// nowhere else.
//
// It is a leaf: it imports only package limits and the standard library,
// and reads nothing from the machine. Package config decodes the agent file
// and definitions (TOML, positions, problems, defaults) into these types;
// the packages that must not link the TOML decoder (assign, worker, api,
// metrics) import spec instead of config.
package spec
