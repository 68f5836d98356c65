/*
 * profile.c — building the profile model: content-addressed deduplication
 * of mappings, frames and stacks (first-seen order), thread and process
 * tables with Trace Processor's name priorities, and the stable sample sort.
 *
 * Frames are identified by what an exporter shows of them (function,
 * module, package, address, platform), as Relay's converter does, so two
 * sequences that intern the same function get one frame.
 */
#include "profile/profile.h" /* tm_profile */

void tm_profile_init(tm_profile *p, tm_mem *mem, tm_arena *arena) {
    memset(p, 0, sizeof *p);
    p->mem = mem;
    p->arena = arena;
    p->max_unique_frames = UINT64_MAX;
}

#define FREE_VEC(p, v, cap) tm_mem_free((p)->mem, (v), (cap) * sizeof *(v))

void tm_profile_release(tm_profile *p) {
    FREE_VEC(p, p->frames, p->cap_frames);
    FREE_VEC(p, p->mappings, p->cap_mappings);
    FREE_VEC(p, p->stacks, p->cap_stacks);
    FREE_VEC(p, p->frame_ids, p->cap_frame_ids);
    FREE_VEC(p, p->threads, p->cap_threads);
    FREE_VEC(p, p->processes, p->cap_processes);
    FREE_VEC(p, p->samples, p->cap_samples);
    if (p->weights) FREE_VEC(p, p->weights, p->cap_samples);
    FREE_VEC(p, p->realtime, p->n_realtime);
    FREE_VEC(p, p->heap_samples, p->cap_heap_samples);
    FREE_VEC(p, p->off_samples, p->cap_off_samples);
    FREE_VEC(p, p->heap_names, p->cap_heap_names);
    FREE_VEC(p, p->memory, p->cap_memory);
    tm_u64map_free(p->mem, &p->heap_sample_by_key);
    for (size_t g = 0; g < p->n_heap_groups; g++) tm_iidmap_free(p->mem, &p->heap_groups[g].by_stack);
    tm_idxset_free(p->mem, &p->frame_set);
    tm_idxset_free(p->mem, &p->mapping_set);
    tm_idxset_free(p->mem, &p->stack_set);
    tm_u64map_free(p->mem, &p->thread_by_tid);
    tm_u64map_free(p->mem, &p->process_by_pid);
}

/* ---- mappings ---- */

static uint32_t mapping_hash(const tm_prof_mapping *m) {
    uint64_t h = tm_hash_bytes(m->start ^ (m->end << 1), m->path);
    h = tm_hash_bytes(h ^ m->load_bias ^ ((uint64_t)m->flags << 60), m->build_id);
    return (uint32_t)(h ^ (h >> 32));
}

static int mapping_eq(const void *ctx, uint32_t idx, const void *key) {
    const tm_profile *p = ctx;
    const tm_prof_mapping *a = &p->mappings[idx], *b = key;
    return a->start == b->start && a->end == b->end && a->load_bias == b->load_bias &&
           a->flags == b->flags && a->start_offset == b->start_offset &&
           a->exact_offset == b->exact_offset && tm_bytes_eq(a->path, b->path) &&
           tm_bytes_eq(a->build_id, b->build_id);
}

static uint64_t elf_start_of(const tm_prof_mapping *m) {
    if (!(m->flags & TM_MAPPING_ELF_REL_PC) || m->exact_offset < m->start_offset ||
        m->exact_offset - m->start_offset > m->start)
        return m->start;
    return m->start - (m->exact_offset - m->start_offset);
}

tm_status tm_profile_intern_mapping(tm_profile *p, const tm_prof_mapping *m, uint32_t *out) {
    uint32_t h = mapping_hash(m);
    size_t slot;
    uint32_t idx = tm_idxset_find_slot(&p->mapping_set, h, mapping_eq, p, m, &slot);
    if (idx == TM_ABSENT) {
        TM_TRY(TM_VEC_RESERVE(p->mem, p->mappings, p->cap_mappings, p->n_mappings + 1));
        idx = (uint32_t)p->n_mappings;
        TM_TRY(tm_idxset_add_at(p->mem, &p->mapping_set, slot, h, idx));
        p->mappings[p->n_mappings] = *m;
        p->mappings[p->n_mappings].path_hash = tm_hash_bytes(0, m->path);
        p->mappings[p->n_mappings++].elf_start = elf_start_of(m);
        p->stats.mappings++;
        if (m->build_id.len == 0) p->stats.mappings_without_build_id++;
    }
    *out = idx;
    return TM_OK;
}

/* ---- frames ---- */

/* The package is hashed on its own: a frame whose package is its
 * mapping's path takes the hash the mapping keeps, the frames of a
 * library hashing its path once. */
static inline uint32_t frame_hash(const tm_profile *p, const tm_prof_frame *f) {
    const tm_prof_mapping *m = f->mapping ? &p->mappings[f->mapping - 1] : NULL;
    uint64_t package = m && f->package.data == m->path.data && f->package.len == m->path.len
                           ? m->path_hash
                           : tm_hash_bytes(0, f->package);
    uint64_t h = tm_hash_bytes(f->addr ^ ((uint64_t)f->flags << 56), f->function);
    if (f->module.len) h = tm_hash_bytes(h, f->module); /* most frames have none */
    h ^= package ^ f->line;
    if (f->file.len) h = tm_hash_bytes(h, f->file);
    return (uint32_t)(h ^ (h >> 32));
}

static int frame_eq(const void *ctx, uint32_t idx, const void *key) {
    const tm_profile *p = ctx;
    const tm_prof_frame *a = &p->frames[idx], *b = key;
    return a->flags == b->flags && a->addr == b->addr && tm_bytes_eq(a->function, b->function) &&
           tm_bytes_eq(a->module, b->module) && tm_bytes_eq(a->package, b->package) && a->line == b->line &&
           tm_bytes_eq(a->file, b->file);
}

tm_status tm_profile_compact_frames(tm_profile *p, const uint8_t *keep) {
    uint32_t *remap = tm_mem_alloc(p->mem, (p->n_frames ? p->n_frames : 1) * sizeof *remap);
    if (!remap) return TM_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < p->n_frames; i++) {
        remap[i] = (uint32_t)n;
        if (keep[i]) p->frames[n++] = p->frames[i];
    }
    for (size_t i = 0; i < p->n_frame_ids; i++) p->frame_ids[i] = remap[p->frame_ids[i]];
    tm_mem_free(p->mem, remap, (p->n_frames ? p->n_frames : 1) * sizeof *remap);
    p->n_frames = n;
    p->stats.frames = n;
    tm_idxset_free(p->mem, &p->frame_set);
    for (size_t i = 0; i < n; i++)
        TM_TRY(tm_idxset_add(p->mem, &p->frame_set, frame_hash(p, &p->frames[i]), (uint32_t)i));
    return TM_OK;
}

/* The frame index's first size: the frames reserved (a decoder sizes them
 * to its input), up to this many, are added without regrowing it. */
#define FRAME_SET_RESERVE 1024u

tm_status tm_profile_intern_frame(tm_profile *p, const tm_prof_frame *f, uint32_t *out) {
    if (TM_UNLIKELY(!p->frame_set.cap)) {
        size_t n = p->cap_frames < FRAME_SET_RESERVE ? p->cap_frames : FRAME_SET_RESERVE;
        TM_TRY(tm_idxset_reserve(p->mem, &p->frame_set, n));
    }
    uint32_t h = frame_hash(p, f);
    size_t slot;
    uint32_t idx = tm_idxset_find_slot(&p->frame_set, h, frame_eq, p, f, &slot);
    if (idx == TM_ABSENT) {
        if (p->n_frames >= p->max_unique_frames) return TM_ERR_LIMIT;
        TM_TRY(TM_VEC_RESERVE(p->mem, p->frames, p->cap_frames, p->n_frames + 1));
        idx = (uint32_t)p->n_frames;
        TM_TRY(tm_idxset_add_at(p->mem, &p->frame_set, slot, h, idx));
        p->frames[p->n_frames++] = *f;
        p->stats.frames++;
    }
    *out = idx;
    return TM_OK;
}

/* ---- stacks ---- */

typedef struct stack_key {
    const uint32_t *ids;
    size_t n;
} stack_key;

static uint32_t stack_hash(const uint32_t *ids, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ ids[i]) * 0x100000001b3ull;
    h = tm_hash_u64(h);
    return (uint32_t)(h ^ (h >> 32));
}

static int stack_eq(const void *ctx, uint32_t idx, const void *key) {
    const tm_profile *p = ctx;
    const tm_prof_stack *s = &p->stacks[idx];
    const stack_key *k = key;
    return s->len == k->n && (k->n == 0 || memcmp(p->frame_ids + s->off, k->ids, k->n * 4) == 0);
}

tm_status tm_profile_intern_stack(tm_profile *p, const uint32_t *ids, size_t n, uint32_t *out) {
    stack_key k = {ids, n};
    uint32_t h = stack_hash(ids, n);
    size_t slot;
    uint32_t idx = tm_idxset_find_slot(&p->stack_set, h, stack_eq, p, &k, &slot);
    if (idx == TM_ABSENT) {
        if (p->n_frame_ids + n > UINT32_MAX) return TM_ERR_LIMIT;
        TM_TRY(TM_VEC_RESERVE(p->mem, p->stacks, p->cap_stacks, p->n_stacks + 1));
        TM_TRY(TM_VEC_RESERVE(p->mem, p->frame_ids, p->cap_frame_ids, p->n_frame_ids + n));
        idx = (uint32_t)p->n_stacks;
        TM_TRY(tm_idxset_add_at(p->mem, &p->stack_set, slot, h, idx));
        if (n) memcpy(p->frame_ids + p->n_frame_ids, ids, n * sizeof *ids);
        p->stacks[p->n_stacks].off = (uint32_t)p->n_frame_ids;
        p->stacks[p->n_stacks].len = (uint32_t)n;
        p->n_stacks++;
        p->n_frame_ids += n;
        p->stats.stacks++;
    }
    *out = idx;
    return TM_OK;
}

/* ---- threads and processes ---- */

tm_status tm_profile_thread(tm_profile *p, int64_t tid, uint32_t *out) {
    uint32_t idx = tm_u64map_get(&p->thread_by_tid, (uint64_t)tid);
    if (idx == TM_ABSENT) {
        TM_TRY(TM_VEC_RESERVE(p->mem, p->threads, p->cap_threads, p->n_threads + 1));
        idx = (uint32_t)p->n_threads;
        TM_TRY(tm_u64map_put(p->mem, &p->thread_by_tid, (uint64_t)tid, idx));
        tm_prof_thread *t = &p->threads[p->n_threads++];
        memset(t, 0, sizeof *t);
        t->tid = tid;
    }
    *out = idx;
    return TM_OK;
}

tm_status tm_profile_process(tm_profile *p, int64_t pid, uint32_t *out) {
    uint32_t idx = tm_u64map_get(&p->process_by_pid, (uint64_t)pid);
    if (idx == TM_ABSENT) {
        TM_TRY(TM_VEC_RESERVE(p->mem, p->processes, p->cap_processes, p->n_processes + 1));
        idx = (uint32_t)p->n_processes;
        TM_TRY(tm_u64map_put(p->mem, &p->process_by_pid, (uint64_t)pid, idx));
        tm_prof_process *pr = &p->processes[p->n_processes++];
        memset(pr, 0, sizeof *pr);
        pr->pid = pid;
    }
    *out = idx;
    return TM_OK;
}

void tm_profile_name_thread(tm_profile *p, uint32_t thread, tm_str name, uint32_t prio) {
    tm_prof_thread *t = &p->threads[thread];
    if (name.len && prio >= t->name_prio) {
        t->name = name;
        t->name_prio = prio;
    }
}

void tm_profile_name_process(tm_profile *p, uint32_t process, tm_str name, uint32_t prio) {
    tm_prof_process *pr = &p->processes[process];
    if (name.len && prio >= pr->name_prio) {
        pr->name = name;
        pr->name_prio = prio;
    }
}

tm_str tm_profile_main_thread_process_name(const tm_profile *p, const tm_prof_thread *t) {
    tm_str none = {NULL, 0};
    if (t->name_prio || !t->pid || t->tid != t->pid) return none;
    uint32_t idx = tm_u64map_get(&p->process_by_pid, (uint64_t)t->pid);
    return idx == TM_ABSENT ? none : p->processes[idx].name;
}

/* ---- samples ---- */

void tm_profile_count_threads(tm_profile *p) {
    if (p->threads_counted) return;
    for (size_t i = 0; i < p->n_threads; i++) p->threads[i].weight = 0;
    const tm_prof_sample *s = p->samples;
    tm_prof_thread *th = p->threads;
    if (!p->weights) /* a store to a weight could alias p->weights: read once */
        for (size_t i = 0; i < p->n_samples; i++) th[s[i].thread].weight++;
    else
        for (size_t i = 0; i < p->n_samples; i++) th[s[i].thread].weight += p->weights[i];
}

/* ---- sorting samples by time ----
 * Samples arrive as a few sorted streams (sequences) interleaved at fine
 * grain, so comparison merges pay for every interleaving. Instead: a
 * stable radix sort on ts - min. One MSD pass splits the samples into
 * buckets of the top bits sized to stay in L2 (~16 K samples); each bucket
 * is then sorted by LSD passes over its low bits while it is in cache, so
 * main memory is crossed only by the MSD pass. Every pass is stable, so
 * equal timestamps keep their input order. A small input whose threads
 * are each in order (one chunk) is merged by thread instead. */

#define DIGIT_BITS 11
#define BUCKET_SAMPLES 16384

/* Turns counts into start offsets (exclusive prefix sums). */
static void counts_to_offsets(size_t *c, size_t n) {
    size_t sum = 0;
    for (size_t b = 0; b < n; b++) {
        size_t t = c[b];
        c[b] = sum;
        sum += t;
    }
}

/* Stable LSD radix sort of src[0..n) on the low `bits` of ts - min, using
 * dst as scratch; returns the buffer holding the result. */
static tm_prof_sample *lsd_sort(tm_prof_sample *src, tm_prof_sample *dst, size_t n, int64_t min, unsigned bits,
                            size_t *count) {
    const size_t radix = (size_t)1 << DIGIT_BITS, mask = radix - 1;
    for (unsigned shift = 0; shift < bits; shift += DIGIT_BITS) {
        memset(count, 0, radix * sizeof *count);
        for (size_t i = 0; i < n; i++) count[(((uint64_t)src[i].ts - (uint64_t)min) >> shift) & mask]++;
        if (count[(((uint64_t)src[0].ts - (uint64_t)min) >> shift) & mask] == n) continue; /* one digit value */
        counts_to_offsets(count, radix);
        for (size_t i = 0; i < n; i++) dst[count[(((uint64_t)src[i].ts - (uint64_t)min) >> shift) & mask]++] = src[i];
        tm_prof_sample *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* A small input (one chunk: a few thousand samples) whose threads each
 * arrive in time order, as a sequence per thread gives: a k-way merge of
 * the threads' runs costs a few comparisons a sample, where the radix passes
 * pay for their counts arrays whatever n is. */
#define MERGE_MAX_THREADS 8 /* a power of two: the ring wraps by a mask */
#define RUN_END UINT32_MAX

/* Does sample x come before sample y: earlier, or as early and earlier in
 * the input? */
static inline bool comes_before(const tm_prof_sample *a, uint32_t x, uint32_t y) {
    return a[x].ts < a[y].ts || (a[x].ts == a[y].ts && x < y);
}

/* The runs' heads in merge order, at[first] first, MERGE_MAX_THREADS at
 * most. */
typedef struct merge_ring {
    uint32_t at[MERGE_MAX_THREADS];
    size_t first, len;
} merge_ring;

/* Puts sample x in its place, from the back: a run's next sample mostly
 * stays there (the threads take turns). */
static inline void ring_insert(merge_ring *r, const tm_prof_sample *a, uint32_t x) {
    const size_t mask = MERGE_MAX_THREADS - 1;
    size_t j = r->len++;
    for (; j > 0 && comes_before(a, x, r->at[(r->first + j - 1) & mask]); j--)
        r->at[(r->first + j) & mask] = r->at[(r->first + j - 1) & mask];
    r->at[(r->first + j) & mask] = x;
}

/* A block: consecutive input samples of one thread, from start to the
 * next block's start; next: the thread's next block (RUN_END: none). */
typedef struct merge_block {
    uint32_t start, next;
} merge_block;

/* Stable k-way merge of the threads' runs of p->samples (nothing to do
 * when they are in order); false when a thread's samples are not in time
 * order, there are too many threads, or they take turns more often than
 * every other sample on average, leaving them as they were. The input is
 * cut into blocks of one thread (writers send a thread's samples a packet
 * or a run of packets at a time), each thread's blocks chained in input
 * order, so the first pass looks at a sample's thread and time only (and
 * the blocks, 4 bytes a sample at most, take no more memory than a link a
 * sample did); each output takes the first head of the ring, and its run's
 * next sample (the next in its block, else the next block's first) takes
 * its place. */
static tm_status merge_threads(tm_profile *p, bool *done) {
    size_t n = p->n_samples, k = p->n_threads, cap = (n + 1) / 2; /* the last one ends the last block */
    const tm_prof_sample *a = p->samples;
    *done = false;
    if (k > MERGE_MAX_THREADS || n >= RUN_END || !cap) return TM_OK;
    merge_block *blocks = tm_mem_alloc(p->mem, cap * sizeof *blocks);
    if (!blocks) return TM_ERR_NOMEM;
    uint32_t first[MERGE_MAX_THREADS], last[MERGE_MAX_THREADS];
    for (size_t t = 0; t < k; t++) first[t] = last[t] = RUN_END;
    int64_t prev = INT64_MIN;
    uint32_t prev_thread = RUN_END, nb = 0;
    bool sorted = true;
    size_t i = 0;
    for (; i < n; i++) {
        int64_t ts = a[i].ts;
        if (a[i].thread == prev_thread) { /* the block goes on */
            if (ts < prev) break;
        } else {
            uint32_t t = a[i].thread;
            if (t >= k || nb + 1 == cap) break;
            if (first[t] == RUN_END) first[t] = nb;
            else if (ts < a[blocks[blocks[last[t]].next].start - 1].ts) break; /* next: the block after it, for now */
            else blocks[last[t]].next = nb;
            blocks[nb] = (merge_block){(uint32_t)i, nb + 1};
            last[t] = nb++;
            sorted &= prev <= ts;
            prev_thread = t;
        }
        prev = ts;
    }
    bool chained = i == n;
    if (chained) {
        blocks[nb].start = (uint32_t)n;
        for (size_t t = 0; t < k; t++)
            if (first[t] != RUN_END) blocks[last[t]].next = RUN_END;
    }
    if (chained && !p->weights) { /* every sample weighs 1: the threads' weights are their blocks' lengths */
        for (size_t t = 0; t < k; t++) p->threads[t].weight = 0;
        for (size_t b = 0; b < nb; b++) p->threads[a[blocks[b].start].thread].weight += blocks[b + 1].start - blocks[b].start;
        p->threads_counted = true;
    }
    if (!chained || sorted) {
        *done = chained;
        tm_mem_free(p->mem, blocks, cap * sizeof *blocks);
        return TM_OK;
    }
    tm_prof_sample *out = tm_mem_alloc(p->mem, n * sizeof *out);
    if (!out) {
        tm_mem_free(p->mem, blocks, cap * sizeof *blocks);
        return TM_ERR_NOMEM;
    }
    /* Per thread: the block its head is in, and where that block ends. */
    uint32_t block_of[MERGE_MAX_THREADS], end_of[MERGE_MAX_THREADS];
    merge_ring ring = {{0}, 0, 0};
    for (size_t t = 0; t < k; t++)
        if (first[t] != RUN_END) {
            block_of[t] = first[t], end_of[t] = blocks[first[t] + 1].start;
            ring_insert(&ring, a, blocks[first[t]].start);
        }
    for (size_t o = 0; o < n; o++) {
        uint32_t taken = ring.at[ring.first], t = a[taken].thread, x = taken + 1;
        out[o] = a[taken];
        ring.first = (ring.first + 1) & (MERGE_MAX_THREADS - 1), ring.len--;
        if (x == end_of[t]) {
            uint32_t b = blocks[block_of[t]].next;
            if (b == RUN_END) continue;
            block_of[t] = b, end_of[t] = blocks[b + 1].start, x = blocks[b].start;
        }
        ring_insert(&ring, a, x);
    }
    *done = true;
    tm_mem_free(p->mem, blocks, cap * sizeof *blocks);
    tm_mem_free(p->mem, p->samples, p->cap_samples * sizeof *p->samples); /* adopt out instead of copying back */
    p->samples = out;
    p->cap_samples = n;
    return TM_OK;
}

tm_status tm_profile_sort_samples(tm_profile *p) {
    size_t n = p->n_samples;
    if (n <= BUCKET_SAMPLES) {
        bool merged;
        TM_TRY(merge_threads(p, &merged));
        if (merged) return TM_OK;
    }
    tm_prof_sample *a = p->samples;
    int sorted = 1;
    int64_t min = n ? a[0].ts : 0, max = min;
    for (size_t i = 1; i < n; i++) {
        sorted &= a[i - 1].ts <= a[i].ts;
        if (a[i].ts < min) min = a[i].ts;
        if (a[i].ts > max) max = a[i].ts;
    }
    if (sorted) return TM_OK;
    uint64_t span = (uint64_t)max - (uint64_t)min;
    unsigned bits = 1;
    while (bits < 64 && (span >> bits) != 0) bits++;
    unsigned top = 0; /* MSD bits: enough buckets for ~BUCKET_SAMPLES each, at most 2^12 */
    while (top < 12 && top < bits && (n >> top) > BUCKET_SAMPLES) top++;
    size_t n_buckets = (size_t)1 << top, low = bits - top;
    size_t *bucket = tm_mem_alloc(p->mem, (n_buckets + 1) * sizeof *bucket);
    size_t *count = tm_mem_alloc(p->mem, ((size_t)1 << DIGIT_BITS) * sizeof *count);
    tm_prof_sample *tmp = tm_mem_alloc(p->mem, n * sizeof *tmp);
    if (!bucket || !count || !tmp) {
        tm_mem_free(p->mem, bucket, (n_buckets + 1) * sizeof *bucket);
        tm_mem_free(p->mem, count, ((size_t)1 << DIGIT_BITS) * sizeof *count);
        tm_mem_free(p->mem, tmp, n * sizeof *tmp);
        return TM_ERR_NOMEM;
    }
    /* MSD pass: a -> tmp, stable, by the top bits. */
    memset(bucket, 0, (n_buckets + 1) * sizeof *bucket);
    for (size_t i = 0; i < n; i++) bucket[((uint64_t)a[i].ts - (uint64_t)min) >> low]++;
    counts_to_offsets(bucket, n_buckets + 1);
    for (size_t i = 0; i < n; i++) tmp[bucket[((uint64_t)a[i].ts - (uint64_t)min) >> low]++] = a[i];
    /* bucket[b] now ends bucket b: bucket b is [b ? bucket[b-1] : 0, bucket[b]). */
    for (size_t b = 0; b < n_buckets; b++) {
        size_t lo = b ? bucket[b - 1] : 0, hi = bucket[b];
        if (hi - lo < 2) continue;
        tm_prof_sample *res = lsd_sort(tmp + lo, a + lo, hi - lo, min, (unsigned)low, count);
        if (res != tmp + lo) memcpy(tmp + lo, res, (hi - lo) * sizeof *res);
    }
    tm_mem_free(p->mem, bucket, (n_buckets + 1) * sizeof *bucket);
    tm_mem_free(p->mem, count, ((size_t)1 << DIGIT_BITS) * sizeof *count);
    tm_mem_free(p->mem, a, p->cap_samples * sizeof *a); /* adopt tmp instead of copying back */
    p->samples = tmp;
    p->cap_samples = n;
    return TM_OK;
}

int tm_profile_realtime(const tm_profile *p, int64_t ts, int64_t *out) {
    if (!p->n_realtime) return 0;
    size_t lo = 0, hi = p->n_realtime; /* last segment with from_ns <= ts */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (p->realtime[mid].from_ns <= ts) lo = mid;
        else hi = mid;
    }
    *out = ts + p->realtime[lo].offset_ns;
    return 1;
}

static int ends_with(tm_str s, const char *suffix) {
    size_t n = strlen(suffix);
    return s.len >= n && memcmp(s.data + s.len - n, suffix, n) == 0;
}

int tm_path_is_java(tm_str path) {
    static const char needle[] = "dalvik-jit-code-cache";
    size_t n = sizeof needle - 1;
    for (size_t i = 0; i + n <= path.len; i++)
        if (path.data[i] == 'd' && memcmp(path.data + i, needle, n) == 0) return 1;
    return ends_with(path, ".oat") || ends_with(path, ".odex") || ends_with(path, ".vdex") ||
           ends_with(path, ".jar") || ends_with(path, ".dex");
}

/* ---- memory profiles ---- */

tm_status tm_profile_add_heap(tm_profile *p, int64_t ts, uint32_t stack, uint32_t thread, uint32_t h,
                              tm_str heap, const int64_t alloc[2], const int64_t freed[2]) {
    if (h >= 256) return TM_ERR_LIMIT;
    while (h >= p->n_heap_names) { /* heaps are numbered 0, 1, ... as they first appear */
        TM_TRY(TM_VEC_RESERVE(p->mem, p->heap_names, p->cap_heap_names, p->n_heap_names + 1));
        p->heap_names[p->n_heap_names++] = heap;
    }
    if (thread >= (1u << 24)) return TM_ERR_LIMIT;
    uint64_t group_key = (uint64_t)thread << 8 | h, key = (uint64_t)stack << 32 | group_key;
    size_t g = p->last_heap_group;
    if (g >= p->n_heap_groups || p->heap_groups[g].key != group_key)
        for (g = 0; g < p->n_heap_groups && p->heap_groups[g].key != group_key; g++) continue;
    if (g == p->n_heap_groups && g < TM_HEAP_GROUPS) {
        memset(&p->heap_groups[g], 0, sizeof p->heap_groups[g]);
        p->heap_groups[p->n_heap_groups++].key = group_key;
    }
    p->last_heap_group = g;
    uint32_t i = g < TM_HEAP_GROUPS ? tm_iidmap_get(&p->heap_groups[g].by_stack, stack)
                                    : tm_u64map_get(&p->heap_sample_by_key, key);
    if (i == TM_ABSENT) {
        TM_TRY(TM_VEC_RESERVE(p->mem, p->heap_samples, p->cap_heap_samples, p->n_heap_samples + 1));
        i = (uint32_t)p->n_heap_samples;
        if (g < TM_HEAP_GROUPS) /* dense as far as 4x the group's samples reach */
            TM_TRY(tm_iidmap_put(p->mem, &p->heap_groups[g].by_stack, stack, i, ++p->heap_groups[g].n));
        else
            TM_TRY(tm_u64map_put(p->mem, &p->heap_sample_by_key, key, i));
        tm_prof_heap_sample *n = &p->heap_samples[p->n_heap_samples++];
        memset(n, 0, sizeof *n);
        n->stack = stack, n->thread = thread, n->heap = h;
    }
    tm_prof_heap_sample *hs = &p->heap_samples[i];
    if (ts > hs->ts) hs->ts = ts;
#define ADD(x, v) ((x) = (int64_t)((uint64_t)(x) + (uint64_t)(v))) /* hostile totals wrap, never overflow */
    ADD(hs->alloc_objects, alloc[0]), ADD(hs->alloc_space, alloc[1]);
    ADD(hs->inuse_objects, alloc[0]), ADD(hs->inuse_space, alloc[1]);
    ADD(hs->inuse_objects, freed[0]), ADD(hs->inuse_space, freed[1]);
#undef ADD
    return TM_OK;
}

uint64_t tm_profile_peak_rss(const tm_profile *p) {
    uint64_t peak = 0;
    for (size_t i = 0; i < p->n_memory; i++) {
        uint64_t v = p->memory[i].rss_peak > p->memory[i].rss ? p->memory[i].rss_peak : p->memory[i].rss;
        if (v > peak) peak = v;
    }
    return peak;
}

int64_t tm_heap_value(const tm_prof_heap_sample *h, tm_value v) {
    switch (v) {
    case TM_VALUE_ALLOC_OBJECTS: return h->alloc_objects;
    case TM_VALUE_ALLOC_SPACE: return h->alloc_space;
    case TM_VALUE_INUSE_OBJECTS: return h->inuse_objects;
    default: return h->inuse_space;
    }
}

/* A view of off-CPU samples (wall: and the CPU samples, weighing period ns
 * each), merged in time order. */
static tm_status off_cpu_view(const tm_profile *p, tm_value v, tm_profile *view, tm_error *err) {
    const int wall = v == TM_VALUE_WALL;
    if (!p->n_off_samples && !(wall && p->n_samples))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
                       "%s: the trace holds no off-CPU samples (record them with tracemill record --off-cpu)",
                       tm_value_name(v));
    if (wall && p->n_samples && !p->on_cpu_period_ns)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
                       "wall: the CPU samples' sampling period is unknown (their PerfSample timebase gives none), "
                       "so they cannot be weighed in ns");
    size_t n_on = wall ? p->n_samples : 0, n = n_on + p->n_off_samples;
    view->samples = tm_mem_alloc(p->mem, (n + 1) * sizeof *view->samples);
    view->weights = tm_mem_alloc(p->mem, (n + 1) * sizeof *view->weights);
    if (!view->samples || !view->weights) {
        tm_mem_free(p->mem, view->samples, (n + 1) * sizeof *view->samples);
        tm_mem_free(p->mem, view->weights, (n + 1) * sizeof *view->weights);
        *view = *p;
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    }
    size_t i = 0, j = 0, k = 0;
    while (i < n_on || j < p->n_off_samples) {
        const tm_prof_off_sample *o = j < p->n_off_samples ? &p->off_samples[j] : NULL;
        if (i < n_on && (!o || p->samples[i].ts <= o->ts)) {
            view->samples[k] = p->samples[i++];
            view->weights[k++] = p->on_cpu_period_ns;
        } else {
            view->samples[k] = (tm_prof_sample){o->ts, o->stack, o->thread};
            view->weights[k++] = o->ns;
            j++;
        }
    }
    view->n_samples = k;
    view->cap_samples = n + 1;
    view->untimed = 1;
    return TM_OK;
}

static tm_value default_value(const tm_profile *p) {
    return p->n_samples || (!p->n_off_samples && !p->n_heap_samples) ? TM_VALUE_SAMPLES
           : p->n_off_samples                                        ? TM_VALUE_OFF_CPU
                                                                     : TM_VALUE_INUSE_SPACE;
}

tm_status tm_profile_diff_value(const tm_profile *base, const tm_profile *now, tm_value v, tm_error *err) {
    TM_TRY(tm_check_value(v, "diff", err));
    tm_value a = default_value(base), b = default_value(now);
    if (v != TM_VALUE_DEFAULT || a == b) return TM_OK;
    return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
                   "the two profiles weigh different values (the base %s, the new one %s): choose one both hold "
                   "(--value)",
                   tm_value_name(a), tm_value_name(b));
}

tm_status tm_profile_value_view(const tm_profile *p, tm_value v, tm_profile *view, tm_value *resolved,
                                tm_error *err) {
    TM_TRY(tm_check_value(v, "value", err));
    if (v == TM_VALUE_DEFAULT) v = default_value(p);
    if (resolved) *resolved = v;
    *view = *p;
    if (v == TM_VALUE_SAMPLES) {
        if (!p->n_samples && p->n_heap_samples)
            return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
                           "the trace holds a memory profile and no CPU samples: choose a memory value "
                           "(alloc_objects, alloc_space, inuse_objects, inuse_space)");
        return TM_OK;
    }
    if (v == TM_VALUE_OFF_CPU || v == TM_VALUE_WALL) return off_cpu_view(p, v, view, err);
    if (!p->n_heap_samples)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
                       p->stats.heap_dumps ? "%s: the memory profile sampled no allocation (nothing reached its "
                                          "sampling interval)"
                                        : "%s: the trace holds no memory profile",
                       tm_value_name(v));
    size_t n = p->n_heap_samples;
    view->samples = tm_mem_alloc(p->mem, n * sizeof *view->samples);
    view->weights = tm_mem_alloc(p->mem, n * sizeof *view->weights);
    if (!view->samples || !view->weights) {
        tm_mem_free(p->mem, view->samples, n * sizeof *view->samples);
        tm_mem_free(p->mem, view->weights, n * sizeof *view->weights);
        *view = *p;
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    }
    size_t k = 0; /* a stack with nothing of this value is left out, as a CPU profile leaves out unsampled ones */
    for (size_t i = 0; i < n; i++) {
        const tm_prof_heap_sample *h = &p->heap_samples[i];
        int64_t w = tm_heap_value(h, v);
        if (w <= 0) continue;
        view->samples[k] = (tm_prof_sample){h->ts, h->stack, h->thread};
        view->weights[k++] = (uint64_t)w;
    }
    view->n_samples = k;
    view->cap_samples = n;
    view->untimed = 1;
    return TM_OK;
}

void tm_profile_value_view_release(const tm_profile *p, tm_profile *view) {
    if (view->samples != p->samples) {
        FREE_VEC(view, view->samples, view->cap_samples);
        FREE_VEC(view, view->weights, view->cap_samples);
    }
    *view = *p;
}

static const char *const value_names[] = {"default",       "samples",     "alloc_objects", "alloc_space",
                                          "inuse_objects", "inuse_space", "off_cpu",       "wall"};

const char *tm_value_name(tm_value v) {
    return (unsigned)v < sizeof value_names / sizeof *value_names ? value_names[v] : "unknown";
}

tm_status tm_value_parse(const char *name, tm_value *out, tm_error *err) {
    if (!out) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_value_parse: NULL out");
    for (size_t i = 0; name && i < sizeof value_names / sizeof *value_names; i++)
        if (strcmp(name, value_names[i]) == 0) {
            *out = (tm_value)i;
            return TM_OK;
        }
    return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
                   "unknown value '%s' (samples, off_cpu, wall, alloc_objects, alloc_space, inuse_objects, "
                   "inuse_space)",
                   name ? name : "");
}
