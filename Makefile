# berth — build, run and test. Every target runs as root on a Debian host.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
CONFIG    ?= packaging/examples/berth.toml
PKGS      := ./...
TESTFLAGS ?=

.PHONY: build run test test-race lint bench bench-cluster bench-cluster-ci test-v2 test-systemd deb clean

build: ## bin/berth
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/berth ./cmd/berth

run: build ## run the agent on the example config (as root)
	./bin/berth agent --config $(CONFIG)

test: build ## every test, with the race detector, as root
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(TESTFLAGS) $(PKGS)

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet $(PKGS)
	staticcheck $(PKGS)

bench: ## Go benchmarks (as root); results and method in BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchmem -count=5 ./cgroup ./worker ./supervisor ./assign ./cluster | tee bench.out
	$(GO) test -run '^$$' -bench Failover -benchtime 5x ./test | tee -a bench.out

# The cluster simulation (cluster/sim): members of the real cluster package
# with stand-in workers against a three-member etcd on loopback. Results
# are appended to $(SIMOUT); the plot is drawn from them. SIMFLAGS go to
# the 1,000-member run (e.g. -cpuprofile FILE -etcdprofile DIR).
SIM       := bin/berth-sim
SIMOUT    ?= bin/bench-cluster.jsonl
SIMFLAGS  ?=

$(SIM): FORCE
	$(GO) build -o $(SIM) ./cluster/sim

bench-cluster: $(SIM) ## cluster simulation: 100 × 10,000 and 1,000 × 100,000 (+ cold starts at 250, 500 members for the plot); tables in BENCHMARKS.md
	rm -f $(SIMOUT)
	$(SIM) -members 100 -jobs 10000 -json $(SIMOUT)
	$(SIM) -members 250 -jobs 25000 -cold-only -json $(SIMOUT)
	$(SIM) -members 500 -jobs 50000 -cold-only -json $(SIMOUT)
	$(SIM) -members 1000 -jobs 100000 -timeout 5m -json $(SIMOUT) $(SIMFLAGS)
	cd cluster/sim/plot && $(GO) run . -in $(CURDIR)/$(SIMOUT) -out $(CURDIR)/cluster/sim/coldstart.png

bench-cluster-ci: $(SIM) ## the CI size of the cluster simulation: 100 × 10,000 (under 3 minutes)
	$(SIM) -members 100 -jobs 10000 -timeout 2m

test-v2: ## cgroup, worker and supervisor tests on a pure cgroup v2 kernel under qemu (lane 1)
	test/vm/lane1.sh cgroup worker supervisor -- $(TESTFLAGS)

test-systemd: build ## install the .deb in Debian with systemd under qemu and check the service (lane 2)
	VERSION=$(VERSION) test/vm/lane2.sh

deb: build ## dist/berth_<version>_amd64.deb (nfpm)
	VERSION=$(VERSION) test/vm/deb.sh

clean:
	rm -rf bin dist bench.out

FORCE:
