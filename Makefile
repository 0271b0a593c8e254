# unitlet — `make run` starts a node's services locally, `make test` runs every test.
# Tools are pinned here and built from the Go module proxy (buf: its release build, see
# $(BUF)) into a cache outside the repository, so a fresh clone on a machine that built them
# once does not build them again.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

CACHE ?= $(HOME)/.cache/unitlet
TOOLS := $(CACHE)/tools
BIN := $(CURDIR)/bin
DIST := $(CURDIR)/dist

BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.11
PROTOC_GEN_GO_GRPC_VERSION := v1.6.1
STATICCHECK_VERSION := v0.8.2
NFPM_VERSION := v2.45.2

BUF := $(TOOLS)/buf-$(BUF_VERSION)/buf
PROTOC_GEN_GO := $(TOOLS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(TOOLS)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)/protoc-gen-go-grpc
STATICCHECK := $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
NFPM := $(TOOLS)/nfpm-$(NFPM_VERSION)/nfpm
PROTO_PATH := $(dir $(PROTOC_GEN_GO)):$(dir $(PROTOC_GEN_GO_GRPC)):$(PATH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# -s -w: no symbol table and no DWARF (a third of each binary; panics still print their
# stacks from the pclntab, which stays). The version is stamped with -X.
LDFLAGS := -s -w -X github.com/unitlet/unitlet/shared/version.Version=$(VERSION) \
	-X github.com/unitlet/unitlet/shared/version.GitCommit=$(COMMIT)

# Every module of the workspace, as package patterns.
PKGS := ./... ./proto/... ./shared/... ./services/certs/... ./services/config/... ./services/eviction/... ./services/podsync/... ./services/status/... ./services/volumes/... ./integration/...
UNIT_PKGS := ./... ./proto/... ./shared/... ./services/certs/... ./services/config/... ./services/eviction/... ./services/podsync/... ./services/status/... ./services/volumes/...
# The previous release: the commit whose binaries and packages the mixed-version and upgrade
# tests run beside this build's (make prev-release; README.md, "Upgrades and mixed
# versions"). Move it forward when a release is cut.
PREV_RELEASE := 4fc671e02c2c4cadf5c4dfa6cf020bd1f87c70f5
PREV_DIR := $(CACHE)/prev-release/$(PREV_RELEASE)
CMDS := unitlet-certs unitlet-config unitlet-eviction unitlet-podsync unitlet-status unitlet-volumes unitletctl unitlet-harness

.PHONY: all build prereqs deb deb-check gates test test-unit test-integration test-faults test-vm harness-binaries cluster down proto proto-check lint bench bench-bus bench-podsync bench-pods bench-memory bench-volumes bench-eviction bench-metrics fuzz run clean tools

all: build

prereqs:
	@bash deploy/prereqs.sh

## build: the binaries, into bin/
build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

## test: everything: generated code, lint, unit tests, the packages, the harness suites, the
## fault suite, kubeadm and the vm node, as a schedule of steps (the run-* targets below, run
## by make -j). What the vm suite needs is built first at full priority; the vm suite then
## runs at full priority (its emulated guest takes a core for over 30 minutes) while one
## chain has the other core: the CPU-bound checks (proto-check, lint, the unit tests,
## deb-check) at nice 19 while the vm's stack comes up, then the host's suites one after
## another at nice 10, each alone there, as their tests time restarts, graceful deletions
## and probes: the fault suite, test-containerd2, test-integration, test-kubeadm (which
## takes the kubelet's ports). The harness's own builds run at nice 19 in the gaps. A step that fails does not
## stop the others; the steps that need what failed to build do not run. Each step's output
## goes to its own log in $(TESTRUN) (the console gets a line as each starts and ends); at
## the end every log is printed, then the failing tests, each with the last lines its test
## code printed (deploy/test-failures.sh), then the table of where the time went
## (integration/suitetimes: each step's build, stack up, tests and take-down). The kernel's
## autogroup scheduling is off for the run: with it, every session (each service in the
## harness's nspawn machines is one) gets as much CPU as the vm's, whatever its nice.
TESTRUN := $(CACHE)/test-run
TIMED := deploy/timed.sh $(TESTRUN)/times.tsv
NICE_HARNESS := nice -n 10 ionice -c2 -n4
NICE_CHECKS := nice -n 19 ionice -c2 -n7
test: prereqs
	@rm -rf $(TESTRUN); mkdir -p $(TESTRUN)
	@ag=/proc/sys/kernel/sched_autogroup_enabled; \
	if [ "$$(cat $$ag 2>/dev/null)" = 1 ]; then \
		echo 0 >$$ag || { echo "make test: cannot turn the kernel's autogroup scheduling off ($$ag): run as root"; exit 1; }; \
		trap 'echo 1 >'$$ag EXIT; \
		echo "make test: the kernel's autogroup scheduling is off until the run ends (else each session the lane starts, every service in its nspawn machines among them, gets a CPU share equal to the vm's whatever its nice)"; \
	fi; \
	echo "make test: the steps' logs are in $(TESTRUN)"; \
	$(MAKE) --no-print-directory -k -j 16 $(RUN_STEPS) || true; \
	deploy/test-report.sh $(TESTRUN) $(RUN_ALL)

# The steps of make test. Set-up steps fail as their command does, and the steps that need
# them do not run; a test step always ends well for make (its exit status is in the times
# file), so that the steps ordered after it still run.
RUN_STEPS := run-download run-vm run-unit run-faults run-kubeadm run-containerd2 run-deb-check
RUN_ALL := download build control-plane trees deb prev-release vm proto-check lint unit faults harness-binaries integration containerd2 deb-check kubeadm
RUN_SETUP = $(TIMED) $(1) $(TESTRUN)/$(1).log --
RUN_TEST = $(TIMED) $(1) $(TESTRUN)/$(1).log -- $(2) || true
.PHONY: $(RUN_STEPS) run-build run-control-plane run-trees run-deb run-prev-release run-proto-check run-lint run-harness-binaries run-integration

# What the vm suite needs, at full priority. Beside the first build, every module the run
# compiles is downloaded (a new machine's module cache is empty): the builds after it then
# find their modules there.
run-download:
	@$(call RUN_SETUP,download) sh -c '$(GO) mod download && for m in integration/tools/*/; do (cd $$m && GOWORK=off $(GO) mod download) || exit 1; done'
run-build:
	@$(call RUN_SETUP,build) $(MAKE) --no-print-directory build
run-control-plane: run-build
	@$(call RUN_SETUP,control-plane) $(BIN)/unitlet-harness build control-plane
# At full priority: on a new machine debootstrap's dependency resolution (CPU-bound shell)
# is on the vm suite's path, and at nice 10 beside the builds it took 11 minutes.
run-trees: run-build
	@$(call RUN_SETUP,trees) $(BIN)/unitlet-harness build vm-tree nspawn-tree
run-deb: run-build
	@$(call RUN_SETUP,deb) $(MAKE) --no-print-directory deb-built
run-prev-release:
	@$(call RUN_SETUP,prev-release) $(MAKE) --no-print-directory prev-release
run-vm: run-build run-control-plane run-trees run-deb run-prev-release
	@$(call RUN_TEST,vm,$(TEST_VM))
# The host's suites, one after another on the core the vm leaves, each alone there: their
# targets and timings are the node's, not the machine's. Two side by side on that core
# missed them: a service restart of 30 s in the fault suite beside the harness suites, a
# 6 s grace period ending after 22 s with test-integration's stack coming up beside
# test-containerd2's, its API server not answering a GET in 15 s. The checks go first,
# while the vm's stack comes up, then the fault suite, test-containerd2, test-integration
# and test-kubeadm (which takes the kubelet's ports). The harness's own binaries build
# meanwhile at nice 19, in the suites' idle time.
run-faults: run-build run-control-plane run-trees run-deb-check
	@$(call RUN_TEST,faults,$(NICE_HARNESS) $(TEST_FAULTS))
run-harness-binaries: run-control-plane
	@$(call RUN_SETUP,harness-binaries) $(NICE_CHECKS) $(BIN)/unitlet-harness build registry metrics-server containerd kubeadm local-path-provisioner
run-containerd2: run-build run-harness-binaries run-faults
	@$(call RUN_TEST,containerd2,$(NICE_HARNESS) $(TEST_CONTAINERD2))
run-integration: run-build run-harness-binaries run-trees run-prev-release run-containerd2
	@$(call RUN_TEST,integration,$(NICE_HARNESS) $(TEST_INTEGRATION))
run-kubeadm: run-deb run-harness-binaries run-trees run-integration
	@$(call RUN_TEST,kubeadm,$(NICE_HARNESS) $(MAKE) --no-print-directory test-kubeadm-built)
# The CPU-bound checks.
run-proto-check:
	@$(call RUN_TEST,proto-check,$(NICE_CHECKS) $(MAKE) --no-print-directory proto-check)
run-lint: run-proto-check
	@$(call RUN_TEST,lint,$(NICE_CHECKS) $(MAKE) --no-print-directory lint)
run-unit: run-lint
	@$(call RUN_TEST,unit,$(NICE_CHECKS) $(MAKE) --no-print-directory test-unit)
run-deb-check: run-deb run-unit
	@$(call RUN_TEST,deb-check,$(NICE_CHECKS) $(MAKE) --no-print-directory deb-check-built)

## deb: the Debian packages, into dist/: unitlet-<svc> for each service, unitletctl and the
## unitlet meta-package (deploy/deb/build.sh, with nfpm; README.md, "Debian packages")
deb: build
	$(MAKE) --no-print-directory deb-built

# deb-built: the packages of bin/ as it is, building no binary
.PHONY: deb-built
deb-built: $(NFPM)
	deploy/deb/build.sh $(NFPM) $(BIN) $(DIST)

## deb-check: the packages built, lintian over each (an error or a warning fails; the
## overrides, each with its reason, are deploy/deb/lintian-overrides), then
## integration/debtest's checks of what each package holds
deb-check: prereqs deb
	$(MAKE) --no-print-directory deb-check-built

# deb-check-built: deb-check's checks of dist/ as it is, building nothing (make test runs
# them while test-vm installs those packages)
.PHONY: deb-check-built
deb-check-built:
	lintian --fail-on error,warning $(DIST)/*.deb
	UNITLET_DIST_DIR=$(DIST) $(GO) test -trimpath -count=1 ./integration/debtest/

## test-unit: the fast tests of every module, with the race detector. Some (tmpfs mounts,
## file owners in services/volumes) need root and fail, saying so, when not run as root.
## No unit test depends on the machine's speed: they wait for events, or poll with a
## generous deadline; speed figures are benchmarks (make bench).
test-unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

## test-integration: real processes under systemd-socket-activate, unit files under
## systemd-analyze, the harness's real control plane (built once into the cache: ~12 min);
## the vm node's tests are test-vm's
TEST_INTEGRATION = env UNITLET_BIN_DIR=$(BIN) UNITLET_PREV_BIN_DIR=$(PREV_DIR)/bin $(GO) test -trimpath -count=1 -timeout=60m -v -parallel 8 $$($(GO) list ./integration/... | grep -v '/integration/vmtest$$\|/integration/debtest$$\|/integration/kubeadmtest$$\|/integration/faultstest$$') ./systemd/...
test-integration: build harness-binaries prev-release
	$(TEST_INTEGRATION)

## test-faults: the fault suite (integration/faultstest, integration/stacks/faults.yaml):
## 100 pods churned (about 5 creates and 5 deletes a second, with probes, an init
## container, configMap, secret, projected and emptyDir volumes, graceful and forced
## deletions) on an nspawn node while every unitlet service is SIGKILLed every 3 s in turn
## (at least 20 kills each), containerd is restarted twice and SIGKILLed twice, the API
## server is stopped 5 minutes and etcd 1, and the node's root dir (a loop-mounted ext4)
## is filled to 100 % for a minute; then the invariants table, each with its target
## (~15 min). UNITLET_FAULTS_REPORT=DIR keeps the table in DIR. make test runs it beside the
## vm suite, before the harness suites, at nice 10 (README.md, "Fault suite").
TEST_FAULTS = env UNITLET_BIN_DIR=$(BIN) $(GO) test -trimpath -count=1 -timeout=45m -v ./integration/faultstest/
test-faults: build harness-binaries
	$(TEST_FAULTS)

## test-containerd2: the harness tests that exercise the runtime (CRI, pod lifecycle,
## probes, hooks, init, sidecar and ephemeral containers, restart policies, termination,
## security context, sysctls, exec, logs, attach, RuntimeClass handlers, volumes, CRI stats)
## again on containerd 2.x: integration/stacks/containerd2.yaml, containerd built from its
## module into the cache by harness-binaries (~5 min)
CONTAINERD2_TESTS := TestCRISandboxAndContainerRun|TestStatusNodeRegistersAndTurnsReady|TestStatusKubectlRunLogsExecDelete|TestStatusLogsPrevious|TestPodsyncRunsAPIPod|TestPodsyncStaticPodAndMirrorPod|TestPodsyncRestartPolicies|TestPodsyncInitContainersRunInOrder|TestPodsyncGracefulDeletion|TestPodsyncKillPod|TestPodsyncBadPodSpec|TestPodsyncSIGKILLDuringABurst|TestPodsyncReadinessProbeFlipsReadiness|TestPodsyncLivenessProbeRestartsContainer|TestPodsyncHooks|TestPodsyncStreamingExec|TestSidecarStartupGatesTheAppAndCompletesStopped|TestSidecarRestartsUnderNeverAndStopsAfterTheApp|TestProbeDetails|TestActiveDeadlineSeconds|TestPodSpecTerminationMessages|TestPodSpecRunAsNonRoot|TestPodSpecSysctls|TestPodSpecRecursiveReadOnly|TestPodSpecFieldTable|TestPodsyncResizeInPlace|TestPodsyncResizeFinishedAfterASIGKILL|TestPodsyncRestartAllContainers|TestPodSpecImageVolume|TestStatusRuntimeFeaturesAndStrictSupplementalGroups|TestPodSpecFSGroup|TestRuntimeClassHandlerAndOverhead|TestRuntimeClassMissingOrUnknownHandler|TestHostUsersFalse|TestPodspecEphemeralContainers|TestPodspecKubectlDebugAttach|TestVolumesEveryPluginFromInsideTheContainer|TestResourceMetricsShowABusyCPU|TestCAdvisorMetricsShowALimitedContainer
.PHONY: test-containerd2
TEST_CONTAINERD2 = env UNITLET_BIN_DIR=$(BIN) UNITLET_STACK=$(CURDIR)/integration/stacks/containerd2.yaml $(GO) test -trimpath -count=1 -timeout=30m -v -parallel 8 -run '^($(CONTAINERD2_TESTS))$$' ./integration/harnesstest/
test-containerd2: build harness-binaries
	$(TEST_CONTAINERD2)

## test-vm: unitlet in a qemu virtual machine (integration/stacks/vm-node.yaml; its tree and
## disk image cached in ~/.cache/unitlet), installed in the guest from the packages of
## `make deb`: the install itself, the units' limits in their cgroups, an OOM kill of one
## service, a pod from the API server, each package upgraded on its own from the previous
## release (make prev-release) under load; prints boot-to-installed, boot-to-Ready,
## boot-to-first-pod and the upgrade's table
TEST_VM = env UNITLET_BIN_DIR=$(BIN) UNITLET_DIST_DIR=$(DIST) UNITLET_PREV_DIST_DIR=$(PREV_DIR)/dist $(GO) test -trimpath -count=1 -timeout=60m -v ./integration/vmtest/
test-vm: build harness-binaries deb prev-release
	$(TEST_VM)

## test-kubeadm: kubeadm on a node with unitlet installed from the packages of `make deb`,
## unitlet-kubeadm among them (integration/stacks/kubeadm.yaml: a control plane that the
## test prepares with kubeadm's upload-config and bootstrap-token phases, one
## systemd-nspawn machine with the packages and kubeadm). `kubeadm join`: unitlet started
## through kubelet.service, the node Ready and running a pod, `systemctl restart kubelet`
## restarting unitlet-config alone, then `kubeadm reset`. `kubeadm init` on the same
## machine: the control plane's static pods (images the harness makes from its own
## binaries) run on unitlet and the cluster comes up. Prints the join's and init's times.
## The node takes the kubelet's 10250 and 10248 and kubeadm init the default 6443 and
## 2379: run it with no other harness stack up but the vm's (make test runs it after the
## harness suites).
.PHONY: test-kubeadm test-kubeadm-built
test-kubeadm: build harness-binaries deb
	$(MAKE) --no-print-directory test-kubeadm-built

# test-kubeadm-built: test-kubeadm on dist/ as it is, building no package. make test runs
# it beside test-vm, which installs those packages: `make deb` empties dist/ first, and a
# rebuild there once took unitlet-eviction's package from under the upgrade test.
test-kubeadm-built:
	UNITLET_DIST_DIR=$(DIST) UNITLET_BIN_DIR=$(BIN) $(GO) test -trimpath -count=1 -timeout=30m -v ./integration/kubeadmtest/

## harness-binaries: etcd, the Kubernetes control plane, the registry, metrics-server,
## local-path-provisioner and containerd 2.x, built from the pinned modules in integration/tools into the cache
## (~/.cache/unitlet) unless already there. The harness is the one `make build` made:
## unitlet is compiled once, with one set of flags.
harness-binaries: build
	$(BIN)/unitlet-harness build

## gates: services/config/kubeletconfig/gates_kubelet.go, the kubelet v1.36 feature gates
## (default, locked, stage), generated from the kubelet the harness pins (a few minutes: it
## compiles the kubelet's command)
gates:
	cd integration/tools/kubelet && GOWORK=off $(GO) run ./featuregates > $(CURDIR)/services/config/kubeletconfig/gates_kubelet.go.tmp
	gofmt $(CURDIR)/services/config/kubeletconfig/gates_kubelet.go.tmp > $(CURDIR)/services/config/kubeletconfig/gates_kubelet.go
	rm $(CURDIR)/services/config/kubeletconfig/gates_kubelet.go.tmp

## cluster: the default stack (control plane + a unitlet node) up, and how to use it
cluster: prereqs build
	UNITLET_BIN_DIR=$(BIN) $(BIN)/unitlet-harness up
	@echo; echo "== unitletctl status on node-1"; \
	$(BIN)/unitlet-harness exec node-1 -- unitletctl status config || true
	@echo; echo "Point kubectl at it:"; \
	echo "  export KUBECONFIG=$$($(BIN)/unitlet-harness kubeconfig)"; \
	echo "  $(CACHE)/kube-v1.36.3-r2/kubectl get namespaces"; \
	echo "More: bin/unitlet-harness status | logs [COMPONENT] | exec NODE -- CMD"; \
	echo "Take it down with: make down"

## down: the default stack down; removes its processes and files
down: build
	$(BIN)/unitlet-harness down

## bench: the bus round trip over a Unix socket (unary call and watch event, p50/p99 in µs),
## then pod start on the harness (bench-podsync), then unitlet against the kubelet (bench-pods)
bench: bench-bus bench-podsync bench-pods bench-memory bench-volumes bench-eviction bench-metrics

bench-bus:
	@mkdir -p $(CACHE)
	$(GO) test -run='^$$' -bench=. -benchtime=20000x -count=1 ./shared/bus/ | tee $(CACHE)/bench.log
	@echo; echo "bus round trip (target: p50 < 100 µs, p99 < 1000 µs):"; \
	awk '/^Benchmark/ { name=$$1; for (i=2; i<=NF; i++) { if ($$i=="p50-µs") p50=$$(i-1); if ($$i=="p99-µs") p99=$$(i-1) } printf "  %-40s p50 %8s µs   p99 %8s µs\n", name, p50, p99 }' $(CACHE)/bench.log

## bench-podsync: 1, 30 and 100 pods created at once through the API server on the harness:
## time until CRI reports all running, per-pod p50/p99, time until all are gone after the
## delete, podsync's RSS and CPU at 100 pods
bench-podsync: build harness-binaries
	@mkdir -p $(CACHE)
	UNITLET_BIN_DIR=$(BIN) $(GO) test -run='^$$' -bench=BenchmarkPodStart -benchtime=1x -count=1 -timeout=30m ./integration/harnesstest/ | tee $(CACHE)/bench-podsync.log
	@echo; echo "pod start on unitlet-podsync (compare: ../shared/ENVIRONMENT.md, kubelet figures):"; \
	awk '/^BenchmarkPodStart/ { line=$$1; for (i=3; i<NF; i+=2) line=line "  " $$(i+1) "=" $$i; print "  " line }' $(CACHE)/bench-podsync.log

## bench-memory: the resident memory of every unitlet service (and its Go heap in use) and of
## the real kubelet on the bench-pods stack at 0, 30, 100 and 250 running pods; the table,
## then the ratios of unitlet's summed RSS to the kubelet's
bench-memory: build harness-binaries
	@mkdir -p $(CACHE)
	UNITLET_BIN_DIR=$(BIN) UNITLET_STACK=$(CURDIR)/integration/stacks/bench-pods.yaml $(GO) test -run='^$$' -bench=BenchmarkMemory -benchtime=1x -count=1 -timeout=60m ./integration/harnesstest/ | tee $(CACHE)/bench-memory.log
	@echo; sed -n '/^== memory/,/^rss ratio unitlet\/kubelet:/p' $(CACHE)/bench-memory.log

## bench-pods: unitlet, the real kubelet (built once into the cache) and the runtime alone
## (the floor: sandbox + container straight through CRI) side by side on one harness stack
## (integration/stacks/bench-pods.yaml on Debian's containerd 1.6, then
## bench-pods-containerd2.yaml on containerd 2.x), their rounds interleaved (BENCH_ROUNDS of
## each, 3 by default): 1, 30 and 100 pods created at once, create → running p50/p99/max, delete →
## gone, RSS (per unitlet service and summed) and CPU at 100 pods; the table of medians,
## then the unitlet/kubelet and unitlet/floor ratios
BENCH_ROUNDS ?= 3
bench-pods: build harness-binaries
	@mkdir -p $(CACHE)
	for stack in bench-pods bench-pods-containerd2; do \
	  UNITLET_BIN_DIR=$(BIN) UNITLET_BENCH_ROUNDS=$(BENCH_ROUNDS) UNITLET_STACK=$(CURDIR)/integration/stacks/$$stack.yaml $(GO) test -run='^$$' -bench=BenchmarkPodsVsKubelet -benchtime=1x -count=1 -timeout=120m ./integration/harnesstest/ | tee $(CACHE)/$$stack.log || exit 1; \
	done
	@for stack in bench-pods bench-pods-containerd2; do echo; sed -n '/^== pods vs kubelet/,/^unitlet\/floor p99 ratio:/p' $(CACHE)/$$stack.log; done

## bench-metrics: the node API's /metrics, /metrics/resource, /metrics/cadvisor,
## /metrics/probes and /stats/summary of unitlet and of the real kubelet, each at 100 pods
## with a readiness probe, on the bench-pods stack: scrape latency p50/p99 through the API
## server's node proxy, page sizes, and the metric names one serves and the other does not
bench-metrics: build harness-binaries
	@mkdir -p $(CACHE)
	UNITLET_BIN_DIR=$(BIN) UNITLET_STACK=$(CURDIR)/integration/stacks/bench-pods.yaml $(GO) test -run='^$$' -bench=BenchmarkMetricsScrapeVsKubelet -benchtime=1x -count=1 -timeout=60m ./integration/harnesstest/ | tee $(CACHE)/bench-metrics.log
	@echo; sed -n '/^== metrics endpoints/,$$p' $(CACHE)/bench-metrics.log | grep -v '^PASS\|^ok\|^Benchmark'

## bench-eviction: on the vm node, a memory crossing (a pod writing 300 MiB to a memory
## emptyDir past a hard threshold) to the eviction, to the pod's Failed status and to
## MemoryPressure on the Node: p50 of 5 runs; then unitlet-eviction's RSS and CPU at 100
## pods (static pods on the standalone stack)
bench-eviction: build harness-binaries deb
	@mkdir -p $(CACHE)
	UNITLET_BIN_DIR=$(BIN) UNITLET_DIST_DIR=$(DIST) $(GO) test -run='^$$' -bench=BenchmarkEvictionMemoryCrossing -benchtime=1x -count=1 -timeout=30m ./integration/vmtest/ | tee $(CACHE)/bench-eviction.log
	UNITLET_BIN_DIR=$(BIN) UNITLET_STACK=$(CURDIR)/integration/stacks/standalone.yaml $(GO) test -run='^$$' -bench=BenchmarkEvictionAt100Pods -benchtime=1x -count=1 -timeout=30m ./integration/harnesstest/ | tee -a $(CACHE)/bench-eviction.log
	@echo; sed -n '/^== eviction on a memory crossing/,/^unitlet-eviction:/p' $(CACHE)/bench-eviction.log; sed -n '/^== unitlet-eviction at 100 pods/,+1p' $(CACHE)/bench-eviction.log

## bench-volumes: PrepareVolumes over the bus on the harness's node for a pod with 5
## configMap/secret/projected volumes, one pod alone and 30 at once: p50 and p99 in ms; then
## 30 PVC pods created at once (local-path claims, then claims on CSI PVs of the harness's
## test driver) on unitlet and on the real kubelet of the bench-pods stack, in turns
## (BENCH_ROUNDS): create → running p50/p99 and the unitlet/kubelet ratios (target ≤ 0.8)
bench-volumes: build harness-binaries
	@mkdir -p $(CACHE)
	UNITLET_BIN_DIR=$(BIN) $(GO) test -run='^$$' -bench=BenchmarkVolumesPrepare -benchtime=5x -count=1 -timeout=30m ./integration/harnesstest/ | tee $(CACHE)/bench-volumes.log
	UNITLET_BIN_DIR=$(BIN) UNITLET_BENCH_ROUNDS=$(BENCH_ROUNDS) UNITLET_STACK=$(CURDIR)/integration/stacks/bench-pods.yaml $(GO) test -run='^$$' -bench=BenchmarkPVCPodsVsKubelet -benchtime=1x -count=1 -timeout=90m ./integration/harnesstest/ | tee $(CACHE)/bench-pvc.log
	@echo; echo "PrepareVolumes, 5 volumes per pod:"; \
	awk '/^BenchmarkVolumesPrepare/ { line=$$1; for (i=3; i<NF; i+=2) line=line "  " $$(i+1) "=" $$i; print "  " line }' $(CACHE)/bench-volumes.log
	@echo; sed -n '/^== PVC pods vs kubelet/,/^unitlet\/kubelet PVC pod start ratio/p' $(CACHE)/bench-pvc.log

## prev-release: the previous release's binaries and packages (PREV_RELEASE, built by its own
## Makefile from a checkout of it) into ~/.cache/unitlet/prev-release/<commit>, once
.PHONY: prev-release
prev-release:
	deploy/prev-release.sh $(PREV_RELEASE) $(CACHE)

## fuzz: run each fuzz target for FUZZTIME (the seed corpora run in test-unit)
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzLoadFile$$' -fuzztime=$(FUZZTIME) ./services/config/kubeletconfig/
	$(GO) test -run='^$$' -fuzz='^FuzzDropInMerge$$' -fuzztime=$(FUZZTIME) ./services/config/kubeletconfig/
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./services/config/kubeletenv/
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./shared/checkpoint/
	$(GO) test -run='^$$' -fuzz='^FuzzStaticPod$$' -fuzztime=$(FUZZTIME) ./services/podsync/podsource/
	$(GO) test -run='^$$' -fuzz='^FuzzOpen$$' -fuzztime=$(FUZZTIME) ./services/volumes/subpath/
	$(GO) test -run='^$$' -fuzz='^FuzzMetadataValue$$' -fuzztime=$(FUZZTIME) ./shared/downwardapi/
	$(GO) test -run='^$$' -fuzz='^FuzzQuery$$' -fuzztime=$(FUZZTIME) ./services/status/nodeapi/
	$(GO) test -run='^$$' -fuzz='^FuzzPrepareVolumesPod$$' -fuzztime=$(FUZZTIME) ./services/volumes/
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./services/eviction/policy/
	$(GO) test -run='^$$' -fuzz='^FuzzSetNodeID$$' -fuzztime=$(FUZZTIME) ./services/volumes/csi/
	$(GO) test -run='^$$' -fuzz='^FuzzParseEnvFile$$' -fuzztime=$(FUZZTIME) ./services/podsync/criconfig/

# The description of the payloads the bus carries in bytes fields (shared/payload;
# README.md, "Payload versioning"), generated with the code and checked with it.
PAYLOAD_SCHEMAS := proto/payloads/schemas.json

## proto: regenerate the bus API's Go code and the payload schemas' description
proto: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	cd proto && PATH=$(PROTO_PATH) $(BUF) generate
	$(GO) run ./cmd/payload-schemas write $(PAYLOAD_SCHEMAS)

## proto-check: the committed code and payload schemas match the .proto files and the Go
## types, lint passes, and the API and the payload schemas are wire- and JSON-compatible
## with the last commit on main (HEAD~1 on a clean main, as in CI; main otherwise)
proto-check: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	cd proto && $(BUF) lint
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	cd proto && PATH=$(PROTO_PATH) $(BUF) generate --output $$tmp; \
	stale=0; \
	while read -r f; do \
		if ! cmp -s "$$tmp/$$f" "$$f"; then echo "proto-check: $$f is stale; run make proto and commit"; stale=1; fi; \
	done < <(cd $$tmp && find . -name '*.go' | sed 's|^\./||'); \
	[ $$stale -eq 0 ] && echo "proto-check: generated code is current"
	@$(GO) run ./cmd/payload-schemas check $(PAYLOAD_SCHEMAS)
	@against=$$(deploy/proto-baseline.sh); \
	if [ -z "$$against" ]; then echo "proto-check: no earlier API on main to compare with"; exit 0; fi; \
	echo "proto-check: breaking-change check against $$against"; \
	(cd proto && $(BUF) breaking --against "../.git#ref=$$against,subdir=proto"); \
	if ! git cat-file -e "$$against:$(PAYLOAD_SCHEMAS)" 2>/dev/null; then \
	  echo "proto-check: $$against has no $(PAYLOAD_SCHEMAS); no payload schemas to compare with"; exit 0; fi; \
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	git show "$$against:$(PAYLOAD_SCHEMAS)" > $$tmp/schemas.json; \
	BASE_NAME=$$against $(GO) run ./cmd/payload-schemas compare $$tmp/schemas.json $(PAYLOAD_SCHEMAS)

## lint: gofmt, go vet and staticcheck over every module (with -trimpath, as make build and
## the integration suites compile: one set of compiled packages in the build cache)
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt: these files need formatting:"; echo "$$out"; exit 1; fi
	GOFLAGS=-trimpath $(GO) vet $(PKGS)
	GOFLAGS=-trimpath $(STATICCHECK) $(PKGS)

## run: a standalone node (integration/stacks/standalone.yaml: containerd, unitlet-config,
## unitlet-podsync, no API server) running deploy/examples/'s static pods, until Ctrl-C
run: prereqs build
	@bash deploy/run-local.sh $(BIN)

clean:
	rm -rf $(BIN) $(DIST)

tools: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(STATICCHECK) $(NFPM)

# buf's own release build, as the buf project publishes it on the npm registry
# (@bufbuild/buf-linux-x64), checked against the registry's sha512: building it from the
# module proxy took a new machine's check lane 15 minutes (its dependency tree is large).
# Elsewhere than linux/amd64, or when the download fails, it is built from source.
BUF_NPM_TARBALL := https://registry.npmjs.org/@bufbuild/buf-linux-x64/-/buf-linux-x64-$(BUF_VERSION:v%=%).tgz
BUF_NPM_SHA512 := 606189031d25a4c084eda3168cd38971fa04686fdefa26079d30b8499d0fe5e4b821f7ccaf203d678fdb6f59b5c0d5c0109f004c530464e024ff9c7d544e3b8a
$(BUF):
	@mkdir -p $(dir $@); tmp=$$(mktemp -d); trap 'rm -rf '$$tmp EXIT; \
	if [ "$$($(GO) env GOOS)/$$($(GO) env GOARCH)" = linux/amd64 ] && \
		curl -fsSL --retry 3 -o $$tmp/buf.tgz $(BUF_NPM_TARBALL) && \
		echo "$(BUF_NPM_SHA512)  $$tmp/buf.tgz" | sha512sum --check --quiet && \
		tar -xzf $$tmp/buf.tgz -C $$tmp package/bin/buf; then \
		install -m 0755 $$tmp/package/bin/buf $@; \
		echo "buf $(BUF_VERSION): the buf project's release build from the npm registry (sha512 checked; cached in $(TOOLS))"; \
	else \
		echo "building buf $(BUF_VERSION) from source (once; cached in $(TOOLS))"; \
		GOBIN=$(dir $@) GOFLAGS=-mod=mod GOWORK=off $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION); \
	fi
$(PROTOC_GEN_GO):
	GOBIN=$(dir $@) GOWORK=off $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(dir $@) GOWORK=off $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(STATICCHECK):
	GOBIN=$(dir $@) GOWORK=off $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(NFPM):
	GOBIN=$(dir $@) GOWORK=off $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
