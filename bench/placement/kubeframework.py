"""kube-scheduler's scheduling cycle as the benchmark runs it: which nodes it looks at, how it
scores them, and how it breaks ties (v1.31 and later, default profile).

Each rule is kube-scheduler's own, quoted from kubernetes/kubernetes below; what is left out
gives every node the same score for the trace's pods and cannot change a choice (see
``score``). Volcano's session is not modelled here (``scheduler.VolcanoExtender``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence

from bench.placement.cluster import Cluster, Node
from bench.placement.model import NODE_CPU, NODE_MEMORY
from bench.placement.trace import WORKLOAD_CLASS, PodSpec

# pkg/scheduler/schedule_one.go: "minFeasibleNodesToFind is the minimum number of nodes that
# would be scored in each scheduling cycle" (100) and "minFeasibleNodesPercentageToFind is the
# minimum percentage of nodes that would be scored in each scheduling cycle" (5).
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
# k8s.io/kube-scheduler/framework MaxNodeScore and extender/v1 MaxExtenderPriority.
MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
# pkg/scheduler/apis/config/v1/default_plugins.go, getDefaultPlugins:
# {Name: names.NodeResourcesFit, Weight: ptr.To[int32](1)} (scoring strategy LeastAllocated,
# cpu and memory weight 1 each) and {Name: names.NodeResourcesBalancedAllocation, Weight: 1}.
FIT_WEIGHT = 1
BALANCED_ALLOCATION_WEIGHT = 1
# The node's allocatable as kube-scheduler's NodeInfo holds it: milli-CPU and bytes.
ALLOCATABLE_MILLI_CPU = round(NODE_CPU * 1000)
ALLOCATABLE_MEMORY = round(NODE_MEMORY * 2**30)


def num_feasible_nodes_to_find(num_all_nodes: int, percentage_of_nodes_to_score: int = 0) -> int:
    """How many feasible nodes a cycle looks for before it stops searching.

    pkg/scheduler/schedule_one.go, numFeasibleNodesToFind (percentageOfNodesToScore unset, 0):

        if numAllNodes < minFeasibleNodesToFind { return numAllNodes }
        ...
        if percentage == 0 {
            percentage = int32(50) - numAllNodes/125
            if percentage < minFeasibleNodesPercentageToFind {
                percentage = minFeasibleNodesPercentageToFind
            }
        }
        numNodes = numAllNodes * percentage / 100
        if numNodes < minFeasibleNodesToFind { return minFeasibleNodesToFind }
        return numNodes

    (Go's int32 division truncates toward zero; every operand here is non-negative, so ``//``.)
    """
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = percentage_of_nodes_to_score
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


class NodeSearch:
    """The scheduler's ``nextStartNodeIndex``: where the next cycle starts looking.

    pkg/scheduler/schedule_one.go, findNodesThatPassFilters checks node
    ``nodes[(sched.nextStartNodeIndex+i)%numAllNodes]`` for i = 0, 1, ... and, once a feasible
    node takes the count past numNodesToFind, cancels the search without keeping that node
    (``if length > numNodesToFind { cancel(); atomic.AddInt32(&feasibleNodesLen, -1) }``);
    every node that failed the filters goes into the diagnosis. findNodesThatFitPod then moves
    the index on by the nodes processed:

        processedNodes := len(feasibleNodes) + diagnosis.NodeToStatus.Len()
        sched.nextStartNodeIndex = (sched.nextStartNodeIndex + processedNodes) % len(allNodes)

    The extenders' filter gets only the feasible nodes found. kube-scheduler checks nodes on 16
    goroutines, so a few more may be checked before the cancel lands; this is its one-worker
    order, which makes the search deterministic.
    """

    def __init__(self) -> None:
        self.next_start_node_index = 0

    def feasible(
        self, cluster: Cluster, pod: PodSpec, admits: Callable[[Node], bool] | None = None
    ) -> list[str]:
        """The nodes that pass resource fit (NodeResourcesFit's filter) and ``admits`` (the
        node-pool baseline's NodeAffinity and TaintToleration filters, in the same pass), as
        one cycle finds them; moves the start index on."""
        nodes = list(cluster.nodes.values())
        if not nodes:
            return []
        to_find = num_feasible_nodes_to_find(len(nodes))
        found: list[str] = []
        failed = 0
        for i in range(len(nodes)):
            node = nodes[(self.next_start_node_index + i) % len(nodes)]
            if not node.fits(pod) or (admits is not None and not admits(node)):
                failed += 1
            elif len(found) == to_find:
                break
            else:
                found.append(node.name)
        self.next_start_node_index = (self.next_start_node_index + len(found) + failed) % len(nodes)
        return found


def pod_requests(pod: PodSpec) -> tuple[int, int]:
    """The pod's (milli-CPU, memory bytes) requests as the pod object the extender gets
    states them (``wire.pod_object``: ``{cpu}m`` and ``{memory}Mi``). Every trace pod
    requests both, so kube-scheduler's non-zero defaults for unset requests never apply."""
    return round(pod.demand.cpu * 1000), round(pod.demand.memory * 1024) * 2**20


def node_requested(node: Node) -> tuple[int, int]:
    """What is already requested on the node (every placed pod, started or not: the
    scheduler's cache counts assumed and bound pods alike). The node keeps the sums in cores
    and GiB; the trace's requests are whole milli-CPU and MiB, and exact in binary, so rounding
    the sums gives the sum of the rounded requests without walking the node's pods."""
    return round(node.cpu * 1000), round(node.memory * 1024) * 2**20


def least_requested_score(requested: int, capacity: int) -> int:
    """pkg/scheduler/framework/plugins/noderesources/least_allocated.go, leastRequestedScore:
    ``if requested > capacity { return 0 }; return ((capacity - requested) * MaxNodeScore) /
    capacity``."""
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def least_allocated(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """NodeResourcesFit's LeastAllocated score, 0-100 (least_allocated.go, leastResourceScorer:
    ``nodeScore += resourceScore * weight; weightSum += weight ... return nodeScore /
    weightSum``, cpu and memory weight 1)."""
    score = weights = 0
    for r, a in zip(requested, allocatable, strict=True):
        if a == 0:
            continue
        score += least_requested_score(r, a)
        weights += 1
    return score // weights if weights else 0


def balanced_allocation(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """NodeResourcesBalancedAllocation's score, 0-100, in the standard-deviation form of
    pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go, balancedResourceScorer:

        fraction := float64(requested[i]) / float64(allocable[i])
        if fraction > 1 { fraction = 1 }
        ...
        if len(resourceToFractions) == 2 {
            std = math.Abs((resourceToFractions[0] - resourceToFractions[1]) / 2)
        } else if len(resourceToFractions) > 2 { ... root of the mean squared deviation ... }
        return int64((1 - std) * float64(fwk.MaxNodeScore))

    ``requested`` includes the pod being scheduled (resource_allocation.go: ``requested +
    podRequest``)."""
    fractions = [min(r / a, 1.0) for r, a in zip(requested, allocatable, strict=True) if a != 0]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = (sum((f - mean) ** 2 for f in fractions) / len(fractions)) ** 0.5
    return int((1 - std) * MAX_NODE_SCORE)


def score(node: Node, pod: PodSpec) -> int:
    """The node's total from the default profile's score plugins, each 0-100 times its weight.

    Neither plugin normalises (their ScoreExtensions return nil), so the framework adds
    ``score * weight`` as it is. The other default score plugins (TaintToleration,
    NodeAffinity, PodTopologySpread, InterPodAffinity, ImageLocality) give every node the same
    score here: no taints, no affinities, bare pods with no spread constraints, no images (the
    ``native-affinity`` baseline gives its pods both: ``native_scores``).
    """
    cpu, memory = node_requested(node)
    pod_cpu, pod_memory = pod_requests(pod)
    requested = (cpu + pod_cpu, memory + pod_memory)
    allocatable = (ALLOCATABLE_MILLI_CPU, ALLOCATABLE_MEMORY)
    return (
        least_allocated(requested, allocatable) * FIT_WEIGHT
        + balanced_allocation(requested, allocatable) * BALANCED_ALLOCATION_WEIGHT
    )


def extender_score(priority: int, weight: int) -> int:
    """An extender's 0-10 priority on the node-score scale (schedule_one.go, prioritizeNodes:
    ``finalscore := score * weight * (MaxNodeScore / extenderv1.MaxExtenderPriority)``)."""
    return priority * weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)


def select_host(scores: Sequence[tuple[str, int]], rng: random.Random) -> str:
    """The highest-scored node, ties broken uniformly at random by reservoir sampling.

    schedule_one.go, selectHost (v1.31): "picks one in a reservoir sampling manner from the
    nodes that had the highest score":

        if ns.TotalScore == sortedNodeScoreList[0].TotalScore {
            cntOfMaxScore++
            if rand.Intn(cntOfMaxScore) == 0 {
                // Replace the candidate with probability of 1/cntOfMaxScore
                selectedIndex = cntOfMaxScore - 1
            }
        }

    kube-scheduler visits the tied nodes in its heap's order; here they come in the order the
    cycle found them, which changes which node a given draw picks but not the distribution.
    ``rng`` is the run's seeded generator, so a seed gives the same choices every time.
    """
    if not scores:
        raise ValueError("empty priority list")
    selected, best = scores[0]
    count = 1
    for name, total in scores[1:]:
        if total > best:
            selected, best, count = name, total, 1
        elif total == best:
            count += 1
            if rng.randrange(count) == 0:
                selected = name
    return selected


# The ``native-affinity`` baseline: what kube-scheduler offers without MCO. Default weights of
# the two plugins in the default profile (pkg/scheduler/apis/config/v1/default_plugins.go:
# {Name: names.PodTopologySpread, Weight: ptr.To[int32](2)}, {Name: names.InterPodAffinity,
# Weight: ptr.To[int32](2)}).
INTER_POD_AFFINITY_WEIGHT = 2
POD_TOPOLOGY_SPREAD_WEIGHT = 2
# The anti-affinity each class declares (preferredDuringSchedulingIgnoredDuringExecution,
# topologyKey kubernetes.io/hostname): online pods avoid batch and best-effort pods, those
# avoid online pods. The term weight (1-100) is the pod's own; 100 for every term. With one
# term kind per pair, NormalizeScore's min-max scaling makes its value immaterial.
ONLINE = "latency-sensitive"
AVOIDS = {ONLINE: frozenset({"batch", "best-effort"}), "batch": frozenset({ONLINE}),
          "best-effort": frozenset({ONLINE})}  # fmt: skip
TERM_WEIGHT = 100


def anti_affinity_terms(pod: PodSpec) -> frozenset[str]:
    """The classes the pod's preferred anti-affinity term selects (by the class label): none
    for a pod without the label (it declares nothing)."""
    cls = pod.labels.get(WORKLOAD_CLASS)
    return AVOIDS.get(cls, frozenset()) if cls else frozenset()


def inter_pod_affinity_raw(node: Node, pod: PodSpec) -> int:
    """InterPodAffinity's Score for one node before NormalizeScore (scoring.go, v1.31): for
    every existing pod on the node, ``processTerms(state.antiAffinityTerms, existingPod, ...,
    -1)`` (the incoming pod's terms that the existing pod matches) and, for an existing pod with
    anti-affinity, ``processTerms(existing's preferred terms, incomingPod, ..., -1)``; the
    topology key is the hostname, so a node's score is its own pods' sum. Every pod placed on
    the node counts (the scheduler's snapshot holds assumed and bound pods)."""
    mine = anti_affinity_terms(pod)
    own = pod.labels.get(WORKLOAD_CLASS)
    score = 0
    for other in node.placed.values():
        theirs = other.labels.get(WORKLOAD_CLASS)
        if theirs is not None and theirs in mine:
            score -= TERM_WEIGHT
        if own is not None and own in anti_affinity_terms(other):
            score -= TERM_WEIGHT
    return score


def normalize_inter_pod_affinity(raw: dict[str, int]) -> dict[str, int]:
    """InterPodAffinity's NormalizeScore (scoring.go): nothing to do when no term matched
    anywhere (``len(s.topologyScore) == 0``: every node 0); else

        maxMinDiff := maxCount - minCount
        fScore = float64(framework.MaxNodeScore) * (float64(scores[i].Score-minCount) /
            float64(maxMinDiff))   // 0 when maxMinDiff is 0
        scores[i].Score = int64(fScore)
    """
    if not raw or not any(raw.values()):
        return dict.fromkeys(raw, 0)
    lo, hi = min(raw.values()), max(raw.values())
    if hi == lo:
        return dict.fromkeys(raw, 0)
    return {n: int(MAX_NODE_SCORE * ((s - lo) / (hi - lo))) for n, s in raw.items()}


def spread_raw(node: Node, pod: PodSpec, nodes_scored: int) -> int:
    """PodTopologySpread's Score for a burst pod (constraint ``maxSkew: 1``, topologyKey
    hostname, ``whenUnsatisfiable: ScheduleAnyway``, selecting its own burst's pods), v1.31
    pkg/scheduler/framework/plugins/podtopologyspread/scoring.go:

        cnt = countPodsMatchSelector(nodeInfo.Pods, c.Selector, pod.Namespace)
        score += scoreForCount(cnt, c.MaxSkew, s.TopologyNormalizingWeight[i])
        return int64(math.Round(score))

    with ``scoreForCount = float64(cnt)*tpWeight + float64(maxSkew-1)`` and the hostname
    key's ``topologyNormalizingWeight(size) = math.Log(float64(size + 2))``, size being the
    nodes scored."""
    cnt = sum(p.burst == pod.burst for p in node.placed.values())
    return round(cnt * math.log(nodes_scored + 2) + (1 - 1))


def normalize_spread(raw: dict[str, int]) -> dict[str, int]:
    """PodTopologySpread's NormalizeScore (scoring.go): with maxScore and minScore over the
    nodes, ``if maxScore == 0 { scores[i].Score = framework.MaxNodeScore }`` else
    ``framework.MaxNodeScore * (maxScore + minScore - s) / maxScore`` (integer division)."""
    if not raw:
        return {}
    hi, lo = max(raw.values()), min(raw.values())
    if hi == 0:
        return dict.fromkeys(raw, MAX_NODE_SCORE)
    return {n: MAX_NODE_SCORE * (hi + lo - s) // hi for n, s in raw.items()}


def native_scores(nodes: Iterable[Node], pod: PodSpec) -> dict[str, int]:
    """The default profile's total with the pods' anti-affinity terms and the bursts' spread
    constraint: ``score`` plus each plugin's normalized score times its weight."""
    nodes = list(nodes)
    total = {n.name: score(n, pod) for n in nodes}
    raw = {n.name: inter_pod_affinity_raw(n, pod) for n in nodes}
    for name, s in normalize_inter_pod_affinity(raw).items():
        total[name] += s * INTER_POD_AFFINITY_WEIGHT
    if pod.burst is not None:
        spread = normalize_spread({n.name: spread_raw(n, pod, len(nodes)) for n in nodes})
        for name, s in spread.items():
            total[name] += s * POD_TOPOLOGY_SPREAD_WEIGHT
    return total


# default_plugins.go: {Name: names.NodeAffinity, Weight: ptr.To[int32](2)}.
NODE_AFFINITY_WEIGHT = 2


def normalize_node_affinity(raw: dict[str, int]) -> dict[str, int]:
    """NodeAffinity's NormalizeScore (node_affinity.go: ``helper.DefaultNormalizeScore(
    framework.MaxNodeScore, false, scores)``): ``MaxNodeScore * s / maxCount`` (integer
    division), every score unchanged when the highest is 0."""
    hi = max(raw.values(), default=0)
    if hi == 0:
        return dict(raw)
    return {n: MAX_NODE_SCORE * s // hi for n, s in raw.items()}
