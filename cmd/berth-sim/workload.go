package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/spec"
)

// tasksPerConnector is the shape of the simulated workload: connectors of
// ten tasks; every tenth connector is in one of 50 sharing groups (as the
// assign package's benchmark).
const tasksPerConnector = 10

// simConnector is what a simulated connector body says; other keys (its
// command, limits) are carried verbatim and not checked here.
type simConnector struct {
	Tasks int    `toml:"tasks"`
	Group string `toml:"group"`
}

// validate stands in for berth's limits package: the body is TOML with a
// task count and an optional group.
func validate(kind spec.DefKind, name string, body []byte) (assign.Connector, error) {
	var sc simConnector
	if _, err := toml.Decode(string(body), &sc); err != nil {
		return assign.Connector{}, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	if kind == spec.DefGroup {
		return assign.Connector{}, nil
	}
	return assign.Connector{Name: name, Tasks: sc.Tasks, Group: sc.Group}, nil
}

func connectorName(i int) string { return fmt.Sprintf("c%05d", i) }

// connectorBody is a realistic definition of about 200 bytes.
func connectorBody(i int) string {
	group := ""
	if i%10 == 0 {
		group = fmt.Sprintf("group = \"g%02d\"\n", (i/10)%50)
	}
	return fmt.Sprintf("tasks = %d\n%s[task]\ncommand = [\"/usr/bin/connect-sink\", \"--topic\", \"%s\"]\nlimits = { memory = \"256MiB\", cpu = 0.5, pids = 64 }\n",
		tasksPerConnector, group, connectorName(i))
}

// storeWorkload stores jobs/10 connectors and 50 groups, 32 writes at a time.
func storeWorkload(ctx context.Context, c *cluster.Client, jobs int) error {
	for g := range 50 {
		if err := c.PutGroup(ctx, fmt.Sprintf("g%02d", g), []byte("limits = { memory = \"8GiB\" }\n")); err != nil {
			return err
		}
	}
	n := jobs / tasksPerConnector
	work := make(chan int)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := c.PutConnector(ctx, connectorName(i), []byte(connectorBody(i))); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
