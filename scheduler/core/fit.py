"""Does a request fit on each node, and which unit would it get there? (vectorized)

One rule for every sharing mode: a unit (whole GPU, MIG instance, MPS slot, weighted share,
time-slice replica) fits when it is free, its compute share covers what the request demands of
that kind of unit (``scheduler.core.sizing``: 0 for MIG instances and time-slice replicas sized by
memory) and its memory covers the request's memory. The unit a node would give is its smallest fitting one,
on the GPU that ``scheduler.core.assignment`` would choose (best fit, then lowest index):

| node mode     | unit share        | unit memory            | GPU choice among fitting GPUs     |
|---------------|-------------------|------------------------|-----------------------------------|
| exclusive     | 1000              | the GPU's              | lowest free indexes               |
| mig           | instance's c/7    | instance's             | smallest profile, then lowest GPU |
|               | (or a whole GPU with MIG disabled, as exclusive; the smaller unit wins)    |
| mps           | 1000 // R         | GPU memory // R        | fewest free slots, then lowest    |
| mps-weighted  | the request's     | the request's          | least free share, then lowest     |
| timeslice     | 1000 // R         | the request's (counted)| least free memory, then lowest    |

MIG instances are sized by memory: an 8 GB request takes a free 1g.10gb instance before a 2g or
4g one (its compute follows the profile). Only a stated share (or an exclusive demand) asks a MIG
instance for compute too: a stated 25 % needs at least a 2g instance (285 milli).

``build_need`` turns a request into what one replica needs (``Need``), once per cycle;
``evaluate_fit`` answers for many nodes at once from the snapshot's per-node *offers* (the
distinct units a new placement could get there, kept sorted by the snapshot; see ``NodeRow``),
with no per-GPU reductions; ``chosen_gpus`` adds the GPU each node would use (packing scores
only). The Python assignment gives the same answer for one node from its objects; a property
test checks that they agree.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode
from scheduler.core.classify import DEFAULT_CLASSIFICATION, Classification, ClassificationSettings, classify
from scheduler.core.node_columns import KIND_ID, MODE_ID
from scheduler.core.packed_rows import first_set_byte, pick, row_words
from scheduler.core.sizing import Sizing, size
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import REQUEST_KINDS, PlacementRequest, SharingRequest

# Why a node does not fit (GPUMemoryFit's reason codes).
FITS = 0
NO_MEMORY = 1  # a free unit with enough share exists, none with enough memory
NO_SHARE = 2  # free units exist, none with enough compute share
NO_FREE_UNIT = 3  # nothing free of a kind the request accepts


KIND_EXCLUSIVE = KIND_ID[PartitionKind.EXCLUSIVE]
KIND_MIG = KIND_ID[PartitionKind.MIG]
KIND_MPS = KIND_ID[PartitionKind.MPS]
KIND_WEIGHTED = KIND_ID[PartitionKind.MPS_WEIGHTED]
KIND_TIMESLICE = KIND_ID[PartitionKind.TIMESLICE]

_ALL_KINDS = frozenset(PartitionKind)


@dataclass(frozen=True)
class Need:
    """What one replica needs, computed once per cycle from request + classification.

    ``share_milli`` is per GPU (``sizing``: what an MPS slot must cover, what a weighted share
    is); ``min_share`` is what each kind of unit must cover; ``memory_per_gpu_mib`` is the
    memory spread evenly over ``gpu_count`` GPUs (rounded up). ``kinds`` are the partition kinds
    the request accepts.
    """

    memory_mib: int
    gpu_count: int
    kinds: frozenset[PartitionKind]
    classification: Classification
    sizing: Sizing

    @property
    def share_milli(self) -> int:
        return self.sizing.share_milli

    def min_share(self, kind: PartitionKind) -> int:
        """The least compute share a unit of ``kind`` must have for this request."""
        return self.sizing.min_share(kind)

    @property
    def memory_per_gpu_mib(self) -> int:
        return -(-self.memory_mib // max(self.gpu_count, 1))

    @property
    def multi_gpu(self) -> bool:
        return self.gpu_count > 1

    @property
    def cpu_only(self) -> bool:
        """A pod without GPUs: it fits wherever its CPU and host memory do."""
        return self.gpu_count == 0


def build_need(request: PlacementRequest, settings: ClassificationSettings = DEFAULT_CLASSIFICATION) -> Need:
    """Classify the request and derive what one replica needs (sizing, memory, accepted kinds).

    How each kind of unit is sized is ``scheduler.core.sizing.size``: an explicit ``sharing`` of
    ``exclusive`` or a multi-GPU replica means whole GPUs; an explicit ``share_milli`` overrides
    the class's default share and is demanded of every kind of unit.
    """
    classification = classify(request.memory_mib, request.priority, request.latency_slo_ms, settings)
    sharing = SharingRequest(request.sharing)
    if request.gpu_count < 0:
        raise ValueError(f"gpu_count must not be negative, got {request.gpu_count}")
    if request.memory_mib < 0:
        raise ValueError(f"memory_mib must not be negative, got {request.memory_mib}")
    return Need(
        memory_mib=request.memory_mib if request.gpu_count else 0,
        gpu_count=request.gpu_count,
        kinds=REQUEST_KINDS[sharing] if request.gpu_count else frozenset(),
        classification=classification,
        sizing=size(request, classification),
    )


class FitTable:
    """Per node of ``nodes``: fit code, unit kind id, unit share per GPU, chosen offer column.

    ``kind`` is -1 for nodes that do not fit (every constructor keeps to it: ``chosen_gpus``
    reads it without ``fits``). ``offer`` is the column of the node's offer that the unit comes
    from (meaningless for nodes that do not fit and for multi-GPU requests); ``mig_rows`` turns
    it into MIG geometry rows.
    The five arrays are rows of one ``(5, n)`` block, so ``take`` is a single gather.
    """

    __slots__ = ("block", "nodes", "code", "kind", "unit_share_milli", "offer", "fits")

    def __init__(self, nodes: np.ndarray, code: np.ndarray, kind: np.ndarray, unit_share_milli: np.ndarray,
                 offer: np.ndarray) -> None:
        self._bind(np.stack([nodes, code, kind, unit_share_milli, offer]).astype(np.int64, copy=False))

    def _bind(self, block: np.ndarray) -> None:
        self.block = block
        self.nodes, self.code, self.kind, self.unit_share_milli, self.offer = block
        self.fits = self.code == FITS

    @classmethod
    def _from_block(cls, block: np.ndarray) -> FitTable:
        table = cls.__new__(cls)
        table._bind(block)
        return table

    def charge_milli(self, need: Need) -> np.ndarray:
        """Compute share the placement would hold on each node: unit share x GPUs."""
        return self.unit_share_milli * need.gpu_count

    def take(self, positions: np.ndarray) -> FitTable:
        """The rows at ``positions``."""
        return FitTable._from_block(np.take(self.block, positions, axis=1))

    def mig_rows(self, snapshot: ClusterSnapshot) -> np.ndarray:
        """MIG geometry row of each node's unit (-1 where the unit is not a MIG instance)."""
        rows = pick(snapshot.offer_mig_row, self.nodes, self.offer)
        return np.where(self.kind == KIND_MIG, rows, -1).astype(np.int64)


def evaluate_fit(snapshot: ClusterSnapshot, need: Need, nodes: np.ndarray) -> FitTable:
    """Fit of ``need`` on each node id in ``nodes`` (any order), from the snapshot's offers.

    Single GPU: a node fits iff one of its offers (``NodeRow``) has share >= what the request
    demands of that offer's kind and memory >= the request's, of a kind the request accepts; the first such offer (offers are
    sorted ascending) is the unit. Multi-GPU: ``gpu_count`` free whole GPUs with enough memory
    each. Failing nodes get the most specific reason: NO_MEMORY when some free unit has the
    share but not the memory, NO_SHARE when free units exist but none with the share.
    """
    if need.multi_gpu:
        return _fit_gang(snapshot, need, nodes)
    if need.cpu_only:  # no GPU unit: NodeResourcesFit alone judges the node
        zeros = np.zeros(len(nodes), dtype=np.int64)
        return FitTable(nodes, zeros, zeros - 1, zeros, zeros)
    # Compared over every node's offers at once (contiguous arrays, cheaper than gathering the
    # candidates' rows first), then reduced to one uint64 word per node (8 offers = 8 bytes).
    demands = need.sizing.min_share_milli
    if need.kinds == _ALL_KINDS and min(demands) == max(demands):
        share_ok = snapshot.offer_share_milli >= demands[0]  # one demand for every kind: no gather
    else:
        share_ok = _share_ok(snapshot, need)
    usable = share_ok & (snapshot.offer_memory_mib >= need.memory_mib)
    if usable.shape[1] == 8:
        usable_words = row_words(usable).take(nodes)
        fits = usable_words != 0
        share_any = row_words(share_ok).take(nodes) != 0
        first = first_set_byte(usable_words)
    else:  # wider offers (a weighted node of more than 8 GPUs somewhere): numpy's reductions
        fits = usable.take(nodes, axis=0).any(axis=1)
        share_any = share_ok.take(nodes, axis=0).any(axis=1)
        first = np.argmax(usable.take(nodes, axis=0), axis=1)
    block = np.empty((5, len(nodes)), dtype=np.int64)
    block[0] = nodes
    # FITS 0, NO_MEMORY 1, NO_SHARE 2, NO_FREE_UNIT 3 as a sum of flags: a fitting unit has the
    # share, and a unit with the share is an offer (an empty slot's share fails every demand).
    code = block[1]
    np.logical_not(fits, out=code, casting="unsafe")
    code += ~share_any
    code += snapshot.offer_count.take(nodes) == 0
    kind = block[2]
    kind[:] = pick(snapshot.offer_kind, nodes, first)
    kind[~fits] = -1
    unit = block[3]
    # A weighted-MPS placement gets exactly its share, whatever is free on the GPU.
    unit[:] = np.where(kind == KIND_WEIGHTED, need.share_milli, pick(snapshot.offer_share_milli, nodes, first))
    unit[kind < 0] = 0
    block[4] = first
    return FitTable._from_block(block)


def _share_ok(snapshot: ClusterSnapshot, need: Need) -> np.ndarray:
    """Per offer: its share covers what the request demands of its kind (an offer of a kind the
    request does not accept never does). The accepted kinds are grouped by demand (typically
    two groups: the request's share, and 0 for the kinds sized by memory), and an offer's kind is
    tested against a group with one AND of its kind bit (``offer_kind_bit``), not gathered."""
    groups: dict[int, int] = {}
    for accepted in need.kinds:
        demand = need.min_share(accepted)
        groups[demand] = groups.get(demand, 0) | (1 << KIND_ID[accepted])
    bits = snapshot.offer_kind_bit
    share_ok: np.ndarray | None = None
    for demand, mask in groups.items():
        member = (bits & mask) != 0
        # An empty slot's share (-1) fails every demand and its kind bit (0) every mask.
        part = member if demand <= 0 else (snapshot.offer_share_milli >= demand) & member
        share_ok = part if share_ok is None else share_ok | part
    if share_ok is None:  # pragma: no cover - a GPU request accepts at least one kind
        return np.zeros(bits.shape, dtype=np.bool_)
    return share_ok


WEIGHTED_GANG = frozenset({PartitionKind.MPS_WEIGHTED})


def _gang_kinds(need: Need) -> np.ndarray:
    """Per mode id: the kind id a gang gets there (exclusive on exclusive / MIG nodes; on
    mps-weighted nodes a 100 % weighted share per GPU, for a request that asks for mps-weighted
    explicitly), -1 where the mode gives no whole GPUs or the request does not accept that kind.

    Why only when asked: the device plugin under weighted MPS runs time-slicing, whose replicas go
    one per pod (``failRequestsGreaterThanOne``), so a gang there needs a device plugin set up to
    admit it; the trace replay's gangs ask for it, an ``auto`` gang never lands there."""
    kinds = np.full(len(MODE_ID), -1, dtype=np.int64)
    if PartitionKind.EXCLUSIVE in need.kinds:
        kinds[MODE_ID[SharingMode.EXCLUSIVE]] = kinds[MODE_ID[SharingMode.MIG]] = KIND_EXCLUSIVE
    if need.kinds == WEIGHTED_GANG:
        kinds[MODE_ID[SharingMode.MPS_WEIGHTED]] = KIND_WEIGHTED
    return kinds


def _fit_gang(snapshot: ClusterSnapshot, need: Need, nodes: np.ndarray) -> FitTable:
    """``gpu_count`` free whole GPUs with ``memory_per_gpu_mib`` each, on exclusive / MIG nodes
    or untouched GPUs of mps-weighted nodes (``gpu_whole_free``)."""
    gang = need.gpu_count
    per_gpu = need.memory_per_gpu_mib
    gang_kind = _gang_kinds(need)[snapshot.mode_id.take(nodes)]
    enough = (snapshot.whole_free.take(nodes) >= gang) & (gang_kind >= 0)
    fits = enough & (snapshot.whole_free_min_memory_mib.take(nodes) >= per_gpu)
    # Nodes whose free GPUs differ in memory (rare): count the big-enough ones exactly.
    mixed = np.flatnonzero(enough & ~fits & (snapshot.whole_free_max_memory_mib.take(nodes) >= per_gpu))
    if len(mixed):
        ids = nodes[mixed]
        ok = snapshot.gpu_whole_free.take(ids, axis=0) & (snapshot.gpu_memory_mib.take(ids, axis=0) >= per_gpu)
        fits[mixed] = ok.sum(axis=1) >= gang
    # A whole GPU covers any share; it fails on memory or on too few free GPUs.
    code = np.where(fits, FITS, np.where(enough, NO_MEMORY, NO_FREE_UNIT))
    kind = np.where(fits, gang_kind, -1).astype(np.int64)
    unit = np.where(fits, SHARE_MILLI_FULL, 0).astype(np.int64)
    return FitTable(nodes, code, kind, unit, np.zeros(len(nodes), dtype=np.int64))


def chosen_gpus(snapshot: ClusterSnapshot, need: Need, fit: FitTable, preferred: np.ndarray | None = None, *,
                whole: bool = True) -> np.ndarray:
    """The GPU column (position in the node's GPU list) each fitting node would give a
    single-GPU placement, by the rules in the module docstring; -1 for nodes that do not fit
    and for multi-GPU and CPU-only requests, and with ``whole=False`` for whole-GPU units (the
    packing scores need no column for them: any free whole GPU is the same).

    A lookup: the unit's offer names its GPU (``NodeRow.offers``). ``preferred`` (bool, one row
    per node of ``fit``) narrows a weighted share's choice to the marked GPUs of a node where one
    of them fits (the assignment's ``gpu_hint``), read from the per-GPU arrays of those nodes."""
    gpu = np.full(len(fit.nodes), -1, dtype=np.int64)
    if need.multi_gpu or need.cpu_only:
        return gpu
    kind = fit.kind  # -1 where the node does not fit (``FitTable``)
    at = np.flatnonzero(kind > KIND_EXCLUSIVE)  # a unit of a GPU the offer names
    if len(at):
        gpu[at] = pick(snapshot.offer_gpu, fit.nodes.take(at), fit.offer.take(at))
    if whole:
        pos = np.flatnonzero(kind == KIND_EXCLUSIVE)
        if len(pos):
            ids = fit.nodes[pos]
            memory = snapshot.gpu_memory_mib.take(ids, axis=0)
            ok = snapshot.gpu_whole_free.take(ids, axis=0) & (memory >= need.memory_per_gpu_mib)
            gpu[pos] = np.argmax(ok, axis=1)
    if preferred is not None:
        pos = np.flatnonzero((kind == KIND_WEIGHTED) & preferred.any(axis=1))
        if len(pos):
            ids = fit.nodes[pos]
            free_share = snapshot.gpu_free_share_milli.take(ids, axis=0)
            free_memory = snapshot.gpu_free_memory_mib.take(ids, axis=0)
            ok = (snapshot.gpu_free_slots.take(ids, axis=0) > 0) & (free_share >= need.share_milli)
            ok &= free_memory >= need.memory_mib
            marked = ok & preferred.take(pos, axis=0)[:, : ok.shape[1]]
            has = np.flatnonzero(marked.any(axis=1))
            # Least free share, then least free memory, then the lowest column, as the assignment.
            key = (free_share.astype(np.int64) << 32) + free_memory
            ranked = np.where(marked, key, np.iinfo(np.int64).max).take(has, axis=0)
            gpu[pos[has]] = np.argmin(ranked, axis=1)
    return gpu
