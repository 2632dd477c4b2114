/* The load generator of bench/transactions.py: one librdkafka producer at full speed,
 * plain (idempotent) or transactional, that times its own measured window.
 *
 *   transactions_producer -b BOOTSTRAP -t TOPIC [-s RECORD_BYTES] [-w WARMUP_S]
 *       [-d DURATION_S] [-i COMMIT_MS] [-X key=value]...
 *
 * Records are RECORD_BYTES of random bytes without a key, to the default partitioner
 * (RD_KAFKA_PARTITION_UA), handed over without a copy (a static pool), so the client
 * spends its CPU on what every client must do: batching, requests, acknowledgements.
 * acks=all and enable.idempotence=true always; -X sets any other librdkafka property.
 *
 * -i COMMIT_MS > 0 is the transactional mode (-X transactional.id=... is needed):
 * begin, produce for COMMIT_MS, commit (which waits for every record of the transaction
 * to be acknowledged), begin again. The window runs from the first commit that completes
 * after WARMUP_S to the first that completes DURATION_S later; its records are those of
 * the transactions committed in it, so each counted record is committed.
 *
 * Plain: the window is [WARMUP_S, WARMUP_S + DURATION_S] after the start; its records are
 * those whose acknowledgement was served in it. Then everything left is flushed.
 *
 * Both windows measure the steady state: nothing in flight is counted at either end.
 * The result is one JSON object on stdout; times are CLOCK_MONOTONIC seconds (Python's
 * time.monotonic() on Linux), so the caller can read the broker's CPU over the window.
 * Exit status 1 when the producer failed (the reason on stderr), 2 on bad arguments.
 */
#define _POSIX_C_SOURCE 200809L
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define POOL_BYTES (1 << 20)
#define POLL_EVERY 1024           /* produce calls between serving delivery reports */
#define TIMEOUT_MS 60000

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);   /* every thread: the application's and librdkafka's */
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
        + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "transactions_producer: %s: %s\n", what, why);
    exit(1);
}

static void die_error(const char *what, rd_kafka_error_t *error) {
    die(what, rd_kafka_error_string(error));
}

/* Delivery reports: plain mode counts those served inside its window. */
static struct {
    double window_start, window_end;   /* 0: no window (transactional mode) */
    long long acked, failed, acked_in_window;
    char first_error[512];
} reports;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (!reports.failed++)
            snprintf(reports.first_error, sizeof reports.first_error, "%s",
                     rd_kafka_err2str(m->err));
        return;
    }
    reports.acked++;
    if (reports.window_end > 0) {
        double t = now_s();
        if (t > reports.window_start && t <= reports.window_end)
            reports.acked_in_window++;
    }
}

static void set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char why[512];
    if (rd_kafka_conf_set(conf, key, value, why, sizeof why) != RD_KAFKA_CONF_OK)
        die(key, why);
}

struct producer {
    rd_kafka_t *rk;
    rd_kafka_topic_t *topic;
    const char *pool;
    size_t record_bytes;
    long long produced;
};

static void produce_one(struct producer *p) {
    size_t at = (size_t)(p->produced * 4099) % (POOL_BYTES - p->record_bytes);
    while (rd_kafka_produce(p->topic, RD_KAFKA_PARTITION_UA, 0, (void *)(p->pool + at),
                            p->record_bytes, NULL, 0, NULL) == -1) {
        rd_kafka_resp_err_t err = rd_kafka_last_error();
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            die("produce", rd_kafka_err2str(err));
        rd_kafka_poll(p->rk, 1);   /* the local queue is full: wait for acknowledgements */
    }
    if (++p->produced % POLL_EVERY == 0)
        rd_kafka_poll(p->rk, 0);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *bootstrap = NULL, *topic_name = NULL;
    double warmup_s = 5, duration_s = 15;
    long record_bytes = 1024, commit_ms = 0;
    char why[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "acks", "all");
    set(conf, "enable.idempotence", "true");
    int opt;
    while ((opt = getopt(argc, argv, "b:t:s:w:d:i:X:")) != -1) {
        char *eq;
        switch (opt) {
        case 'b': bootstrap = optarg; break;
        case 't': topic_name = optarg; break;
        case 's': record_bytes = atol(optarg); break;
        case 'w': warmup_s = atof(optarg); break;
        case 'd': duration_s = atof(optarg); break;
        case 'i': commit_ms = atol(optarg); break;
        case 'X':
            if (!(eq = strchr(optarg, '=')))
                die("-X", "key=value expected");
            *eq = '\0';
            set(conf, optarg, eq + 1);
            break;
        default: return 2;
        }
    }
    if (!bootstrap || !topic_name || record_bytes <= 0 || record_bytes > POOL_BYTES / 2
            || duration_s <= 0 || warmup_s < 0 || commit_ms < 0) {
        fprintf(stderr, "usage: %s -b BOOTSTRAP -t TOPIC [-s RECORD_BYTES] [-w WARMUP_S] "
                        "[-d DURATION_S] [-i COMMIT_MS] [-X key=value]...\n", argv[0]);
        return 2;
    }
    set(conf, "bootstrap.servers", bootstrap);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);

    static char pool[POOL_BYTES];
    unsigned int seed = 13;
    for (size_t i = 0; i < POOL_BYTES; i++)
        pool[i] = (char)(rand_r(&seed) >> 7);

    struct producer p = {0};
    p.pool = pool;
    p.record_bytes = (size_t)record_bytes;
    if (!(p.rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why)))
        die("rd_kafka_new", why);
    if (!(p.topic = rd_kafka_topic_new(p.rk, topic_name, NULL)))
        die("rd_kafka_topic_new", rd_kafka_err2str(rd_kafka_last_error()));

    int transactional = commit_ms > 0;
    rd_kafka_error_t *error;
    if (transactional && (error = rd_kafka_init_transactions(p.rk, TIMEOUT_MS)))
        die_error("init_transactions", error);

    double started = now_s(), window_start = 0, window_end = 0, cpu_start = 0, cpu_end = 0;
    long long window_records = 0, transactions = 0;
    size_t commits_cap = (size_t)(duration_s * 1000 / (commit_ms ? commit_ms : 1)) + 16;
    double *commit_ms_taken = transactional ? calloc(commits_cap, sizeof(double)) : NULL;
    if (transactional) {
        for (;;) {
            if ((error = rd_kafka_begin_transaction(p.rk)))
                die_error("begin_transaction", error);
            long long first = p.produced;
            double commit_at = now_s() + commit_ms / 1e3;
            do {
                for (int i = 0; i < 64; i++)
                    produce_one(&p);
            } while (now_s() < commit_at);
            double committing = now_s();
            if ((error = rd_kafka_commit_transaction(p.rk, TIMEOUT_MS)))
                die_error("commit_transaction", error);
            double committed = now_s();
            if (window_start == 0) {
                if (committed >= started + warmup_s) {
                    window_start = committed;
                    cpu_start = cpu_s();
                }
                continue;
            }
            window_records += p.produced - first;
            if ((size_t)transactions < commits_cap)
                commit_ms_taken[transactions] = (committed - committing) * 1e3;
            transactions++;
            if (committed >= window_start + duration_s) {
                window_end = committed;
                cpu_end = cpu_s();
                break;
            }
        }
    } else {
        reports.window_start = window_start = started + warmup_s;
        reports.window_end = window_end = window_start + duration_s;
        while (now_s() < window_start)
            produce_one(&p);
        cpu_start = cpu_s();
        while (now_s() < window_end)
            produce_one(&p);
        cpu_end = cpu_s();
        rd_kafka_poll(p.rk, 0);   /* reports that arrived up to the window's end */
        window_records = reports.acked_in_window;
    }
    rd_kafka_flush(p.rk, TIMEOUT_MS);
    int in_flight = rd_kafka_outq_len(p.rk);
    if (reports.failed || in_flight)
        fprintf(stderr, "transactions_producer: %lld records failed (first: %s), %d in flight\n",
                reports.failed, reports.first_error[0] ? reports.first_error : "-", in_flight);

    size_t counted = (size_t)transactions < commits_cap ? (size_t)transactions : commits_cap;
    double commit_p50 = 0, commit_max = 0;
    if (counted) {
        qsort(commit_ms_taken, counted, sizeof(double), by_value);
        commit_p50 = commit_ms_taken[counted / 2];
        commit_max = commit_ms_taken[counted - 1];
    }
    double seconds = window_end - window_start;
    printf("{\"mode\": \"%s\", \"librdkafka\": \"%s\", \"records\": %lld, \"bytes\": %lld, "
           "\"seconds\": %.6f, \"records_per_s\": %.1f, \"mb_per_s\": %.3f, "
           "\"window_start\": %.6f, \"window_end\": %.6f, \"client_cpu_s\": %.3f, "
           "\"produced\": %lld, \"acked\": %lld, \"failed\": %lld, \"in_flight\": %d, "
           "\"transactions\": %lld, \"commit_ms_p50\": %.3f, \"commit_ms_max\": %.3f}\n",
           transactional ? "transactional" : "plain", rd_kafka_version_str(), window_records,
           window_records * record_bytes, seconds, window_records / seconds,
           window_records * record_bytes / seconds / 1e6, window_start, window_end,
           cpu_end - cpu_start, p.produced, reports.acked, reports.failed, in_flight,
           transactions, commit_p50, commit_max);
    free(commit_ms_taken);
    rd_kafka_topic_destroy(p.topic);
    rd_kafka_destroy(p.rk);
    return reports.failed || in_flight ? 1 : 0;
}
