#!/usr/bin/env bash
# End-to-end check of MCO on a real Kubernetes cluster, for machines with Docker, and the
# project's GitHub workflow (.github/workflows/kind-e2e.yaml).
#
# It creates a kind cluster and installs kube-prometheus-stack and Volcano from their charts. It
# builds the MCO image from ./Dockerfile (BUILD=0: $IMAGE is already built), loads it into kind
# and installs charts/mco with the full scenario. It checks the whole path: exporter pods on
# every node, series in Prometheus, the rules, the DetectionRuleConfig Accepted, the
# NodeInterferenceReport, the extender's verdicts, a Volcano job scheduled through the
# extender, the dashboards loaded in Grafana. Then it puts one worker under stress-ng I/O load
# and checks that the reporter taints it (and only it), that Volcano steers a job's pods to
# the other worker, that the taint goes once the load does, and that a kata-qemu pod
# stays Pending on a cluster without Kata.
#
# kind nodes are containers sharing one kernel: /proc/pressure is the same on every node. A
# node's own PSI is its container's cgroup PSI (/sys/fs/cgroup/*.pressure, cgroup v2), so the
# script gives each node's exporter a procfs view (--path.procfs) whose pressure/ files are
# those and whose other entries are the node's /proc: load on one node shows on that node only.
#
#   scripts/kind-e2e.sh            # create, install, check, delete the cluster
#   KEEP=1 scripts/kind-e2e.sh     # leave the cluster running afterwards
#
# Needs: docker, kind (>= 0.20), kubectl, helm (>= 3.12), curl, python3 (to read JSON), a
# cgroup v2 host (GitHub's ubuntu runners are) and network access to the chart repositories.
set -euo pipefail

CLUSTER=${CLUSTER:-mco-e2e}
KEEP=${KEEP:-0}
IMAGE=${IMAGE:-ghcr.io/mco-io/mco:e2e}
BUILD=${BUILD:-1}                   # 0: $IMAGE is already built (the workflow builds it)
STRESS_IMAGE=${STRESS_IMAGE:-docker.io/alexeiled/stress-ng:latest}
KPS_RELEASE=${KPS_RELEASE:-kps}
KPS_VERSION=${KPS_VERSION:-}        # empty: the chart repository's latest
VOLCANO_VERSION=${VOLCANO_VERSION:-}
TIMEOUT=${TIMEOUT:-300s}
# The exporter's --path.procfs: the chart mounts each node's /opt at /host/root/opt.
KIND_PROCFS=/host/root/opt/mco-kind/proc

here=$(cd "$(dirname "$0")/.." && pwd)
image_ref=${IMAGE%:*}
image_tag=${IMAGE##*:}
image_registry=${image_ref%%/*}
image_repository=${image_ref#*/}
work=$(mktemp -d)
pids=()

log() { printf '\n==> %s\n' "$*"; }
fail() { printf '\nFAIL: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
  if [ "$status" -ne 0 ]; then
    echo "--- state at failure" >&2
    kubectl get pods -A -o wide >&2 || true
    kubectl -n mco logs -l app.kubernetes.io/part-of=mco --all-containers --tail=40 >&2 || true
  fi
  if [ "$KEEP" = 1 ]; then
    echo "cluster kept: kind delete cluster --name $CLUSTER"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap cleanup EXIT

# Retry a command until it succeeds or the timeout (seconds) passes.
eventually() {
  local timeout=$1; shift
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 3
  done
}

version_flag() { if [ -n "$1" ]; then printf -- '--version=%s' "$1"; fi; }

for tool in docker kind kubectl helm curl python3; do
  command -v "$tool" >/dev/null || fail "$tool is not installed"
done
docker info >/dev/null 2>&1 || fail "docker is not running"

log "kind cluster $CLUSTER (one control plane, two workers)"
cat >"$work/kind.yaml" <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
kind create cluster --name "$CLUSTER" --config "$work/kind.yaml" --wait 120s
kubectl config use-context "kind-$CLUSTER"

log "MCO image $IMAGE"
if [ "$BUILD" = 1 ]; then docker build -t "$IMAGE" "$here"; fi
kind load docker-image "$IMAGE" --name "$CLUSTER"

log "per-node PSI: each node's cgroup pressure files under $KIND_PROCFS"
# In the exporter the node's /proc is /host/proc and its /sys is /host/sys: absolute links
# resolve there. Only the pressure/ entries differ from the node's /proc.
for node in $(kind get nodes --name "$CLUSTER"); do
  # shellcheck disable=SC2016  # expanded by the node's shell
  docker exec "$node" sh -euc '
    dir=/opt/mco-kind/proc
    rm -rf "$dir"
    mkdir -p "$dir/pressure"
    for entry in /proc/*; do
      name=${entry#/proc/}
      case $name in [0-9]*|self|thread-self|pressure) continue ;; esac
      ln -s "/host/proc/$name" "$dir/$name"
    done
    for resource in cpu io memory irq; do
      if [ -e "/sys/fs/cgroup/$resource.pressure" ]; then
        ln -s "/host/sys/fs/cgroup/$resource.pressure" "$dir/pressure/$resource"
      fi
    done
    [ -e "$dir/pressure/io" ] || { echo "no cgroup v2 io.pressure on $(hostname)" >&2; exit 1; }
  '
done

log "kube-prometheus-stack ($KPS_RELEASE, namespace monitoring)"
helm repo add prometheus-community https://prometheus-community.github.io/helm-charts >/dev/null
helm repo add volcano-sh https://volcano-sh.github.io/helm-charts >/dev/null
helm repo update >/dev/null
# shellcheck disable=SC2046  # version_flag prints zero or one word
helm upgrade --install "$KPS_RELEASE" prometheus-community/kube-prometheus-stack \
  --namespace monitoring --create-namespace $(version_flag "$KPS_VERSION") \
  --set grafana.sidecar.dashboards.enabled=true \
  --set grafana.sidecar.dashboards.searchNamespace=ALL \
  --set grafana.sidecar.dashboards.folderAnnotation=grafana_folder \
  --set grafana.sidecar.dashboards.provider.foldersFromFilesStructure=true \
  --set alertmanager.enabled=false \
  --wait --timeout "$TIMEOUT"

log "Volcano (namespace volcano-system)"
# shellcheck disable=SC2046
helm upgrade --install volcano volcano-sh/volcano \
  --namespace volcano-system --create-namespace $(version_flag "$VOLCANO_VERSION") \
  --wait --timeout "$TIMEOUT"

log "MCO: charts/mco with scenarios/full.yaml"
# Exactly what is installed: tests/chart/test_kind_e2e.py renders these values with the chart.
mco_values=(
  -f "$here/charts/mco/scenarios/full.yaml"
  --set "monitoring.prometheusRelease=$KPS_RELEASE"
  --set "image.registry=$image_registry"
  --set "image.repository=$image_repository"
  --set "image.tag=$image_tag"
  --set "image.pullPolicy=Never"
  --set "exporter.extraArgs[0]=--path.procfs=$KIND_PROCFS"
  # The zero-call path: a violated node carries mco.io/interference (checked under stress).
  --set "reporter.taintNodes.enabled=true"
)
helm lint --strict "$here/charts/mco" "${mco_values[@]}"
helm upgrade --install mco "$here/charts/mco" \
  --namespace mco --create-namespace "${mco_values[@]}" \
  --wait --timeout "$TIMEOUT"
helm status mco -n mco

log "exporter on every node"
kubectl -n mco rollout status daemonset/mco-exporter --timeout "$TIMEOUT"
nodes=$(kubectl get nodes --no-headers | wc -l)
ready=$(kubectl -n mco get daemonset mco-exporter -o jsonpath='{.status.numberReady}')
[ "$ready" = "$nodes" ] || fail "exporter ready on $ready of $nodes nodes"
kubectl -n mco rollout status deployment/mco-reporter --timeout "$TIMEOUT"
kubectl -n mco rollout status deployment/mco-rulegen --timeout "$TIMEOUT"
kubectl -n mco rollout status deployment/mco-extender --timeout "$TIMEOUT"

log "DetectionRuleConfig accepted by the rulegen controller"
accepted() {
  [ "$(kubectl get detectionruleconfig default \
    -o jsonpath='{.status.conditions[?(@.type=="Accepted")].status}')" = True ]
}
eventually 120 accepted || fail "DetectionRuleConfig default is not Accepted"
kubectl -n mco get prometheusrule mco-rules >/dev/null

log "Prometheus scrapes the exporters and evaluates the rules"
kubectl -n monitoring port-forward svc/prometheus-operated 19090:9090 >/dev/null 2>&1 &
pids+=("$!")
promql() {
  curl -sf --get http://127.0.0.1:19090/api/v1/query --data-urlencode "query=$1" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))'
}
has_every_node() { [ "$(promql "$1")" = "$nodes" ]; }
eventually 180 has_every_node 'mco_node_info' || fail "mco_node_info is not on every node"
eventually 60 has_every_node 'mco_pressure_available == 1' ||
  fail "PSI is not readable on every node (the per-node pressure links)"
eventually 120 has_every_node 'node:mco_interference_level:ratio' ||
  fail "node:mco_interference_level:ratio is not recorded for every node"
eventually 60 has_every_node 'node:mco_schedule_score' || fail "no schedule score"

log "NodeInterferenceReport holds every node"
report_nodes() {
  kubectl get nodeinterferencereports -o json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(len({n for i in d["items"] for n in i.get("status",{}).get("nodes",{})}))'
}
has_report() { [ "$(report_nodes)" = "$nodes" ]; }
eventually 120 has_report || fail "the report does not hold every node"
kubectl get nodeinterferencereports

log "extender: verdicts for every node"
kubectl -n mco port-forward svc/mco-extender 19848:9848 >/dev/null 2>&1 &
pids+=("$!")
eventually 30 curl -sf http://127.0.0.1:19848/readyz >/dev/null || fail "extender not ready"
curl -sf http://127.0.0.1:19848/v1/nodes | python3 -m json.tool | head -40

log "Volcano calls the extender: append MCO's tier and schedule a job"
tier=$(kubectl -n mco get configmap mco-volcano-scheduler -o jsonpath='{.data.extender-tier\.yaml}')
conf=$(kubectl -n volcano-system get configmap volcano-scheduler-configmap \
  -o jsonpath='{.data.volcano-scheduler\.conf}')
printf '%s\n%s\n' "$conf" "$tier" >"$work/volcano-scheduler.conf"
kubectl -n volcano-system create configmap volcano-scheduler-configmap \
  --from-file=volcano-scheduler.conf="$work/volcano-scheduler.conf" \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl -n volcano-system rollout restart deployment/volcano-scheduler
kubectl -n volcano-system rollout status deployment/volcano-scheduler --timeout "$TIMEOUT"
kubectl apply -f - <<'EOF'
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: mco-e2e
  namespace: default
spec:
  schedulerName: volcano
  minAvailable: 2
  tasks:
    - name: worker
      replicas: 2
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: sleep
              image: registry.k8s.io/pause:3.9
              resources:
                requests: {cpu: 10m, memory: 16Mi}
EOF
running_pods() {
  [ "$(kubectl get pods -l volcano.sh/job-name=mco-e2e \
    -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c Running)" = 2 ]
}
eventually 180 running_pods || fail "the Volcano job did not start"
volcano_calls() {
  curl -sf http://127.0.0.1:19848/metrics |
    grep -E '^mco_extender_requests_total\{.*route="/volcano/predicate".*code="200"' >/dev/null
}
eventually 60 volcano_calls || fail "Volcano never called the extender's predicate"

log "Grafana loaded MCO's dashboards"
password=$(kubectl -n monitoring get secret "$KPS_RELEASE-grafana" \
  -o jsonpath='{.data.admin-password}' | base64 -d)
kubectl -n monitoring port-forward "svc/$KPS_RELEASE-grafana" 19300:80 >/dev/null 2>&1 &
pids+=("$!")
dashboard() {
  curl -sf -u "admin:$password" "http://127.0.0.1:19300/api/dashboards/uid/$1" >/dev/null
}
for uid in mco-cluster-overview mco-node-detail mco-pipeline-health; do
  eventually 120 dashboard "$uid" || fail "Grafana has no dashboard $uid"
done

log "steering: stress-ng I/O load on one worker, a Volcano job lands on the other"
workers=$(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' \
  -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
busy=$(sed -n 1p <<<"$workers")
calm=$(sed -n 2p <<<"$workers")
if [ -z "$busy" ] || [ -z "$calm" ]; then fail "two worker nodes expected, got: $workers"; fi
# A node stalled on I/O over 10 % of the window takes no new pods. The default (60 %) is for
# real disks; a CI runner's load is not sure to reach it.
kubectl patch detectionruleconfig default --type merge \
  -p '{"spec":{"hardConstraints":{"psiIOSomeMax":0.1}}}'
kubectl apply -f - <<MANIFEST
apiVersion: v1
kind: Pod
metadata:
  name: mco-e2e-stress
  namespace: default
spec:
  nodeName: $busy
  restartPolicy: Never
  containers:
    - name: stress-ng
      image: $STRESS_IMAGE
      args: [--hdd, "4", --hdd-bytes, 256M, --temp-path, /scratch, --timeout, 900s, --quiet]
      volumeMounts: [{name: scratch, mountPath: /scratch}]
  volumes: [{name: scratch, emptyDir: {}}]
MANIFEST
kubectl wait --for=condition=Ready pod/mco-e2e-stress --timeout "$TIMEOUT"
nodes_json() { curl -sf http://127.0.0.1:19848/v1/nodes; }
verdict() {  # NODE -> "<verdict passed>/<schedulable>" from the extender's /v1/nodes
  nodes_json | python3 -c '
import json, sys
node = {n["name"]: n for n in json.load(sys.stdin)["nodes"]}[sys.argv[1]]
print(str(node["verdict"]["passed"]) + "/" + str(node["schedulable"]))' "$1"
}
busy_rejected() { [ "$(verdict "$busy")" = False/False ]; }
eventually 240 busy_rejected || {
  nodes_json | python3 -m json.tool >&2
  fail "the extender never rejected $busy under stress-ng load"
}
[ "$(verdict "$calm")" = True/True ] || {
  nodes_json | python3 -m json.tool >&2
  fail "$calm is rejected too: the load is not confined to $busy"
}
# The reporter keeps MCO's taint on the violated node (a real API server merging spec.taints),
# and on no other; kind's own taints on the control plane stay as they were.
mco_taint() {  # NODE -> the effect of MCO's taint on it, or nothing
  kubectl get node "$1" \
    -o jsonpath='{range .spec.taints[?(@.key=="mco.io/interference")]}{.effect}{end}'
}
busy_tainted() { [ "$(mco_taint "$busy")" = NoSchedule ]; }
eventually 120 busy_tainted || fail "the reporter never tainted $busy (reporter.taintNodes)"
[ -z "$(mco_taint "$calm")" ] || fail "$calm carries MCO's taint without a violation"
kubectl apply -f - <<'MANIFEST'
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: mco-e2e-steer
  namespace: default
spec:
  schedulerName: volcano
  minAvailable: 1
  tasks:
    - name: worker
      replicas: 4
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: sleep
              image: registry.k8s.io/pause:3.9
              resources:
                requests: {cpu: 10m, memory: 16Mi}
MANIFEST
steer_nodes() {
  kubectl get pods -l volcano.sh/job-name=mco-e2e-steer \
    -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}'
}
all_placed() { [ "$(steer_nodes | grep -c .)" = 4 ]; }
eventually 180 all_placed || fail "the steering job's pods were not all placed"
placed=$(steer_nodes)
sort <<<"$placed" | uniq -c
if grep -qx "$busy" <<<"$placed"; then fail "a pod landed on $busy, the node under load"; fi
kubectl delete pod mco-e2e-stress --wait=false
# Without the load the constraint clears (clearAfter) and the taint goes with it.
busy_untainted() { [ -z "$(mco_taint "$busy")" ]; }
eventually 240 busy_untainted || fail "MCO's taint stayed on $busy after the load ended"

log "Kata: a kata-qemu pod stays Pending where no node runs Kata"
no_kata_node() {
  nodes_json | python3 -c '
import json, sys
nodes = json.load(sys.stdin)["nodes"]
sys.exit(any(n["kataReady"] or n["kataVerdict"]["passed"] for n in nodes))'
}
no_kata_node || fail "the extender reports a Kata-ready node on a cluster without Kata"
kubectl apply -f - <<'MANIFEST'
apiVersion: v1
kind: Pod
metadata:
  name: mco-e2e-kata
  namespace: default
spec:
  schedulerName: volcano
  runtimeClassName: kata-qemu
  restartPolicy: Never
  containers:
    - name: sleep
      image: registry.k8s.io/pause:3.9
MANIFEST
sleep 60
placement=$(kubectl get pod mco-e2e-kata -o jsonpath='{.status.phase}/{.spec.nodeName}')
[ "$placement" = Pending/ ] || fail "the kata-qemu pod is $placement, not Pending and unplaced"
kubectl describe pod mco-e2e-kata | sed -n '/^Events:/,$p'

log "all checks passed"
