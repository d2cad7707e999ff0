# crishim: the two commands that matter are `make demo` and `make test`.
# Both install what they need (Debian packages for the private runtime,
# Go tools into ./bin/tools) on a fresh machine.
#
# RUNTIME picks the real runtime behind crishim for demo, node, bench and the
# tests (test/harness reads it from the environment, so `make test RUNTIME=...`
# and `RUNTIME=... make test` both work):
#   containerd      containerd v2.4.2, built from the Go module proxy and cached
#                   in /var/tmp/crishim-testbed/containerd-bin (the default)
#   containerd-1.6  Debian 12's containerd package
#   crio            CRI-O 1.34
export RUNTIME

GO        ?= go
# The release is the file VERSION; builds between releases add the commits since it
# (packaging/deb/version.sh: 0.1.0+git3.abc1234). No tag is read.
VERSION   ?= $(shell packaging/deb/version.sh 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
TOOLS     := $(CURDIR)/bin/tools
STATICCHECK_VERSION ?= v0.8.2
CONTROLLER_GEN_VERSION ?= v0.23.0
NFPM_VERSION ?= v2.45.2
# golang.org/x/perf has no tagged releases: a pseudo-version from the module proxy.
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da
# Where `make deb` writes dist/crishim_<version>_<arch>.deb (DEB_VERSION, default from
# packaging/deb/version.sh, and GOARCH may be set) and `make release` its artifacts.
DIST ?= $(CURDIR)/dist
# End-to-end tests need root (they start a private containerd); run them
# with `make test`, which is what CI does.
E2E_TIMEOUT ?= 25m
# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 30s
FUZZ_TARGETS := proxy:FuzzClientFrames proxy:FuzzMsgLimit shim:FuzzParseNotifier shim:FuzzParseSignal shim:FuzzRewriteStatus

.PHONY: all build deb release test test-sysnode unit e2e fuzz demo demo-clean node node-clean kube-bins runtime-bins bench bench-guard benchstat bench-node scale image conformance lint generate generate-crd fmt clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/crishim ./cmd/crishim
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/crishimctl ./cmd/crishimctl

# The Debian package: reproducible binaries and everything packaging/deb/nfpm.yaml lists.
deb:
	@test -x $(TOOLS)/nfpm || GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	@GO='$(GO)' NFPM='$(TOOLS)/nfpm' DIST='$(DIST)' DEB_VERSION='$(DEB_VERSION)' COMMIT='$(COMMIT)' packaging/deb/build.sh

# The release of the version in VERSION, into DIST: tarballs of the static binaries and
# the .deb for amd64 and arm64, the Kubernetes manifests, SHA256SUMS (packaging/release.sh;
# docs/releasing.md). The same commit gives the same bytes.
release:
	@test -x $(TOOLS)/nfpm || GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	@GO='$(GO)' NFPM='$(TOOLS)/nfpm' DIST='$(DIST)' COMMIT='$(COMMIT)' packaging/release.sh

# All tests: unit tests, then end-to-end tests against the private runtime (RUNTIME), then
# the same through a real kubelet and kubectl (test/kube). The Kubernetes binaries and the
# runtime are built first, outside the tests' timeout: cold, that is the long part; cached after.
#
# Then the runtime-sensitive tests (RUNTIME_TESTS: TARGET, stop signals, the signal API and
# notifiers, streaming, idempotence, governance, Notification objects, kubectl debug) run
# again against each other runtime of the test bed (OTHER_RUNTIMES), each prepared first.
# docs/testing.md#what-runs-where says what runs where.
RUNTIME_TESTS ?= ^(TestCRIThroughCrishim|TestCrishimctlStatus|TestPIDTarget.*|TestCrishimctlDebug.*|TestStopSignal.*|TestSignalAPI.*|TestNotifiers|TestNotifySelector|TestExec.*|TestAttach.*|TestPortForward.*|TestCrishimctlExec|TestIdempotent.*|TestDebugImageAllowlist|TestAuditLogExec|TestRecordSessions.*|TestCrictl.*|TestWebSocket.*|TestKubectlDebugTarget|TestKubectlDebugWithoutTarget|TestNotificationAcrossTwoNodes|TestNotifiersOnTheNode|TestKubeletListsByStreamingThroughCrishim|TestInPlaceResizeThroughCrishim)$$
OTHER_RUNTIMES ?= $(filter-out $(or $(RUNTIME),containerd),containerd crio containerd-1.6)
test: build kube-bins runtime-bins
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(E2E_TIMEOUT) ./...
	@echo "== the systemd node: the shipped units under a real systemd"
	@$(MAKE) --no-print-directory test-sysnode
	@for rt in $(OTHER_RUNTIMES); do \
		echo "== the runtime-sensitive tests against $$rt"; \
		RUNTIME=$$rt $(GO) run ./test/harness/prepare || exit 1; \
		RUNTIME=$$rt $(GO) test -count=1 -timeout $(E2E_TIMEOUT) -run '$(RUNTIME_TESTS)' ./test/e2e/ ./test/kube/ || exit 1; \
	done

# The tests on the systemd node (docs/testing.md#the-systemd-node; root; a step of `make
# test`): its boot alone, then the node with crishim from its package, then the node straight
# on containerd under the fleet installer (test/sysinstall, one after the other on the same
# index). SYSTEMD_NODE picks the node's index (default 1).
test-sysnode: kube-bins runtime-bins
	CRISHIM_SYSTEMD_NODE=$(or $(SYSTEMD_NODE),1) $(GO) test -count=1 -run '^TestSystemdNodeBoots$$' ./test/node/
	CRISHIM_SYSTEMD_NODE=$(or $(SYSTEMD_NODE),1) $(GO) test -count=1 -timeout 30m ./test/sysnode/
	CRISHIM_INSTALLER_NODE=$(or $(SYSTEMD_NODE),1) $(GO) test -count=1 -timeout 30m ./test/sysinstall/

# Unit tests only (no containerd, no root). Go's test cache reruns the packages whose code
# (or whose dependencies') changed since they last passed: the edit loop. GOFLAGS=-count=1
# reruns every package (docs/testing.md has both times).
unit:
	$(GO) test -short ./...

# Each fuzz target for FUZZTIME; new crashers land in the package's
# testdata/fuzz, where plain `go test` runs them from then on.
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "fuzz $$name ($(FUZZTIME))"; \
		$(GO) test ./$$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME); \
	done

e2e: build runtime-bins
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) -v ./test/...

# A private containerd, crishim in front of it, a scripted walk through what
# crishim does; then a chapter with kubectl on a real node (test/node) when its
# Kubernetes binaries are cached, or always with KUBE=1 (which builds them).
# KEEP=1 leaves containerd and crishim running; `make demo-clean` removes them.
# DEMO_DIR=dir puts crishim's socket and log there (default: the runtime's slot directory).
# KUBE_NODE=n runs the kubectl chapter on node index n instead of make node's (0).
demo: build
	$(GO) run ./test/demo --crishim bin/crishim --crishimctl bin/crishimctl $(if $(KEEP),--keep) $(if $(KUBE),--kube) $(if $(DEMO_DIR),--dir $(DEMO_DIR)) $(if $(KUBE_NODE),--kube-node $(KUBE_NODE))

demo-clean:
	$(GO) run ./test/demo --clean

# A one-node Kubernetes cluster (etcd, kube-apiserver, controller-manager, scheduler,
# kubelet) whose kubelet talks to crishim in front of the private containerd. Prints
# KUBECONFIG=, CRISHIM_SOCK= and CRISHIM_METRICS= lines; a second call reuses the node.
# SYSTEMD=1: the systemd node instead (docs/testing.md#the-systemd-node): systemd as PID 1
# of its own namespaces, containerd, crishim (from `make deb`) and the kubelet as its units;
# started afresh each time. SYSTEMD_NODE picks its index (default 1).
node: build $(if $(SYSTEMD),deb)
	@$(GO) run ./test/node/up --crishim bin/crishim $(if $(SYSTEMD),--systemd --index $(or $(SYSTEMD_NODE),1))

node-clean:
	@$(GO) run ./test/node/up --clean $(if $(SYSTEMD),--systemd --index $(or $(SYSTEMD_NODE),1))

# Build (or find cached) kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kubectl and etcd from the Go module proxy (test/node/kubebuild).
kube-bins:
	@$(GO) run ./test/node/up --build-only

# Install or build (or find cached) what RUNTIME needs: Debian packages, and for the
# default containerd 2.4 its binaries (test/harness/containerdbin.go).
runtime-bins:
	@$(GO) run ./test/harness/prepare

# Direct vs. a byte-copying pipe (the floor) vs. crishim, interleaved, through the
# kubelet's client, against a fake runtime and the private runtime (root). Prints Go
# benchmark format: `make bench > a.txt` a few times, then `bin/tools/benchstat -col /target
# a.txt` (make benchstat installs it). BENCH_FLAGS='--baseline OTHER --bench Version'...
bench: build
	$(GO) run ./test/bench --crishim bin/crishim $(BENCH_FLAGS)

# The micro guard (not part of make test: no timings in tests): GUARD_RUNS runs of the small
# calls with the naive forwarder too, then crishim's added latency, median over the runs,
# at most 1.4x the pipe's and at most half the naive forwarder's. Runs stay in bin/bench-guard.
GUARD_RUNS ?= 8
bench-guard: build
	$(GO) build -o bin/bench ./test/bench
	@rm -rf bin/bench-guard && mkdir -p bin/bench-guard
	@for i in $$(seq $(GUARD_RUNS)); do echo "== run $$i of $(GUARD_RUNS)"; \
		bin/bench --crishim bin/crishim --naive --bench '^(Version|ContainerStatus)$$' $(BENCH_FLAGS) > bin/bench-guard/run-$$i.txt || exit 1; done
	bin/bench --guard bin/bench-guard/run-*.txt

# benchstat (golang.org/x/perf) reads make bench's output: medians, intervals, A/B deltas.
benchstat:
	@test -x $(TOOLS)/benchstat || GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

# What the kubelet feels: the test bed's node (root; RUNTIME picks the runtime) with its
# kubelet pointed straight at the runtime and at crishim in turn, the same short load of 5 pods
# each time, paired turns until each ratio's interval is resolved against ±2% (docs/performance.md).
# Ends with `worst kubelet-side ratio crishim/direct = R`. BENCH_NODE_FLAGS='--node 12 --max-turns 30'...
bench-node: build kube-bins runtime-bins
	$(GO) run ./test/benchnode --crishim bin/crishim $(BENCH_NODE_FLAGS)

# The notification controller's image, built offline: a static binary in an OCI archive,
# bin/crishim-notification-controller.oci.tar (ctr -n k8s.io images import it on a node); and
# the fleet installer's (packaging/kubernetes/install), bin/crishim-node-installer.oci.tar,
# whose crishim reports $(DEB_VERSION) or packaging/deb/version.sh's version.
image:
	$(GO) run ./test/harness/image --installer-version $(or $(DEB_VERSION),$(shell packaging/deb/version.sh))

# The Notification API at scale (docs/notifications.md#proven-at-scale), run by hand: the
# bed's etcd and kube-apiserver alone (node index CRISHIM_SCALE_NODE, default 11), the
# aggregator, and N simulated nodes running crishim's node-side code with their own node
# identities. Ends with `scale: N=<largest> completed in <s> s, largest object <bytes> B,
# watch events per node <x>`. Runs are N or NxP (pods per node); other flags: --fail K,
# --late K, --inject-504 F, --pprof DIR (go run ./test/scale -h).
SCALE_FLAGS ?= --nodes 100,1000,100x30,5000
scale: kube-bins
	$(GO) run ./test/scale $(SCALE_FLAGS)

# critest, cri-tools' CRI conformance suite (built from the Go module proxy and cached),
# directly against a private runtime and then through crishim in front of it; fails when
# a spec passes only directly. RUNTIME=containerd|crio|containerd-1.6 picks the runtime.
conformance: build
	$(GO) run ./test/conformance --crishim bin/crishim --runtime '$(RUNTIME)'

lint:
	$(GO) vet ./...
	@test -x $(TOOLS)/staticcheck || GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(TOOLS)/staticcheck ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi

# Regenerate the crishim.v1 API code (needs protoc: apt-get install protobuf-compiler).
generate:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	GOBIN=$(TOOLS) $(GO) install tool
	PATH=$(TOOLS):$$PATH protoc -I shim/crishimv1 \
		--go_out=paths=source_relative:shim/crishimv1 \
		--go-grpc_out=paths=source_relative:shim/crishimv1 \
		shim/crishimv1/crishim.proto

# Regenerate the Notification API's deepcopy code and CRD manifests (crishim.io/v1alpha2:
# Notification, NodeNotification) from the Go types.
generate-crd:
	@test -x $(TOOLS)/controller-gen || GOBIN=$(TOOLS) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	$(TOOLS)/controller-gen object paths=./notification/v1alpha2/... crd:crdVersions=v1 output:crd:dir=packaging/kubernetes

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin dist
