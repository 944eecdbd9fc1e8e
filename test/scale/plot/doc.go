// Command plot draws test/scale's CSV output as one PNG, docs/scale.png.
//
// It has four panels against N: time from joining the cluster to all jobs
// running beside the fork+exec floor, scrape p50, CPU per scrape and RSS,
// berth beside process-exporter where both were measured:
//
//	go run ./test/scale/plot -csv scale.csv -o docs/scale.png
//
// For each N the last line of the CSV is used.
package main
