# berth — build, run and test. Every target runs as root on a Debian host.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
CONFIG    ?= packaging/examples/berth.toml
PKGS      := ./...
TESTFLAGS ?=

.PHONY: build run test test-race lint bench soak soak-short fuzz test-v2 test-systemd deb clean

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
	$(GO) vet -tags soak ./test/soak
	staticcheck $(PKGS)
	staticcheck -tags soak ./test/soak

bench: ## Go benchmarks (as root); results and method in BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchmem -count=5 ./cgroup ./worker ./supervisor ./assign ./cluster | tee bench.out
	$(GO) test -run '^$$' -bench Failover -benchtime 5x ./test | tee -a bench.out

SOAKFLAGS ?=
soak: build ## the soaks, long form (100 agent kills, 100 partitions, etcd faults, full file systems); figures in soak.md, method in RELIABILITY.md
	rm -f soak.md
	$(GO) test -tags soak -count=1 -v -timeout 3h ./test/soak -soak.bin=$(CURDIR)/bin/berth \
		-soak.kills=100 -soak.partitions=100 -soak.report=$(CURDIR)/soak.md $(SOAKFLAGS)
	cat soak.md

soak-short: build ## the soaks' short form, as CI runs it (10 kills, 10 partitions)
	$(GO) test -tags soak -count=1 -v -timeout 15m ./test/soak -soak.bin=$(CURDIR)/bin/berth \
		-soak.kills=10 -soak.partitions=10 $(SOAKFLAGS)

test-v2: ## cgroup, worker and supervisor tests on a pure cgroup v2 kernel under qemu (lane 1)
	test/vm/lane1.sh cgroup worker supervisor -- $(TESTFLAGS)

test-systemd: build ## install the .deb in Debian with systemd under qemu and check the service (lane 2)
	VERSION=$(VERSION) test/vm/lane2.sh

deb: build ## dist/berth_<version>_amd64.deb (nfpm)
	VERSION=$(VERSION) test/vm/deb.sh

clean:
	rm -rf bin dist bench.out soak.md
