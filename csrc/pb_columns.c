#include "pb_columns.h"

#include <stdlib.h>
#include <string.h>

#include "pb_common.h"

/* Capacities double, so a fetch of n records costs O(log n) reallocations. */
static int grow(void **p, size_t elem, int64_t *cap, int64_t need) {
    if (PB_LIKELY(need <= *cap)) return 0;
    int64_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int binary_init(pb_binary_builder *b) {
    memset(b, 0, sizeof(*b));
    b->offsets = calloc(1, sizeof(int32_t));
    return b->offsets ? 0 : -1;
}

static void binary_free(pb_binary_builder *b) {
    free(b->offsets);
    free(b->data);
    free(b->validity);
    memset(b, 0, sizeof(*b));
}

static int binary_append(pb_binary_builder *b, const uint8_t *value, int32_t len) {
    int64_t i = b->length;
    if (b->capacity < i + 2) {
        /* offsets has length + 1 entries; validity one bit per entry. */
        int64_t old_cap = b->capacity, cap = b->capacity;
        if (grow((void **)&b->offsets, sizeof(int32_t), &cap, i + 2)) return -1;
        int64_t vcap = (old_cap + 7) / 8;
        uint8_t *v = realloc(b->validity, (size_t)((cap + 7) / 8));
        if (!v) return -1;
        memset(v + vcap, 0, (size_t)((cap + 7) / 8 - vcap));
        b->validity = v;
        b->capacity = cap;
    }
    if (len < 0) {
        b->null_count++;
        b->validity[i >> 3] &= (uint8_t)~(1u << (i & 7));
    } else {
        size_t need = b->data_len + (size_t)len;
        if (need > INT32_MAX) return PB_ERR_RECORD_SIZE;   /* Arrow int32 offsets */
        if (need > b->data_cap) {
            size_t cap = b->data_cap ? b->data_cap : 65536;
            while (cap < need) cap *= 2;
            uint8_t *d = realloc(b->data, cap);
            if (!d) return -1;
            b->data = d;
            b->data_cap = cap;
        }
        memcpy(b->data + b->data_len, value, (size_t)len);
        b->data_len = need;
        b->validity[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    b->offsets[i + 1] = (int32_t)b->data_len;
    b->length = i + 1;
    return 0;
}

int pb_columns_init(pb_record_columns *c) {
    memset(c, 0, sizeof(*c));
    c->header_offsets = calloc(1, sizeof(int32_t));
    if (!c->header_offsets || binary_init(&c->key) || binary_init(&c->value) ||
        binary_init(&c->header_key) || binary_init(&c->header_value)) {
        pb_columns_free(c);
        return -1;
    }
    return 0;
}

void pb_columns_free(pb_record_columns *c) {
    free(c->offset);
    free(c->timestamp);
    free(c->timestamp_type);
    free(c->header_offsets);
    binary_free(&c->key);
    binary_free(&c->value);
    binary_free(&c->header_key);
    binary_free(&c->header_value);
    memset(c, 0, sizeof(*c));
}

/* Undo a partly appended batch so a damaged one leaves no rows behind. */
static void truncate_binary(pb_binary_builder *b, int64_t length) {
    b->data_len = (size_t)b->offsets[length];
    b->null_count = 0;
    for (int64_t i = 0; i < length; i++)
        if (!(b->validity[i >> 3] & (1u << (i & 7)))) b->null_count++;
    b->length = length;
}

static void rollback(pb_record_columns *c, int64_t length) {
    int64_t headers = c->header_offsets[length];
    c->length = length;
    truncate_binary(&c->key, length);
    truncate_binary(&c->value, length);
    truncate_binary(&c->header_key, headers);
    truncate_binary(&c->header_value, headers);
}

int pb_columns_add_records(pb_record_columns *c, const pb_batch_header *h,
                           const uint8_t *records, size_t len, int64_t min_offset,
                           int64_t max_offset) {
    const int64_t start_length = c->length;
    const int log_append = (h->attributes & PB_ATTR_LOG_APPEND_TIME) != 0;
    const uint8_t *p = records, *end = records + len;
    int rc = PB_OK;
    for (int32_t i = 0; i < h->records_count; i++) {
        pb_record r;
        rc = pb_record_parse(&p, end, &r);
        if (rc != PB_OK) goto fail;
        int64_t offset = h->base_offset + r.offset_delta;
        if (offset < min_offset || offset >= max_offset) continue;
        int64_t n = c->length, cap = c->capacity;
        if (n + 2 > cap) {
            int64_t c1 = cap, c2 = cap, c3 = cap, c4 = cap;
            if (grow((void **)&c->offset, sizeof(int64_t), &c1, n + 2) ||
                grow((void **)&c->timestamp, sizeof(int64_t), &c2, n + 2) ||
                grow((void **)&c->timestamp_type, sizeof(int32_t), &c3, n + 2) ||
                grow((void **)&c->header_offsets, sizeof(int32_t), &c4, n + 2)) {
                rc = -1;
                goto fail;
            }
            c->capacity = c1;
        }
        c->offset[n] = offset;
        c->timestamp[n] = log_append ? h->max_timestamp : h->first_timestamp + r.timestamp_delta;
        c->timestamp_type[n] = log_append;
        if ((rc = binary_append(&c->key, r.key, r.key_len)) ||
            (rc = binary_append(&c->value, r.value, r.value_len)))
            goto fail;
        const uint8_t *hp = r.headers;
        for (int32_t k = 0; k < r.header_count; k++) {
            const uint8_t *hkey, *hval;
            int32_t hkey_len, hval_len;
            if ((rc = pb_header_next(&hp, r.headers_end, &hkey, &hkey_len, &hval, &hval_len)) ||
                (rc = binary_append(&c->header_key, hkey, hkey_len)) ||
                (rc = binary_append(&c->header_value, hval, hval_len)))
                goto fail;
        }
        if (c->header_key.length > INT32_MAX) { rc = PB_ERR_RECORD_SIZE; goto fail; }
        c->header_offsets[n + 1] = (int32_t)c->header_key.length;
        c->length = n + 1;
    }
    if (p != end) { rc = PB_ERR_TRAILING; goto fail; }
    return PB_OK;
fail:
    rollback(c, start_length);
    return rc;
}
