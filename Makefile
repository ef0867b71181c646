# gorun: build, test, demo and benchmarks. Run `make help` for the list.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# PyTorch 2.x, the reference version (pinned in tests/torch2/requirements.txt),
# lives in a virtual environment outside the checkout that tests/torch2/venv.sh
# makes once (about 3 GB downloaded) and every clone reuses. PYTHON runs the
# PyTorch demo, the GPU tests and torchrun in the benchmarks.
TORCH2_PYTHON = $(shell tests/torch2/venv.sh | tail -n 1)
PYTHON   ?= $(TORCH2_PYTHON)
# Debian's python3-torch 1.13, the oldest version gorun supports.
TORCH1_PYTHON ?= /usr/bin/python3
STATICCHECK_VERSION ?= v0.8.2

.PHONY: all build torch2-python rivals-python test test-slurm test-gpu chaos demo demo-torch bench bench-launch bench-spare bench-rendezvous bench-rendezvous-scale bench-leases bench-recovery bench-plan bench-memory bench-comm bench-watchdog lint fmt tidy-check update-golden clean help

all: build

bin/gorun: FORCE
	$(GO) build -tags urfave_cli_no_docs -ldflags "$(LDFLAGS)" -o $@ ./cmd/gorun

bin/gorun-etcd: FORCE
	$(GO) build -tags urfave_cli_no_docs -ldflags "$(LDFLAGS)" -o $@ ./cmd/gorun-etcd

bin/hello: FORCE
	$(GO) build -o $@ ./examples/hello

bin/ddp: FORCE
	$(GO) build -o $@ ./examples/ddp

build: bin/gorun bin/gorun-etcd bin/hello bin/ddp ## build bin/gorun, bin/gorun-etcd (gorun with etcd, run by gorun when needed) and the examples

torch2-python: ## make PyTorch 2.x's virtual environment if it is missing; the last line is its interpreter
	@tests/torch2/venv.sh

rivals-python: ## make the benchmarks' environment (PyTorch 2.x, NVIDIA's ft_launcher, torchft) if it is missing; the last line is its interpreter
	@tests/torch2/venv.sh rivals.txt

test: build ## unit and integration tests, with the race detector; the PyTorch tests on 2.x (made first), then the launcher's on 1.13
	@py=$$(tests/torch2/venv.sh | tail -n 1) || { echo "!!!!!!!! NO PYTORCH 2.x ENVIRONMENT (tests/torch2/venv.sh failed): the PyTorch tests fall back to Debian's 1.13 or skip" >&2; py=; }; \
	echo "PyTorch 2.x: $${py:-none}"; \
	GORUN_TORCH2_PYTHON="$$py" $(GO) test -race -count=1 -timeout 25m ./...
	@if $(TORCH1_PYTHON) -c 'import torch.distributed.run' 2>/dev/null; then \
		echo "torchrun_compat again on PyTorch 1.13 ($(TORCH1_PYTHON)), the oldest version gorun supports"; \
		GORUN_TEST_PYTHON=$(TORCH1_PYTHON) $(GO) test -race -count=1 ./tests/torchrun_compat/; \
	else echo "!!!!!!!! NO PYTORCH 1.13 at $(TORCH1_PYTHON) (Debian's python3-torch): torchrun_compat's 1.13 run is skipped" >&2; \
		[ "$$GORUN_REQUIRE_TORCH" != 1 ] || exit 1; fi

test-slurm: build ## the Slurm harness's smoke suite: munged, slurmctld and 3 slurmd in network namespaces, gorun under srun (root, slurm-wlm, munge; skips loudly without them)
	$(GO) test -count=1 -timeout 20m -v ./internal/testkit/slurmtest/...

SEED      ?= 1
ROUNDS    ?= 20
KINDS     ?= all
STORE_LOG ?=
chaos: ## the chaos suite: ROUNDS jobs on 3 network-namespace hosts, faults of KINDS drawn from SEED, store logs at STORE_LOG (root; make chaos SEED=7 ROUNDS=10 KINDS=cut,agent STORE_LOG=info)
	$(GO) test -count=1 -timeout 30m -run '^TestChaos$$' -v ./internal/testkit/chaos/ -args -chaos.seed=$(SEED) -chaos.rounds=$(ROUNDS) -chaos.kinds=$(KINDS) -chaos.store-log=$(STORE_LOG)

test-gpu: build ## tests that need an NVIDIA GPU (PyTorch DDP over NCCL; gorun's NCCL binding on the real library)
	GORUN_TEST_GPU=1 GORUN_TEST_PYTHON=$(PYTHON) $(GO) test -count=1 -run 'GPU' -v ./cmd/gorun/ ./comm/nccl/

demo: build ## three workers that print their ranks, rank 1 fails once and all restart; then data-parallel SGD in Go on 4 workers
	bin/gorun --nproc-per-node=3 --max-restarts=1 --no-python bin/hello --fail-rank=1
	bin/gorun --nproc-per-node=4 --no-python bin/ddp --steps 10

demo-torch: build ## the PyTorch DDP example on three CPU workers (PyTorch 2.x, made first)
	bin/gorun --nproc-per-node=3 --python $(PYTHON) examples/pytorch/train_ddp.py --steps 20

bench: bench-launch bench-rendezvous bench-rendezvous-scale bench-leases bench-plan bench-memory bench-comm bench-watchdog bench-spare bench-recovery bench-probe ## every benchmark

bench-launch: build ## gorun vs torchrun: empty job, failure -> replacement; writes docs/benchmarks.md
	bin/gorun bench launch --python $(PYTHON) --write docs/benchmarks.md

bench-rendezvous: build ## N agents through the etcd rendezvous vs the etcd floor; writes docs/benchmarks.md and docs/rendezvous.svg
	bin/gorun bench rendezvous --agents 64,256,512,1024,2048,4096 --format text --write docs/benchmarks.md --plot docs/rendezvous.svg

bench-rendezvous-scale: build ## 2,048 to 16,384 agents in 4 processes beside the store (its CPU, memory and keep-alive cost; a count this machine cannot carry says why), then a real job of 256 gorun agents beside its in-process twin
	bin/gorun bench rendezvous --agents 2048,4096,8192,16384 --processes 4 --format text
	bin/gorun bench rendezvous --agents 256 --real-job --format text

bench-leases: build ## the store's cost of N nodes' leases at each TTL vs how fast a silent node is dropped; writes docs/benchmarks.md
	bin/gorun bench leases --nodes 1024,4096 --ttl 2s,3s,4s,5s,10s --format text --write docs/benchmarks.md

# The benchmarks' environment: PyTorch 2.x with NVIDIA's ft_launcher and torchft.
RIVALS_PYTHON = $(shell tests/torch2/venv.sh rivals.txt | tail -n 1)

bench-recovery: build ## fault -> training again, gorun vs torchrun and NVIDIA's ft_launcher (3 local agents, PyTorch 2.x gloo; make rivals-python first); writes docs/benchmarks.md
	bin/gorun bench recovery --python $(RIVALS_PYTHON) --runs 3 --write docs/benchmarks.md

bench-probe: build ## the worker probe and straggler watch's cost per step (anchor: the same PyTorch job with --worker-probe=off); writes docs/benchmarks.md
	bin/gorun bench probe --python $(TORCH2_PYTHON) --runs 3 --write docs/benchmarks.md

bench-spare: build ## node loss -> training again: a hot spare vs a shrinking job (3 and 2 local agents); writes docs/benchmarks.md
	bin/gorun bench spare --runs 5 --write docs/benchmarks.md

bench-memory: build ## reuse modes on the simulated device: peak memory, events, violations (anchor: mode 0)
	bin/gorun bench memory --mode all --write docs/benchmarks.md
	bin/gorun bench memory --mode all --expandable-segments --write docs/benchmarks.md

bench-comm: build ## collectives on the CPU backend vs gloo and this machine's floors (shared memory, then TCP)
	bin/gorun bench comm --nproc-per-node 2 --sizes 1MiB,16MiB,64MiB --python $(PYTHON)
	GORUN_CPU_TRANSPORT=tcp bin/gorun bench comm --nproc-per-node 2 --sizes 1MiB,16MiB,64MiB --python $(PYTHON)

bench-watchdog: ## the watchdog's cost per collective (anchor: the same collective without it)
	$(GO) test -run '^$$' -bench WatchdogOverhead -benchtime 20000x -count 3 ./comm/

bench-plan: ## gorun plan of a 131,072-GPU layout (Go benchmark; no anchor exists)
	$(GO) test -run '^$$' -bench Plan131072 -benchmem ./topology/

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

tidy-check: ## fail if go.mod or go.sum are not tidy
	$(GO) mod tidy && git diff --exit-code go.mod go.sum

update-golden: ## rewrite the golden files in testdata/ (review the diff)
	$(GO) test ./... -update

clean:
	rm -rf bin

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

FORCE:
