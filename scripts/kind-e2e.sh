#!/usr/bin/env bash
# End-to-end check of the Helm chart on a real Kubernetes cluster, for machines with Docker.
#
# It creates a kind cluster and installs kube-prometheus-stack and Volcano from their charts. It
# then builds the MCO image from ./Dockerfile, loads it into kind and installs charts/mco with
# the existing-volcano scenario. It checks the whole path: exporter pods on every node, series
# in Prometheus, the rules, the DetectionRuleConfig Accepted, the NodeInterferenceReport, the
# extender's verdicts, a Volcano job scheduled through the extender, and the dashboards loaded
# in Grafana.
#
# This cannot run on MCO's CI machines: they have no container engine (docs/helm.md).
#
#   scripts/kind-e2e.sh            # create, install, check, delete the cluster
#   KEEP=1 scripts/kind-e2e.sh     # leave the cluster running afterwards
#
# Needs: docker, kind (>= 0.20), kubectl, helm (>= 3.12), curl, python3 (to read JSON).
set -euo pipefail

CLUSTER=${CLUSTER:-mco-e2e}
KEEP=${KEEP:-0}
IMAGE=${IMAGE:-ghcr.io/mco-io/mco:e2e}
KPS_RELEASE=${KPS_RELEASE:-kps}
KPS_VERSION=${KPS_VERSION:-}        # empty: the chart repository's latest
VOLCANO_VERSION=${VOLCANO_VERSION:-}
TIMEOUT=${TIMEOUT:-300s}

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
docker build -t "$IMAGE" "$here"
kind load docker-image "$IMAGE" --name "$CLUSTER"

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

log "MCO: charts/mco with scenarios/existing-volcano.yaml"
helm lint --strict "$here/charts/mco" -f "$here/charts/mco/scenarios/existing-volcano.yaml"
helm upgrade --install mco "$here/charts/mco" \
  --namespace mco --create-namespace \
  -f "$here/charts/mco/scenarios/existing-volcano.yaml" \
  --set image.registry="$image_registry" --set image.repository="$image_repository" \
  --set image.tag="$image_tag" \
  --set monitoring.additionalLabels.release="$KPS_RELEASE" \
  --set image.pullPolicy=Never \
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

log "all checks passed"
