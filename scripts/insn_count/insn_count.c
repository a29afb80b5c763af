/*
 * insn_count: qemu TCG plugin counting executed guest instructions whose
 * address lies in named half-open ranges [lo, hi).
 *
 *   qemu-aarch64 -plugin insn_count.so,range=NAME:LO:HI[,range=...][,out=PATH] prog
 *
 * LO/HI are parsed with strtoull base 0 (0x... hex or decimal). NAME is
 * everything before the last two colons, so it may itself contain colons.
 * At exit one line "NAME COUNT" per range is written, in argument order, to
 * PATH if given (keeps the guest's own output separate), else to stderr
 * (written directly, so it does not depend on "-d plugin").
 *
 * Written against qemu-plugin.h of qemu 7.2 (QEMU_PLUGIN_VERSION 1).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

struct range {
    char *name;
    uint64_t lo, hi;
    /*
     * Bumped by an inline TCG add, not an atomic one: qemu 7.2 inline ops are
     * plain read-modify-write on this memory, shared by all vCPUs. Exact for
     * single-threaded guests only (the kernels under test are run with
     * OMP_NUM_THREADS=1); a multi-threaded guest would lose increments.
     */
    uint64_t count;
};

static struct range *ranges;
static size_t n_ranges;
static char *out_path;

/*
 * Decided once per translated instruction, so the per-execution cost is one
 * inline add and only for instructions inside a range; code outside every
 * range runs uninstrumented. The TB cache keeps the instrumentation, and
 * inline ops are emitted before each instruction, so a block left early
 * (exception, exit syscall) still counts exactly the instructions executed.
 */
static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        /* Overlapping ranges are each counted; few ranges, so a scan is fine. */
        for (size_t r = 0; r < n_ranges; r++) {
            if (pc >= ranges[r].lo && pc < ranges[r].hi) {
                qemu_plugin_register_vcpu_insn_exec_inline(
                    insn, QEMU_PLUGIN_INLINE_ADD_U64, &ranges[r].count, 1);
            }
        }
    }
}

static void report_at_exit(qemu_plugin_id_t id, void *p)
{
    (void)id; (void)p;
    FILE *f = stderr;
    if (out_path && !(f = fopen(out_path, "w"))) {
        perror(out_path);   /* still report, rather than lose the counts */
        f = stderr;
    }
    for (size_t r = 0; r < n_ranges; r++) {
        fprintf(f, "%s %" PRIu64 "\n", ranges[r].name, ranges[r].count);
    }
    if (f != stderr) {
        fclose(f);
    }
}

/* NAME:LO:HI, split at the last two colons. */
static int parse_range(const char *spec)
{
    const char *c2 = strrchr(spec, ':');
    const char *c1 = c2 ? c2 : spec;
    while (c1 > spec && *--c1 != ':') {
    }
    if (!c2 || c1 == c2 || *c1 != ':' || c1 == spec) {
        return -1;
    }
    char *end;
    uint64_t lo = strtoull(c1 + 1, &end, 0);
    if (end != c2 || c1 + 1 == c2) {
        return -1;
    }
    uint64_t hi = strtoull(c2 + 1, &end, 0);
    if (*end || c2[1] == '\0' || hi < lo) {
        return -1;
    }
    struct range *nr = realloc(ranges, (n_ranges + 1) * sizeof(*ranges));
    if (!nr) {
        return -1;
    }
    ranges = nr;
    ranges[n_ranges] = (struct range){ strndup(spec, c1 - spec), lo, hi, 0 };
    n_ranges++;
    return 0;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                           const qemu_info_t *info,
                                           int argc, char **argv)
{
    (void)info;
    /* qemu 7.2 hands each "key=value" after the .so path as one argv entry. */
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "range=", 6) == 0) {
            if (parse_range(argv[i] + 6) != 0) {
                fprintf(stderr, "insn_count: bad range '%s' (want NAME:LO:HI, LO<=HI)\n",
                        argv[i] + 6);
                return -1;
            }
        } else if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = strdup(argv[i] + 4);
        } else {
            fprintf(stderr, "insn_count: unknown argument '%s'\n", argv[i]);
            return -1;
        }
    }
    if (n_ranges == 0) {
        fprintf(stderr, "insn_count: no range=NAME:LO:HI given\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
    qemu_plugin_register_atexit_cb(id, report_at_exit, NULL);
    return 0;
}
