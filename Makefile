# berth — build, run and test. Every target runs as root on a Debian host.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
CONFIG    ?= packaging/examples/berth.toml
PKGS      := ./...
TESTFLAGS ?=
TESTFORMAT ?= pkgname

.PHONY: build run test test-loaded test-race lint bench bench-restart bench-recommend bench-scale bench-cluster bench-cluster-ci soak soak-short soak-fencing soak-fencing-short fuzz test-v2 test-systemd deb docs man completion clean

build: ## bin/berth
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/berth ./cmd/berth

run: build ## run the agent on the example config (as root)
	./bin/berth agent --config $(CONFIG)

test: build ## every test, with the race detector, as root; installs the Debian packages the tests use; ends with pass/fail/skip counts
	test/deps.sh
	$(GO) vet $(PKGS)
	$(GO) tool gotestsum --format $(TESTFORMAT) --jsonfile test.json -- -race -count=1 -timeout 30m $(TESTFLAGS) $(PKGS)

LOADED_RUNS    ?= 3
LOADED_BURNERS ?= $(shell nproc)
test-loaded: ## make test LOADED_RUNS times (3) with LOADED_BURNERS CPU burners (one per core) running, always stopped by PID; prints each run's pass/fail/skip counts
	LOADED_RUNS=$(LOADED_RUNS) LOADED_BURNERS=$(LOADED_BURNERS) MAKE="$(MAKE)" test/loaded.sh

lint: ## gofmt, go vet, staticcheck (pinned in go.mod)
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet $(PKGS)
	$(GO) vet -tags soak ./test/soak
	$(GO) tool staticcheck $(PKGS)
	$(GO) tool staticcheck -tags soak ./test/soak

bench: ## Go benchmarks (as root); results and method in BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchmem -count=5 ./cgroup ./worker ./supervisor ./assign ./cluster ./fencing | tee bench.out
	$(GO) test -run '^$$' -bench Failover -benchtime 5x ./test | tee -a bench.out

bench-restart: ## cold start and live restart with 100, 1,000, 5,000 and 10,000 jobs (as root): start and adoption times from the exec and from the join, pids kept, log lines lost, kill-to-dead against the fencing deadline, the guard's memory; tables in BENCHMARKS.md
	$(GO) test -run '^$$' -bench LiveRestart -benchtime 1x -timeout 60m ./test | tee bench-restart.out

bench-recommend: ## berth recommend under the real agent (as root): the four synthetic jobs 10 minutes each, then again under the recommendation; the table in BENCHMARKS.md
	$(GO) test -run 'TestRecommendShapes$$' -count=1 -v -timeout 60m ./test -args -recommend.duration 10m | tee bench-recommend.out

# The cluster simulation (cmd/berth-sim): members of the real cluster package
# with stand-in workers against a three-member etcd on loopback. Results
# are appended to $(SIMOUT); the plot is drawn from them. SIMFLAGS go to
# the 1,000-member run (e.g. -cpuprofile FILE -etcdprofile DIR).
SIM       := bin/berth-sim
SIMOUT    ?= bin/bench-cluster.jsonl
SIMFLAGS  ?=

$(SIM): FORCE
	$(GO) build -o $(SIM) ./cmd/berth-sim

bench-cluster: $(SIM) ## cluster simulation: 100 × 10,000 and 1,000 × 100,000 (+ cold starts at 250, 500 members for the plot); tables in BENCHMARKS.md
	test -x /usr/bin/etcd || test/deps.sh
	rm -f $(SIMOUT)
	$(SIM) -members 100 -jobs 10000 -json $(SIMOUT)
	$(SIM) -members 250 -jobs 25000 -cold-only -json $(SIMOUT)
	$(SIM) -members 500 -jobs 50000 -cold-only -json $(SIMOUT)
	$(SIM) -members 1000 -jobs 100000 -timeout 5m -json $(SIMOUT) $(SIMFLAGS)
	$(GO) run ./cmd/berth-sim/plot -in $(SIMOUT) -out docs/coldstart.png

bench-cluster-ci: $(SIM) ## the CI size of the cluster simulation: 100 × 10,000, at most 3 minutes; fails on a double run or a phase that does not end with every job running
	test -x /usr/bin/etcd || test/deps.sh
	$(SIM) -members 100 -jobs 10000 -timeout 2m -total 3m

# An N that kernel.pid_max or the hard RLIMIT_NOFILE (one descriptor per
# job in the agent and in its guard) leaves no room for is skipped with the
# reason. SCALE_FLAGS go to every N (e.g. -profile DIR -start-profile 60s:
# the agent's and the lease guard's CPU profiles over the start).
SCALE_N ?= 100,1000,5000,10000
SCALE_FLAGS ?=
bench-scale: build ## the real agent with N jobs beside process-exporter and both start floors (as root); tables to stdout, docs/scale.png
	test -x /usr/bin/prometheus-process-exporter || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-process-exporter)
	$(GO) run ./test/scale -n $(SCALE_N) -bin bin/berth -csv scale.csv $(SCALE_FLAGS) | tee bench-scale.out
	$(GO) run ./test/scale/plot -csv scale.csv -o docs/scale.png

SOAKFLAGS ?=
soak: build ## the soaks, long form (100 agent kills, 100 partitions and 50 kills of a cluster member among them, etcd faults, full file systems), as root; figures in soak.md, method in RELIABILITY.md
	test/deps.sh
	rm -f soak.md
	$(GO) test -tags soak -count=1 -v -timeout 3h ./test/soak -skip TestSoakFencing -soak.bin=$(CURDIR)/bin/berth \
		-soak.kills=100 -soak.partitions=100 -soak.memberkills=50 -soak.report=$(CURDIR)/soak.md $(SOAKFLAGS)
	cat soak.md

soak-short: build ## the soaks' short form, as CI runs it (10 kills, 10 partitions, 5 member kills), as root
	test/deps.sh
	$(GO) test -tags soak -count=1 -v -timeout 15m ./test/soak -skip TestSoakFencing -soak.bin=$(CURDIR)/bin/berth \
		-soak.kills=10 -soak.partitions=10 -soak.memberkills=5 $(SOAKFLAGS)

# The fencing proof (test/soak/fencing_test.go): heartbeat jobs that fork,
# fault rounds one kind at a time and mixed, the history replayed as a
# store that fences by token. FENCING_ROUNDS (1,000) rounds; figures in
# soak-fencing.md, method in RELIABILITY.md.
FENCING_ROUNDS ?= 1000
soak-fencing: build ## the fencing soak, long form (1,000 fault rounds, about an hour here), as root; figures in soak-fencing.md
	test/deps.sh
	rm -f soak-fencing.md
	$(GO) test -tags soak -count=1 -v -timeout 3h ./test/soak -run '^TestSoakFencing$$' -soak.bin=$(CURDIR)/bin/berth \
		-soak.fencing.rounds=$(FENCING_ROUNDS) -soak.report=$(CURDIR)/soak-fencing.md $(SOAKFLAGS)
	cat soak-fencing.md

soak-fencing-short: build ## the fencing soak's short form, for CI (50 fault rounds, about 3 minutes here), as root
	test/deps.sh
	$(GO) test -tags soak -count=1 -v -timeout 20m ./test/soak -run '^TestSoakFencing$$' -soak.bin=$(CURDIR)/bin/berth \
		-soak.fencing.rounds=50 $(SOAKFLAGS)

FUZZTIME ?= 30s
FUZZ_TARGETS := ./config:FuzzParse ./config:FuzzDefinitions ./config:FuzzParseConnector ./config:FuzzParseGroup \
	./workload:FuzzParse ./assign:FuzzCompute ./api:FuzzHandler
fuzz: ## every fuzz target for FUZZTIME each; seed corpora in <pkg>/testdata/fuzz, where a failing input is also written
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; done

# The end-to-end tests of the three ways an agent ends (stop, crash,
# upgrade) run there too, with the real binary.
LANE1_E2E := '^(TestMemoryPressureRestartBeforeOOMKill|TestMemoryPressureNotifyEnvironment|TestStopRemovesEverything|TestCrashedAgentHandsJobsOver|TestUpgradeHandsJobsOver|TestOrphansKilledAfterAgentSIGKILL|TestLimitsRemovedWhileNoAgentRanAreLiftedFromAdoptedRun|TestC33JobCgroupRemovedFromOutside|TestC38JobsDieWithTheirGuard)$$'

test-v2: ## cgroup (with cgroup/memwatch), worker, supervisor and guard tests, and the end-to-end stop, crash and upgrade tests, on a pure cgroup v2 kernel under qemu (lane 1)
	LANE1_MEM=$${LANE1_MEM:-2048} test/vm/lane1.sh cgroup cgroup/memwatch worker supervisor guard test:$(LANE1_E2E) -- $(TESTFLAGS)

test-systemd: build ## install the .deb in Debian with systemd under qemu and check the service (lane 2)
	VERSION=$(VERSION) test/vm/lane2.sh

deb: build ## dist/berth_<version>_amd64.deb (nfpm), with man pages and completion
	VERSION=$(VERSION) test/vm/deb.sh

docs: ## regenerate docs/config.md from config/keys.go and docs/metrics.md from the metrics descriptors (a test fails when either is stale)
	$(GO) run ./cmd/berth gendocs --config-md docs/config.md --metrics-md docs/metrics.md

man: build ## bin/man: berth(1), one page per command, berth.toml(5) (man -l bin/man/berth.1)
	rm -rf bin/man
	./bin/berth gendocs --man bin/man

completion: build ## bin/completion: bash (berth), zsh (_berth) and fish (berth.fish) scripts
	mkdir -p bin/completion
	./bin/berth completion bash >bin/completion/berth
	./bin/berth completion zsh >bin/completion/_berth
	./bin/berth completion fish >bin/completion/berth.fish

clean:
	rm -rf bin dist bench.out bench-scale.out scale.csv test.json test-loaded-*.json soak.md

FORCE:
