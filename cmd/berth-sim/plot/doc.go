// Command plot draws the cluster simulation's cold-start times as a PNG.
//
// It plots the cold-start time against the
// number of members, from the JSON lines that `berth-sim -json` appends
// (`make bench-cluster`), as a PNG, with the anchor (bare etcd clients'
// joins and puts, measured in the same run) beneath it.
//
//	go run ./cmd/berth-sim/plot -in bin/bench-cluster.jsonl -out docs/coldstart.png
package main
