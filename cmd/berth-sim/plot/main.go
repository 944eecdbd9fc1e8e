package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// run is the part of a simulation result the plot needs.
type run struct {
	Members int     `json:"members"`
	Jobs    int     `json:"jobs"`
	Load    float64 `json:"load_before"`
	Cold    struct {
		Seconds float64 `json:"s"`
		Joined  float64 `json:"joined_s"`
	} `json:"cold"`
	Anchor struct {
		Join float64 `json:"join_s"`
		Put  float64 `json:"put_s"`
	} `json:"anchor"`
}

func main() {
	in := flag.String("in", "bench-cluster.jsonl", "simulation results, one JSON object per line")
	out := flag.String("out", "coldstart.png", "PNG to write")
	flag.Parse()
	if err := draw(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func draw(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var runs []run
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var r run
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s:%d: %w", in, line, err)
		}
		if r.Cold.Seconds > 0 {
			runs = append(runs, r)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("%s: no cold start measured", in)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Members < runs[j].Members })
	total := make(plotter.XYs, len(runs))
	joined := make(plotter.XYs, len(runs))
	floor := make(plotter.XYs, len(runs))
	goal := plotter.XYs{{X: float64(runs[0].Members), Y: 60}, {X: float64(runs[len(runs)-1].Members), Y: 60}}
	for i, r := range runs {
		total[i] = plotter.XY{X: float64(r.Members), Y: r.Cold.Seconds}
		joined[i] = plotter.XY{X: float64(r.Members), Y: r.Cold.Joined}
		floor[i] = plotter.XY{X: float64(r.Members), Y: r.Anchor.Join + r.Anchor.Put}
	}
	p := plot.New()
	p.Title.Text = "berth cluster simulation: cold start (100 jobs per member, 3-node etcd, 2 cores)"
	p.X.Label.Text = "members (jobs = 100 × members)"
	p.Y.Label.Text = "seconds"
	p.Y.Min, p.Y.Max = 0, 75
	p.Add(plotter.NewGrid())
	lt, pt, err := plotter.NewLinePoints(total)
	if err != nil {
		return err
	}
	lj, pj, err := plotter.NewLinePoints(joined)
	if err != nil {
		return err
	}
	lj.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	pj.Shape = nil
	lf, err := plotter.NewLine(floor)
	if err != nil {
		return err
	}
	lf.Dashes = []vg.Length{vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}
	lg, err := plotter.NewLine(goal)
	if err != nil {
		return err
	}
	lg.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(lt, pt, lj, lf, lg)
	p.Legend.Add("cold start: every job claimed and running where assigned", lt, pt)
	p.Legend.Add("every member joined", lj)
	p.Legend.Add("anchor, same run: bare etcd joins + one lease-bound put per job", lf)
	p.Legend.Add("goal at 1,000 members: 60 s", lg)
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(8*vg.Inch, 4.5*vg.Inch, out)
}
