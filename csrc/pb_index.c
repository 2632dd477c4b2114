/* Binary search over index files, warm tail first. Format and rules: pb_index.h. */
#include "pb_index.h"

enum pb_index_kind {
    PB_INDEX_OFFSET,          /* offset index, keyed by relative offset */
    PB_INDEX_TIME,            /* time index, keyed by timestamp */
    PB_INDEX_TIME_BY_OFFSET,  /* time index, keyed by its relative offset column */
    PB_INDEX_OFFSET_BY_POSITION, /* offset index, keyed by its file position column */
};

/* The key of slot i. `kind` is a compile-time constant at every call site, so gcc
 * folds the branch and each search below is a specialised loop. */
static inline int64_t pb_index_key(const uint8_t *buf, size_t i, enum pb_index_kind kind)
{
    if (kind == PB_INDEX_OFFSET)
        return pb_load_be32(buf + i * PB_OFFSET_ENTRY_SIZE);
    if (kind == PB_INDEX_OFFSET_BY_POSITION)
        return pb_load_be32(buf + i * PB_OFFSET_ENTRY_SIZE + 4);
    if (kind == PB_INDEX_TIME_BY_OFFSET)
        return pb_load_be32(buf + i * PB_TIME_ENTRY_SIZE + 8);
    return (int64_t)pb_load_be64(buf + i * PB_TIME_ENTRY_SIZE);
}

/* First slot in [lo, hi) whose key >= target, hi when none. */
static inline size_t pb_index_search(const uint8_t *buf, size_t lo, size_t hi, int64_t target,
                                     enum pb_index_kind kind)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pb_index_key(buf, mid, kind) < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First slot whose key >= target. The warm tail is [hot, entries): when the target
 * lies beyond the first warm key only warm pages are touched. */
static inline size_t pb_index_lower_bound(const uint8_t *buf, size_t entries, int64_t target,
                                          enum pb_index_kind kind)
{
    size_t entry_size = kind == PB_INDEX_OFFSET || kind == PB_INDEX_OFFSET_BY_POSITION
                        ? PB_OFFSET_ENTRY_SIZE : PB_TIME_ENTRY_SIZE;
    size_t warm = PB_INDEX_WARM_BYTES / entry_size;
    size_t hot;

    if (entries == 0)
        return 0;
    hot = entries > warm + 1 ? entries - 1 - warm : 0;
    if (pb_index_key(buf, hot, kind) < target)
        return pb_index_search(buf, hot + 1, entries, target, kind);
    return pb_index_search(buf, 0, hot, target, kind);
}

static inline ptrdiff_t pb_index_floor(const uint8_t *buf, size_t entries, int64_t target,
                                       enum pb_index_kind kind)
{
    size_t above;
    int64_t key;

    /* floor = the slot before the first key > target, i.e. >= target + 1 */
    above = target == INT64_MAX ? entries : pb_index_lower_bound(buf, entries, target + 1, kind);
    if (above == 0)
        return -1;
    key = pb_index_key(buf, above - 1, kind);
    /* Valid indexes have strictly increasing keys, so one compare settles it; a
     * repeated key (a damaged index) costs a second search for its first slot. */
    if (above == 1 || pb_index_key(buf, above - 2, kind) < key)
        return (ptrdiff_t)(above - 1);
    return (ptrdiff_t)pb_index_lower_bound(buf, above - 1, key, kind);
}

ptrdiff_t pb_offset_index_floor(const uint8_t *buf, size_t entries, int64_t target)
{
    return pb_index_floor(buf, entries, target, PB_INDEX_OFFSET);
}

ptrdiff_t pb_time_index_floor(const uint8_t *buf, size_t entries, int64_t target)
{
    return pb_index_floor(buf, entries, target, PB_INDEX_TIME);
}

ptrdiff_t pb_offset_index_position_floor(const uint8_t *buf, size_t entries, int64_t target)
{
    return pb_index_floor(buf, entries, target, PB_INDEX_OFFSET_BY_POSITION);
}

size_t pb_offset_index_ceiling(const uint8_t *buf, size_t entries, int64_t target)
{
    return pb_index_lower_bound(buf, entries, target, PB_INDEX_OFFSET);
}

size_t pb_time_index_ceiling(const uint8_t *buf, size_t entries, int64_t target)
{
    return pb_index_lower_bound(buf, entries, target, PB_INDEX_TIME);
}

size_t pb_time_index_offset_ceiling(const uint8_t *buf, size_t entries, int64_t target)
{
    return pb_index_lower_bound(buf, entries, target, PB_INDEX_TIME_BY_OFFSET);
}
