// Block request latency, issue -> complete, as a log2 histogram by device and operation.
// Keys use the tracepoints' (dev, sector) pair, as biosnoop does, so no kprobes are needed.
#include <uapi/linux/ptrace.h>

struct start_key {
    u32 dev;
    u32 pad;
    u64 sector;
};

struct hist_key {
    u32 dev;
    u32 op;    // 0 read, 1 write, 2 discard, 3 flush, 4 other
    u64 slot;  // latency in [2^(slot-1), 2^slot) microseconds; slot 0 is < 1 us
};

// LRU: a request that never completes (requeued, device removed) must not fill the map.
BPF_TABLE("lru_hash", struct start_key, u64, start, 65536);
BPF_HASH(dist, struct hist_key, u64, 8192);

static __always_inline u32 op_of(const char *rwbs) {
    // rwbs is "[F]<op>[flags]": F first means a pre-flush unless it is the flush op itself.
    #pragma unroll
    for (int i = 0; i < 3; i++) {
        char c = rwbs[i];
        if (c == 'R') return 0;
        if (c == 'W') return 1;
        if (c == 'D') return 2;
        if (c == 0) break;
    }
    return rwbs[0] == 'F' ? 3 : 4;
}

TRACEPOINT_PROBE(block, block_rq_issue) {
    struct start_key key = {};
    key.dev = args->dev;
    key.sector = args->sector;
    u64 ts = bpf_ktime_get_ns();
    start.update(&key, &ts);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete) {
    struct start_key key = {};
    key.dev = args->dev;
    key.sector = args->sector;
    u64 *tsp = start.lookup(&key);
    if (tsp == 0)
        return 0;
    u64 delta_us = (bpf_ktime_get_ns() - *tsp) / 1000;
    start.delete(&key);
    char rwbs[8] = {};
    bpf_probe_read_kernel(&rwbs, sizeof(rwbs), args->rwbs);
    struct hist_key hkey = {};
    hkey.dev = args->dev;
    hkey.op = op_of(rwbs);
    hkey.slot = bpf_log2l(delta_us);
    dist.atomic_increment(hkey);
    return 0;
}
