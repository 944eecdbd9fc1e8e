package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func main() {
	in := flag.String("csv", "scale.csv", "CSV written by test/scale -csv")
	out := flag.String("o", "docs/scale.png", "PNG to write")
	flag.Parse()
	rows, err := read(*in)
	if err != nil {
		fail(err)
	}
	panels := []*plot.Plot{
		panel("jobs started: joined the cluster to all running", "seconds", rows, line{"berth", "start_s", 1}, line{"fork+exec floor (plain starts)", "floor_start_s", 1}, line{"cgroup+fork floor (limited cgroups, no agent)", "floor_cgroup_s", 1}),
		panel("one /metrics scrape, p50", "milliseconds", rows, line{"berth", "berth_scrape_s", 1000}, line{"process-exporter", "exporter_scrape_s", 1000}),
		panel("exporter CPU per scrape", "CPU milliseconds", rows, line{"berth", "berth_cpu_per_scrape_s", 1000}, line{"process-exporter", "exporter_cpu_per_scrape_s", 1000}),
		panel("resident memory", "MiB", rows, line{"berth agent", "agent_rss_bytes", 1.0 / (1 << 20)}, line{"process-exporter", "exporter_rss_bytes", 1.0 / (1 << 20)}),
	}
	img := vgimg.New(28*vg.Centimeter, 20*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter, PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	canvases := plot.Align([][]*plot.Plot{{panels[0], panels[1]}, {panels[2], panels[3]}}, tiles, dc)
	for i := range 2 {
		for j := range 2 {
			panels[2*i+j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		fail(err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		fail(err)
	}
	if err := f.Close(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "plot:", err)
	os.Exit(1)
}

// line is one series of a panel: a CSV column scaled into the panel's unit.
type line struct {
	name, column string
	scale        float64
}

// rows maps N to the last CSV line measured for it (column -> value).
func read(path string) (map[int]map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("%s has no measurements", path)
	}
	out := map[int]map[string]float64{}
	for _, r := range recs[1:] {
		m := map[string]float64{}
		for i, col := range recs[0] {
			if i < len(r) {
				m[col], _ = strconv.ParseFloat(r[i], 64)
			}
		}
		m["start_s"] = m["all_running_s"] - m["joined_s"]
		out[int(m["n"])] = m
	}
	return out, nil
}

func panel(title, unit string, rows map[int]map[string]float64, lines ...line) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "jobs (N)"
	p.Y.Label.Text = unit
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	ns := make([]int, 0, len(rows))
	for n := range rows {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	var args []any
	for _, l := range lines {
		pts := plotter.XYs{}
		for _, n := range ns {
			if v, ok := rows[n][l.column]; ok && v > 0 {
				pts = append(pts, plotter.XY{X: float64(n), Y: v * l.scale})
			}
		}
		if len(pts) > 0 {
			args = append(args, l.name, pts)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		fail(err)
	}
	return p
}
