/*
 * Fake libnvidia-ml.so.1 for kubegpu.fleet tests and the GPU lab.
 * Copyright: kubegpu.fleet contributors
 * GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
 *
 * Implements the part of the NVML C ABI that nvidia-ml-py (pynvml), the fake nvidia-smi and
 * kubegpu.fleet use, driven by a JSON scenario (see README.md). The failure mechanics follow
 * the real driver stack rather than canned answers:
 *
 *  - nvmlInit compares the library's own version with the loaded kernel module's version
 *    (kernel_module_version, or an "NVRM version:" line in kernel_module_version_file, the
 *    procfs driver/nvidia/version file). A difference gives NVML_ERROR_LIB_RM_VERSION_MISMATCH,
 *    no kernel module gives NVML_ERROR_DRIVER_NOT_LOADED.
 *  - With the library's version in 570.124.06..570.158.01 and a MIG-mixed node, nvmlInit never
 *    returns (the R570 NVML regression), unless emulate_r570_mig_hang is false.
 *  - "hang" makes a chosen call never return; with "freeze_cgroup" the calling process puts
 *    itself into a cgroup v1 freezer cgroup and freezes it, so it ignores SIGKILL until
 *    thawed, like a task in uninterruptible sleep.
 *  - A lost GPU answers NVML_ERROR_GPU_IS_LOST to every call, any call can be given an error.
 *
 * Thread safe: one mutex guards the state, and a hung call keeps holding it (as the real
 * library's RM lock does), so every other NVML caller in the process blocks too.
 */
#define _GNU_SOURCE
#include "nvml_fake.h"
#include "fake_json.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef FAKE_NVML_VERSION
#define FAKE_NVML_VERSION "570.172.08"
#endif

#define API __attribute__((visibility("default")))

#define FAKE_CONFIG_ENV "KUBEGPU_FAKE_NVML_CONFIG"
#define FAKE_CONFIG_DEFAULT "/etc/kubegpu-lab/nvml.json"
#define FAKE_MAX_GPUS 32
#define FAKE_MAX_MIG 8
#define FAKE_MAX_ERRS 24
#define FAKE_DEV_MAGIC 0x4b474e56u
#define FAKE_MAX_CONFIG (4 << 20)
#define FAKE_MAX_NVLINKS 18
#define FAKE_NVLINK_COUNTERS 5
#define FAKE_MAX_PROCS 16
#define FAKE_MAX_GROUPS 8
#define FAKE_RESET_SUFFIX ".reset"

struct fake_err {
    char fn[64];
    int code;
};

struct nvmlDevice_st {
    unsigned magic;
    int is_mig;
    unsigned index; /* GPU index, or MIG device index on its parent */
    struct nvmlDevice_st *parent;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    char profile[32];
    unsigned arch;
    int cc_major, cc_minor;
    unsigned domain, bus, device, pci_device_id, pci_subsys_id;
    unsigned minor;
    unsigned long long mem_total, mem_reserved, mem_used;
    int mig_supported, mig_current, mig_pending;
    int virt_mode;                        /* nvmlGpuVirtualizationMode_t; "virtualization_mode" */
    unsigned max_mig;
    int lost;
    unsigned gi, ci;
    nvmlDeviceAttributes_t attrs;
    struct fake_err errs[FAKE_MAX_ERRS];
    int nerrs;
    unsigned nmig;
    /* health state ("health" in the scenario) */
    int health_supported;                 /* row remapper / ECC present (0: NOT_SUPPORTED) */
    unsigned remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned retired_sbe, retired_dbe, retired_pending;
    unsigned long long ecc_unc_volatile, ecc_unc_aggregate, ecc_cor_volatile, ecc_cor_aggregate;
    unsigned long long sram_vol_parity, sram_vol_secded, sram_agg_parity, sram_agg_secded;
    unsigned sram_threshold;
    int recovery_action;                  /* nvmlGpuRecoveryAction_t, -1: field not supported */
    int reset_required, drain_reset;      /* deprecated fields: -1 answers NVML_ERROR_DEPRECATED */
    int repair_supported;
    unsigned channel_repair, tpc_repair, unrepairable;
    int hist_supported;
    unsigned hist[5];                     /* max, high, partial, low, none */
    int pcie_supported;
    unsigned pcie_gen, pcie_max_gen, pcie_width, pcie_max_width, pcie_replay, pcie_rollover;
    unsigned long long clock_reasons;
    int fabric_state;                     /* NVML_GPU_FABRIC_STATE_*, 0: not supported */
    int fabric_status;
    /* processes and GPU reset (kubegpu_fake_reset) */
    unsigned nprocs;
    unsigned procs[FAKE_MAX_PROCS];
    int reset_refuse;                     /* NVML error a reset of this GPU is refused with */
    int reset_loses;                      /* a reset that leaves the GPU lost (failed reset) */
    int was_reset;                        /* reset since the scenario was written */
    unsigned nvlinks;                     /* number of NVLinks (0: NOT_SUPPORTED) */
    unsigned nvlink_active[FAKE_MAX_NVLINKS];
    unsigned long long nvlink_err[FAKE_MAX_NVLINKS][FAKE_NVLINK_COUNTERS];
};

static struct {
    pthread_mutex_t lock;
    int refcount;
    char version[64];
    char nvml_version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    int cuda;
    unsigned ngpus;
    struct nvmlDevice_st gpus[FAKE_MAX_GPUS];
    struct nvmlDevice_st migs[FAKE_MAX_GPUS][FAKE_MAX_MIG];
    struct fake_err errs[FAKE_MAX_ERRS];
    int nerrs;
    int hang_set;
    char hang_fn[64];
    long hang_gpu;
    char freeze_cg[512];
    char path[512];                       /* the scenario file (its reset record is path.reset) */
    unsigned ngroups;                     /* "reset_groups": GPUs that must be reset together */
    unsigned group_n[FAKE_MAX_GROUPS];
    unsigned group_gpu[FAKE_MAX_GROUPS][FAKE_MAX_GPUS];
} G = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---------------------------------------------------------------- error names and strings */

static const struct {
    int code;
    const char *name;
    const char *text;
} ERRORS[] = {
    { NVML_SUCCESS, "NVML_SUCCESS", "Success" },
    { NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED", "Uninitialized" },
    { NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT", "Invalid Argument" },
    { NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED", "Not Supported" },
    { NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION", "Insufficient Permissions" },
    { NVML_ERROR_ALREADY_INITIALIZED, "NVML_ERROR_ALREADY_INITIALIZED", "Already Initialized" },
    { NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND", "Not Found" },
    { NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE", "Insufficient Size" },
    { NVML_ERROR_INSUFFICIENT_POWER, "NVML_ERROR_INSUFFICIENT_POWER", "Insufficient External Power" },
    { NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded" },
    { NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT", "Timeout" },
    { NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE", "Interrupt Request Issue" },
    { NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML Shared Library Not Found" },
    { NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND", "Function Not Found" },
    { NVML_ERROR_CORRUPTED_INFOROM, "NVML_ERROR_CORRUPTED_INFOROM", "Corrupted infoROM" },
    { NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST", "GPU is lost" },
    { NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED", "GPU requires restart" },
    { NVML_ERROR_OPERATING_SYSTEM, "NVML_ERROR_OPERATING_SYSTEM", "GPU access blocked by the operating system" },
    { NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "Driver/library version mismatch" },
    { NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE", "In use by another client" },
    { NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY", "Insufficient Memory" },
    { NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA", "No data" },
    { NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", "vGPU ECC Not Supported" },
    { NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES", "Insufficient resources" },
    { NVML_ERROR_FREQ_NOT_SUPPORTED, "NVML_ERROR_FREQ_NOT_SUPPORTED", "Frequency not supported" },
    { NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "Argument version mismatch" },
    { NVML_ERROR_DEPRECATED, "NVML_ERROR_DEPRECATED", "Deprecated" },
    { NVML_ERROR_NOT_READY, "NVML_ERROR_NOT_READY", "Not ready" },
    { NVML_ERROR_GPU_NOT_FOUND, "NVML_ERROR_GPU_NOT_FOUND", "GPU not found" },
    { NVML_ERROR_INVALID_STATE, "NVML_ERROR_INVALID_STATE", "Invalid state" },
    { NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED", "Reset type not supported" },
    { NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN", "Unknown Error" },
};

static void fake_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fake_log(const char *fmt, ...)
{
    va_list ap;
    if (!getenv("KUBEGPU_FAKE_NVML_DEBUG"))
        return;
    va_start(ap, fmt);
    fprintf(stderr, "fake-nvml[%d]: ", (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Error code from "NVML_ERROR_GPU_IS_LOST", "GPU_IS_LOST" or a number; -1 when unknown. */
static const char *err_name(int code)
{
    for (size_t i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++)
        if (ERRORS[i].code == code)
            return ERRORS[i].name;
    return "NVML_ERROR_UNKNOWN";
}

static int error_code(const fj_value *v)
{
    if (!v)
        return -1;
    if (v->type == FJ_NUM)
        return (int)v->num;
    if (v->type != FJ_STR)
        return -1;
    for (size_t i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++) {
        const char *n = ERRORS[i].name;
        if (strcasecmp(v->str, n) == 0 ||
            (strncmp(n, "NVML_ERROR_", 11) == 0 && strcasecmp(v->str, n + 11) == 0))
            return ERRORS[i].code;
    }
    return -1;
}

/* Function base name: strip a _vN suffix; nvmlInitWithFlags counts as nvmlInit. */
static void base_name(const char *fn, char *out, size_t len)
{
    size_t n;
    snprintf(out, len, "%s", fn);
    if (strcmp(out, "nvmlInitWithFlags") == 0) {
        snprintf(out, len, "nvmlInit");
        return;
    }
    n = strlen(out);
    while (n > 0 && isdigit((unsigned char)out[n - 1]))
        n--;
    if (n >= 2 && n < strlen(out) && out[n - 1] == 'v' && out[n - 2] == '_')
        out[n - 2] = '\0';
}

/* --------------------------------------------------------------------------- hanging */

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ssize_t n;
    if (fd < 0)
        return -1;
    n = write(fd, text, strlen(text));
    close(fd);
    return n < 0 ? -1 : 0;
}

/* Move this process into a cgroup v1 freezer cgroup and freeze it. The process stops on its
 * way back to user space and, like a task in D state, does not die on SIGKILL until thawed. */
static void freeze_self(const char *cg)
{
    char path[600], pid[32];
    if (mkdir(cg, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "fake-nvml: cannot create freezer cgroup %s: %s\n", cg, strerror(errno));
        return;
    }
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
    if (write_file(path, pid) < 0) {
        fprintf(stderr, "fake-nvml: cannot join %s: %s\n", path, strerror(errno));
        return;
    }
    snprintf(path, sizeof(path), "%s/freezer.state", cg);
    if (write_file(path, "FROZEN") < 0)
        fprintf(stderr, "fake-nvml: cannot freeze %s: %s\n", path, strerror(errno));
}

static void hang_forever(const char *why, const char *cg) __attribute__((noreturn));

static void hang_forever(const char *why, const char *cg)
{
    fake_log("hanging in %s%s%s", why, cg && *cg ? ", freezing cgroup " : "", cg ? cg : "");
    if (cg && *cg)
        freeze_self(cg);
    for (;;)
        pause();
}

static void maybe_hang(const char *fn, long gpu)
{
    char base[64];
    if (!G.hang_set)
        return;
    base_name(fn, base, sizeof(base));
    if (strcmp(base, G.hang_fn) != 0)
        return;
    if (G.hang_gpu >= 0 && gpu != G.hang_gpu)
        return;
    hang_forever(fn, G.freeze_cg);
}

/* ------------------------------------------------------------------- error injection */

static int add_errors(struct fake_err *errs, int *nerrs, const fj_value *map)
{
    if (!map || map->type != FJ_OBJ)
        return 0;
    for (size_t i = 0; i < map->n && *nerrs < FAKE_MAX_ERRS; i++) {
        int code = error_code(map->items[i]);
        if (code < 0) {
            fprintf(stderr, "fake-nvml: unknown NVML error for %s in scenario\n", map->keys[i]);
            return -1;
        }
        base_name(map->keys[i], errs[*nerrs].fn, sizeof(errs[*nerrs].fn));
        errs[*nerrs].code = code;
        (*nerrs)++;
    }
    return 0;
}

static int find_error(const struct fake_err *errs, int nerrs, const char *base)
{
    for (int i = 0; i < nerrs; i++)
        if (strcmp(errs[i].fn, base) == 0)
            return errs[i].code;
    return NVML_SUCCESS;
}

static int injected(const char *fn, const struct nvmlDevice_st *d)
{
    char base[64];
    int rc;
    base_name(fn, base, sizeof(base));
    if (d) {
        if ((rc = find_error(d->errs, d->nerrs, base)) != NVML_SUCCESS)
            return rc;
        if (d->is_mig && (rc = find_error(d->parent->errs, d->parent->nerrs, base)) != NVML_SUCCESS)
            return rc;
    }
    return find_error(G.errs, G.nerrs, base);
}

/* ------------------------------------------------------------------------ versions */

static int version_parts(const char *v, long out[3])
{
    int n = 0;
    out[0] = out[1] = out[2] = 0;
    while (*v && n < 3) {
        char *end;
        if (!isdigit((unsigned char)*v))
            return -1;
        out[n++] = strtol(v, &end, 10);
        v = end;
        if (*v == '.')
            v++;
        else
            break;
    }
    return (*v == '\0' && n >= 2) ? 0 : -1;
}

static int version_cmp(const long a[3], const long b[3])
{
    for (int i = 0; i < 3; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* Kernel-module version from an "NVRM version:" line, e.g.
 * "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul  8 ..." or
 * "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build ...". */
static int parse_nvrm(const char *text, char *out, size_t len)
{
    const char *line = text;
    while (line && *line) {
        const char *eol = strchr(line, '\n');
        if (strncmp(line, "NVRM version:", 13) == 0) {
            const char *p = strstr(line, "Kernel Module");
            if (p && (!eol || p < eol)) {
                size_t n = 0;
                p += 13;
                while (*p == ' ' || *p == '\t')
                    p++;
                if (strncmp(p, "for ", 4) == 0) {
                    p += 4;
                    while (*p && !isspace((unsigned char)*p))
                        p++;
                    while (*p == ' ' || *p == '\t')
                        p++;
                }
                while ((isdigit((unsigned char)p[n]) || p[n] == '.') && n + 1 < len) {
                    out[n] = p[n];
                    n++;
                }
                out[n] = '\0';
                return n ? 0 : -1;
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return -1;
}

static char *read_all(const char *path, size_t limit)
{
    FILE *f = fopen(path, "re");
    char *buf;
    size_t n;
    if (!f)
        return NULL;
    buf = malloc(limit + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    n = fread(buf, 1, limit, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int default_cuda(const char *version)
{
    long v[3];
    if (version_parts(version, v) < 0)
        return 12080;
    if (v[0] >= 580) return 13000;
    if (v[0] >= 575) return 12090;
    if (v[0] >= 570) return 12080;
    if (v[0] >= 565) return 12070;
    if (v[0] >= 560) return 12060;
    if (v[0] >= 555) return 12050;
    if (v[0] >= 550) return 12040;
    if (v[0] >= 545) return 12030;
    if (v[0] >= 535) return 12020;
    if (v[0] >= 530) return 12010;
    if (v[0] >= 525) return 12000;
    return 11080;
}

/* ---------------------------------------------------------------------- scenario */

static unsigned long long mix(unsigned long long x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static void make_uuid(char *out, size_t len, const char *prefix, unsigned long long seed)
{
    unsigned long long a = mix(seed), b = mix(seed ^ 0x9e3779b97f4a7c15ULL);
    snprintf(out, len, "%s-%08llx-%04llx-%04llx-%04llx-%012llx", prefix, a >> 32,
             (a >> 16) & 0xffff, a & 0xffff, b >> 48, b & 0xffffffffffffULL);
}

static unsigned arch_code(const char *name)
{
    static const struct { const char *n; unsigned c; } A[] = {
        { "Kepler", NVML_DEVICE_ARCH_KEPLER }, { "Maxwell", NVML_DEVICE_ARCH_MAXWELL },
        { "Pascal", NVML_DEVICE_ARCH_PASCAL }, { "Volta", NVML_DEVICE_ARCH_VOLTA },
        { "Turing", NVML_DEVICE_ARCH_TURING }, { "Ampere", NVML_DEVICE_ARCH_AMPERE },
        { "Ada", NVML_DEVICE_ARCH_ADA }, { "Ada Lovelace", NVML_DEVICE_ARCH_ADA },
        { "Hopper", NVML_DEVICE_ARCH_HOPPER }, { "Blackwell", NVML_DEVICE_ARCH_BLACKWELL },
    };
    for (size_t i = 0; i < sizeof(A) / sizeof(A[0]); i++)
        if (strcasecmp(name, A[i].n) == 0)
            return A[i].c;
    return NVML_DEVICE_ARCH_UNKNOWN;
}

static int parse_busid(const char *s, unsigned *dom, unsigned *bus, unsigned *dev)
{
    unsigned fn;
    if (sscanf(s, "%x:%x:%x.%x", dom, bus, dev, &fn) == 4)
        return 0;
    *dom = 0;
    return sscanf(s, "%x:%x.%x", bus, dev, &fn) == 3 ? 0 : -1;
}

/* "1g.10gb", "2g.20gb", "1c.2g.20gb", "1g.10gb+me" -> slice counts and memory in GB. */
static void parse_profile(const char *p, unsigned *gslices, unsigned *cslices, unsigned *gb)
{
    unsigned a = 0, b = 0, c = 0;
    *gslices = *cslices = 1;
    *gb = 10;
    if (sscanf(p, "%uc.%ug.%ugb", &a, &b, &c) == 3) {
        *cslices = a;
        *gslices = b;
        *gb = c;
    } else if (sscanf(p, "%ug.%ugb", &a, &b) == 2) {
        *gslices = *cslices = a;
        *gb = b;
    }
}

/* Mode from true/false or "Enabled"/"Disabled"; -1 for absent/null/"N/A". */
static int mode_value(const fj_value *v, int def)
{
    if (!v)
        return def;
    if (v->type == FJ_BOOL)
        return v->boolean;
    if (v->type == FJ_NUM)
        return v->num != 0;
    if (v->type == FJ_STR) {
        if (strcasecmp(v->str, "enabled") == 0 || strcasecmp(v->str, "enable") == 0)
            return 1;
        if (strcasecmp(v->str, "disabled") == 0 || strcasecmp(v->str, "disable") == 0)
            return 0;
    }
    return -1;
}

static const unsigned DEFAULT_BUS[8] = { 0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb };

static int load_mig(struct nvmlDevice_st *gpu, struct nvmlDevice_st *m, unsigned j,
                    const fj_value *spec)
{
    unsigned gs, cs, gb;
    const char *profile = fj_get_str(spec, "profile", "1g.10gb");
    memset(m, 0, sizeof(*m));
    m->magic = FAKE_DEV_MAGIC;
    m->is_mig = 1;
    m->index = j;
    m->parent = gpu;
    snprintf(m->profile, sizeof(m->profile), "%s", profile);
    parse_profile(profile, &gs, &cs, &gb);
    snprintf(m->uuid, sizeof(m->uuid), "%s", fj_get_str(spec, "uuid", ""));
    if (!m->uuid[0])
        make_uuid(m->uuid, sizeof(m->uuid), "MIG", mix((unsigned long long)gpu->index + 1) + j + 1);
    snprintf(m->name, sizeof(m->name), "%s MIG %s", gpu->name, profile);
    m->gi = (unsigned)fj_get_int(spec, "gpu_instance_id", fj_get_int(spec, "gi", (long long)j + 1));
    m->ci = (unsigned)fj_get_int(spec, "compute_instance_id", fj_get_int(spec, "ci", 0));
    m->mem_total = (unsigned long long)fj_get_int(spec, "memory_mib", (long long)gb * 1024 - 256) << 20;
    m->mem_used = (unsigned long long)fj_get_int(spec, "memory_used_mib", 13) << 20;
    m->attrs.gpuInstanceSliceCount = gs;
    m->attrs.computeInstanceSliceCount = cs;
    m->attrs.multiprocessorCount = (unsigned)fj_get_int(spec, "multiprocessor_count", (long long)cs * 16);
    m->attrs.sharedCopyEngineCount = (unsigned)fj_get_int(spec, "copy_engine_count", gs);
    m->attrs.sharedDecoderCount = (unsigned)fj_get_int(spec, "decoder_count", gs);
    m->attrs.sharedEncoderCount = (unsigned)fj_get_int(spec, "encoder_count", 0);
    m->attrs.sharedJpegCount = (unsigned)fj_get_int(spec, "jpg_count", gs);
    m->attrs.sharedOfaCount = (unsigned)fj_get_int(spec, "ofa_count", 0);
    m->attrs.memorySizeMB = m->mem_total >> 20;
    return add_errors(m->errs, &m->nerrs, fj_get(spec, "errors"));
}

/* "health": {"remapped_rows": {"correctable", "uncorrectable", "pending", "failure"},
 *            "retired_pages": {"multiple_single_bit", "double_bit", "pending"},
 *            "ecc": {"volatile_uncorrectable", "aggregate_uncorrectable",   (DRAM)
 *                    "volatile_correctable", "aggregate_correctable",
 *                    "sram": {"volatile_parity", "volatile_secded", "aggregate_parity",
 *                             "aggregate_secded", "threshold_exceeded"}},
 *            "nvlinks": N | [{"active": bool, "replay": n, "recovery": n, "crc_flit": n,
 *                             "crc_data": n, "ecc_data": n}, ...],
 *            "supported": bool}
 * Defaults: a healthy data-centre GPU (row remapper and ECC supported, all zero), 18 active
 * NVLinks without errors. "supported": false makes the memory queries NOT_SUPPORTED (a
 * consumer GPU); "nvlinks": 0 makes the NVLink queries NOT_SUPPORTED. */
static const char *const RECOVERY_NAMES[] = {
    "none", "reset_gpu", "reboot", "drain_p2p", "drain_and_reset", "recover_imex", "bus_reset", "system_reboot" };
static const char *const CLOCK_NAMES[] = {
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting" };
static const char *const HIST_NAMES[] = { "max", "high", "partial", "low", "none" };
static const char *const FABRIC_NAMES[] = { "Not Supported", "Not Started", "In Progress", "Completed" };
/* "virtualization_mode": the nvmlGpuVirtualizationMode_t values in order ("vgpu": a vGPU guest) */
static const char *const VIRT_NAMES[] = { "none", "passthrough", "vgpu", "host_vgpu", "host_vsga" };

static int named(const fj_value *v, const char *const *names, int n, int def)
{
    if (!v || v->type == FJ_NULL)
        return def;
    if (v->type == FJ_NUM)
        return (int)v->num;
    if (v->type == FJ_STR)
        for (int i = 0; i < n; i++)
            if (!strcasecmp(v->str, names[i]))
                return i;
    return -2;
}

/* R570+ health (see README.md): the driver's recovery verdict, the deprecated reset status,
 * repair state, the row remapper histogram, the PCIe link, clock event reasons, fabric state.
 * Defaults: a healthy H100 on R580 (recovery action None, reset status fields deprecated, no
 * repair pending, all banks at max, gen 5 x16 without replays, idle, no fabric). */
static int load_health_extras(struct nvmlDevice_st *d, const fj_value *h)
{
    const fj_value *rs = fj_get(h, "reset_status"), *rp = fj_get(h, "repair");
    const fj_value *hist = fj_get(h, "row_remapper_histogram"), *pcie = fj_get(h, "pcie");
    const fj_value *clocks = fj_get(h, "clocks_event_reasons"), *fab = fj_get(h, "fabric");
    const fj_value *ra = fj_get(h, "recovery_action");
    d->recovery_action = ra && ra->type == FJ_BOOL && !ra->boolean ? -1 : named(ra, RECOVERY_NAMES, 8, 0);
    if (d->recovery_action < -1) {
        fprintf(stderr, "fake-nvml: unknown recovery_action in scenario\n");
        return -1;
    }
    d->reset_required = rs ? fj_get_bool(rs, "reset_required", 0) : -1;
    d->drain_reset = rs ? fj_get_bool(rs, "drain_and_reset_recommended", 0) : -1;
    d->repair_supported = !(rp && rp->type == FJ_BOOL && !rp->boolean);
    d->channel_repair = (unsigned)fj_get_bool(rp, "channel_repair_pending", 0);
    d->tpc_repair = (unsigned)fj_get_bool(rp, "tpc_repair_pending", 0);
    d->unrepairable = (unsigned)fj_get_bool(rp, "unrepairable_memory", 0);
    d->hist_supported = !(hist && hist->type == FJ_BOOL && !hist->boolean);
    for (int i = 0; i < 5; i++)
        d->hist[i] = (unsigned)fj_get_int(hist, HIST_NAMES[i], i == 0 ? 2560 : 0);
    d->pcie_supported = !(pcie && pcie->type == FJ_BOOL && !pcie->boolean);
    d->pcie_max_gen = (unsigned)fj_get_int(pcie, "max_gen", 5);
    d->pcie_gen = (unsigned)fj_get_int(pcie, "gen", d->pcie_max_gen);
    d->pcie_max_width = (unsigned)fj_get_int(pcie, "max_width", 16);
    d->pcie_width = (unsigned)fj_get_int(pcie, "width", d->pcie_max_width);
    d->pcie_replay = (unsigned)fj_get_int(pcie, "replay_counter", 0);
    d->pcie_rollover = (unsigned)fj_get_int(pcie, "replay_rollover_counter", 0);
    d->clock_reasons = 0x1; /* idle */
    if (clocks && clocks->type == FJ_NUM) {
        d->clock_reasons = (unsigned long long)clocks->num;
    } else if (clocks && clocks->type == FJ_ARR) {
        d->clock_reasons = 0;
        for (size_t i = 0; i < clocks->n; i++) {
            int bit = named(clocks->items[i], CLOCK_NAMES, 9, -2);
            if (bit < 0) {
                fprintf(stderr, "fake-nvml: unknown clocks_event_reasons entry in scenario\n");
                return -1;
            }
            d->clock_reasons |= 1ULL << bit;
        }
    }
    d->fabric_state = 0;
    d->fabric_status = NVML_SUCCESS;
    if (fab && fab->type == FJ_OBJ) {
        d->fabric_state = named(fj_get(fab, "state"), FABRIC_NAMES, 4, 3);
        const fj_value *st = fj_get(fab, "status");
        d->fabric_status = !st || (st->type == FJ_STR && !strcasecmp(st->str, "Success")) ? NVML_SUCCESS : error_code(st);
        if (d->fabric_state < 0 || d->fabric_status < 0) {
            fprintf(stderr, "fake-nvml: bad fabric state/status in scenario\n");
            return -1;
        }
    }
    return 0;
}

static int load_health(struct nvmlDevice_st *d, const fj_value *h)
{
    static const char *const COUNTERS[FAKE_NVLINK_COUNTERS] = {
        "replay", "recovery", "crc_flit", "crc_data", "ecc_data" };
    const fj_value *rr = fj_get(h, "remapped_rows"), *rp = fj_get(h, "retired_pages");
    const fj_value *ecc = fj_get(h, "ecc"), *links = fj_get(h, "nvlinks");
    if (h && h->type != FJ_OBJ) {
        fprintf(stderr, "fake-nvml: \"health\" must be an object\n");
        return -1;
    }
    d->health_supported = fj_get_bool(h, "supported", 1);
    d->remap_corr = (unsigned)fj_get_int(rr, "correctable", 0);
    d->remap_unc = (unsigned)fj_get_int(rr, "uncorrectable", 0);
    d->remap_pending = (unsigned)fj_get_bool(rr, "pending", 0);
    d->remap_failure = (unsigned)fj_get_bool(rr, "failure", 0);
    d->retired_sbe = (unsigned)fj_get_int(rp, "multiple_single_bit", 0);
    d->retired_dbe = (unsigned)fj_get_int(rp, "double_bit", 0);
    d->retired_pending = (unsigned)fj_get_bool(rp, "pending", 0);
    d->ecc_unc_volatile = (unsigned long long)fj_get_int(ecc, "volatile_uncorrectable", 0);
    d->ecc_unc_aggregate = (unsigned long long)fj_get_int(ecc, "aggregate_uncorrectable",
                                                          (long long)d->ecc_unc_volatile);
    d->ecc_cor_volatile = (unsigned long long)fj_get_int(ecc, "volatile_correctable", 0);
    d->ecc_cor_aggregate = (unsigned long long)fj_get_int(ecc, "aggregate_correctable",
                                                          (long long)d->ecc_cor_volatile);
    {
        const fj_value *sram = fj_get(ecc, "sram");
        d->sram_vol_parity = (unsigned long long)fj_get_int(sram, "volatile_parity", 0);
        d->sram_vol_secded = (unsigned long long)fj_get_int(sram, "volatile_secded", 0);
        d->sram_agg_parity = (unsigned long long)fj_get_int(sram, "aggregate_parity", (long long)d->sram_vol_parity);
        d->sram_agg_secded = (unsigned long long)fj_get_int(sram, "aggregate_secded", (long long)d->sram_vol_secded);
        d->sram_threshold = (unsigned)fj_get_bool(sram, "threshold_exceeded", 0);
    }
    if (load_health_extras(d, h) < 0)
        return -1;
    if (d->retired_sbe > 64 || d->retired_dbe > 64) {
        fprintf(stderr, "fake-nvml: at most 64 retired pages per cause\n");
        return -1;
    }
    if (!links) {
        d->nvlinks = FAKE_MAX_NVLINKS;
        for (unsigned l = 0; l < d->nvlinks; l++)
            d->nvlink_active[l] = 1;
    } else if (links->type == FJ_NUM) {
        d->nvlinks = links->num < 0 ? 0 : links->num > FAKE_MAX_NVLINKS ? FAKE_MAX_NVLINKS : (unsigned)links->num;
        for (unsigned l = 0; l < d->nvlinks; l++)
            d->nvlink_active[l] = 1;
    } else if (links->type == FJ_ARR) {
        d->nvlinks = links->n > FAKE_MAX_NVLINKS ? FAKE_MAX_NVLINKS : (unsigned)links->n;
        for (unsigned l = 0; l < d->nvlinks; l++) {
            const fj_value *lk = links->items[l];
            d->nvlink_active[l] = (unsigned)fj_get_bool(lk, "active", 1);
            for (unsigned c = 0; c < FAKE_NVLINK_COUNTERS; c++)
                d->nvlink_err[l][c] = (unsigned long long)fj_get_int(lk, COUNTERS[c], 0);
        }
    } else {
        fprintf(stderr, "fake-nvml: \"nvlinks\" must be a number or a list\n");
        return -1;
    }
    return 0;
}

static int load_gpu(struct nvmlDevice_st *d, unsigned i, const fj_value *spec)
{
    const fj_value *mig = fj_get(spec, "mig_mode");
    const fj_value *devs = fj_get(spec, "mig_devices");
    const char *bus = fj_get_str(spec, "pci_bus_id", NULL);
    const char *cc = fj_get_str(spec, "compute_capability", "9.0");
    memset(d, 0, sizeof(*d));
    d->magic = FAKE_DEV_MAGIC;
    d->index = i;
    snprintf(d->uuid, sizeof(d->uuid), "%s", fj_get_str(spec, "uuid", ""));
    if (!d->uuid[0])
        make_uuid(d->uuid, sizeof(d->uuid), "GPU", (unsigned long long)i + 0x6b75626567707573ULL);
    snprintf(d->name, sizeof(d->name), "%s", fj_get_str(spec, "name", "NVIDIA H100 80GB HBM3"));
    snprintf(d->serial, sizeof(d->serial), "%s", fj_get_str(spec, "serial", ""));
    if (!d->serial[0])
        snprintf(d->serial, sizeof(d->serial), "165232%07u", 1000 + i);
    d->arch = arch_code(fj_get_str(spec, "architecture", "Hopper"));
    if (sscanf(cc, "%d.%d", &d->cc_major, &d->cc_minor) != 2) {
        d->cc_major = 9;
        d->cc_minor = 0;
    }
    d->bus = i < 8 ? DEFAULT_BUS[i] : 0x10 + i;
    if (bus && parse_busid(bus, &d->domain, &d->bus, &d->device) < 0) {
        fprintf(stderr, "fake-nvml: bad pci_bus_id %s in scenario\n", bus);
        return -1;
    }
    d->pci_device_id = (unsigned)strtoul(fj_get_str(spec, "pci_device_id", "0x233010DE"), NULL, 0);
    d->pci_subsys_id = (unsigned)strtoul(fj_get_str(spec, "pci_sub_system_id", "0x16C110DE"), NULL, 0);
    d->minor = (unsigned)fj_get_int(spec, "minor_number", fj_get_int(spec, "minor", i));
    d->mem_total = (unsigned long long)fj_get_int(spec, "memory_mib", 81559) << 20;
    d->mem_reserved = (unsigned long long)fj_get_int(spec, "memory_reserved_mib", 329) << 20;
    d->mem_used = (unsigned long long)fj_get_int(spec, "memory_used_mib", 0) << 20;
    d->lost = fj_get_bool(spec, "lost", 0);
    /* "mig_mode": null or "N/A" -> the GPU is not MIG capable. */
    d->mig_supported = fj_get_bool(spec, "mig_capable",
                                   !(mig && (mig->type == FJ_NULL ||
                                             (mig->type == FJ_STR && mode_value(mig, 0) < 0))));
    if (mig && mig->type == FJ_OBJ) {
        d->mig_current = mode_value(fj_get(mig, "current"), 0);
        d->mig_pending = mode_value(fj_get(mig, "pending"), d->mig_current);
    } else if (mig && mig->type != FJ_NULL) {
        d->mig_current = d->mig_pending = mode_value(mig, 0);
    }
    if (d->mig_current < 0 || d->mig_pending < 0)
        d->mig_supported = 0;
    if (!d->mig_supported)
        d->mig_current = d->mig_pending = 0;
    d->virt_mode = named(fj_get(spec, "virtualization_mode"), VIRT_NAMES, 5, 0);
    if (d->virt_mode < 0 || d->virt_mode > 4) {
        fprintf(stderr, "fake-nvml: unknown virtualization_mode in scenario (none, passthrough, vgpu, host_vgpu, host_vsga)\n");
        return -1;
    }
    d->max_mig = (unsigned)fj_get_int(spec, "max_mig_devices", 7);
    if (d->max_mig > FAKE_MAX_MIG)
        d->max_mig = FAKE_MAX_MIG;
    if (add_errors(d->errs, &d->nerrs, fj_get(spec, "errors")) < 0)
        return -1;
    if (load_health(d, fj_get(spec, "health")) < 0)
        return -1;
    {
        const fj_value *procs = fj_get(spec, "processes"), *reset = fj_get(spec, "reset");
        if (procs && procs->type == FJ_ARR)
            for (size_t k = 0; k < procs->n && d->nprocs < FAKE_MAX_PROCS; k++)
                d->procs[d->nprocs++] = (unsigned)fj_get_int(procs->items[k], "pid", 1000 + (long long)k);
        d->reset_refuse = 0;
        if (reset && fj_get(reset, "refuse") && fj_get(reset, "refuse")->type != FJ_NULL &&
            (d->reset_refuse = error_code(fj_get(reset, "refuse"))) < 0) {
            fprintf(stderr, "fake-nvml: unknown reset.refuse error in scenario\n");
            return -1;
        }
        d->reset_loses = !strcmp(fj_get_str(reset, "result", "ok"), "lost");
    }
    if (devs && devs->type == FJ_ARR && d->mig_current == 1) {
        for (size_t j = 0; j < devs->n && j < d->max_mig; j++)
            if (load_mig(d, &G.migs[i][j], (unsigned)j, devs->items[j]) < 0)
                return -1;
        d->nmig = devs->n < d->max_mig ? (unsigned)devs->n : d->max_mig;
    }
    return 0;
}

static int r570_affected(const char *version)
{
    static const long first[3] = { 570, 124, 6 }, last[3] = { 570, 158, 1 };
    long v[3];
    if (version_parts(version, v) < 0)
        return 0;
    return version_cmp(v, first) >= 0 && version_cmp(v, last) <= 0;
}

static int mig_mixed(void)
{
    int on = 0, off = 0;
    for (unsigned i = 0; i < G.ngpus; i++) {
        if (G.gpus[i].mig_current == 1)
            on = 1;
        else
            off = 1;
    }
    return on && off;
}

static struct nvmlDevice_st *gpu_by_bus(const char *bus)
{
    unsigned dom, b, dev;
    if (parse_busid(bus, &dom, &b, &dev) < 0)
        return NULL;
    for (unsigned i = 0; i < G.ngpus; i++)
        if (G.gpus[i].domain == dom && G.gpus[i].bus == b && G.gpus[i].device == dev)
            return &G.gpus[i];
    return NULL;
}

/* "reset_groups": [["0000:18:00.0", "0000:2a:00.0"], ...]: GPUs whose NVLinks tie them
 * together so that one cannot be reset without the others (pre-Ampere NVLink, or an Ampere
 * NVSwitch system without Fabric Manager, as the nvidia-smi -r documentation describes). */
static int load_groups(const fj_value *groups)
{
    G.ngroups = 0;
    if (!groups || groups->type != FJ_ARR)
        return 0;
    for (size_t g = 0; g < groups->n && G.ngroups < FAKE_MAX_GROUPS; g++) {
        const fj_value *grp = groups->items[g];
        unsigned n = 0;
        if (!grp || grp->type != FJ_ARR)
            continue;
        for (size_t k = 0; k < grp->n && n < FAKE_MAX_GPUS; k++) {
            struct nvmlDevice_st *d = grp->items[k]->type == FJ_STR ? gpu_by_bus(grp->items[k]->str) : NULL;
            if (!d) {
                fprintf(stderr, "fake-nvml: reset_groups names a bus id that is no GPU of the scenario\n");
                return -1;
            }
            G.group_gpu[G.ngroups][n++] = d->index;
        }
        G.group_n[G.ngroups++] = n;
    }
    return 0;
}

/* What a GPU reset did, recorded by kubegpu_fake_reset in <scenario>.reset (one UUID a line)
 * and valid while it is newer than the scenario (writing a new scenario re-arms the faults):
 * a row marked for remapping is remapped, pages pending retirement are retired, pending
 * repairs are applied, the volatile ECC counters start again at 0 and the driver's recovery
 * verdict is None again; a reset that fails leaves the GPU lost. */
static void apply_reset_record(void)
{
    char rec[sizeof(G.path) + 8], line[128];
    struct stat sst, rst;
    FILE *f;
    snprintf(rec, sizeof(rec), "%s%s", G.path, FAKE_RESET_SUFFIX);
    if (stat(G.path, &sst) < 0 || stat(rec, &rst) < 0)
        return;
    if (rst.st_mtim.tv_sec < sst.st_mtim.tv_sec ||
        (rst.st_mtim.tv_sec == sst.st_mtim.tv_sec && rst.st_mtim.tv_nsec < sst.st_mtim.tv_nsec))
        return;
    if (!(f = fopen(rec, "r")))
        return;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        for (unsigned i = 0; i < G.ngpus; i++) {
            struct nvmlDevice_st *d = &G.gpus[i];
            if (strcmp(d->uuid, line) != 0)
                continue;
            d->was_reset = 1;
            if (d->reset_loses) {
                d->lost = 1;
                continue;
            }
            d->remap_pending = 0;
            d->retired_pending = 0;
            d->channel_repair = d->tpc_repair = 0;
            d->ecc_unc_volatile = d->ecc_cor_volatile = 0;
            d->sram_vol_parity = d->sram_vol_secded = 0;
            if (d->recovery_action > 0)
                d->recovery_action = 0;
            if (d->reset_required > 0)
                d->reset_required = 0;
            if (d->drain_reset > 0)
                d->drain_reset = 0;
            d->nprocs = 0;
        }
    }
    fclose(f);
}

/* Load the scenario and run the init-time checks. Called with the lock held. */
static int fake_init(void)
{
    const char *path = getenv(FAKE_CONFIG_ENV);
    char err[160], kver[80];
    char *text;
    fj_value *cfg;
    const fj_value *v, *gpus, *hang;
    int rc = NVML_SUCCESS, code;

    if (!path || !*path)
        path = FAKE_CONFIG_DEFAULT;
    text = read_all(path, FAKE_MAX_CONFIG);
    if (!text) {
        /* No scenario means no driver behind this library. */
        fake_log("no scenario at %s: %s", path, strerror(errno));
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    snprintf(G.path, sizeof(G.path), "%s", path);
    cfg = fj_parse(text, err, sizeof(err));
    free(text);
    if (!cfg || cfg->type != FJ_OBJ) {
        fprintf(stderr, "fake-nvml: cannot parse scenario %s: %s\n", path, cfg ? "not an object" : err);
        fj_free(cfg);
        return NVML_ERROR_UNKNOWN;
    }

    memset(G.gpus, 0, sizeof(G.gpus));
    memset(G.migs, 0, sizeof(G.migs));
    G.ngpus = 0;
    G.nerrs = 0;
    G.hang_set = 0;
    G.freeze_cg[0] = '\0';
    snprintf(G.version, sizeof(G.version), "%s", fj_get_str(cfg, "driver_version", FAKE_NVML_VERSION));
    if (fj_get(cfg, "cuda_driver_version") && fj_get(cfg, "cuda_driver_version")->type == FJ_STR) {
        int maj = 0, min = 0;
        sscanf(fj_get_str(cfg, "cuda_driver_version", ""), "%d.%d", &maj, &min);
        G.cuda = maj * 1000 + min * 10;
    } else {
        G.cuda = (int)fj_get_int(cfg, "cuda_driver_version", default_cuda(G.version));
    }
    snprintf(G.nvml_version, sizeof(G.nvml_version), "%s", fj_get_str(cfg, "nvml_version", ""));
    if (!G.nvml_version[0])
        snprintf(G.nvml_version, sizeof(G.nvml_version), "%d.%s", G.cuda / 1000, G.version);

    if (add_errors(G.errs, &G.nerrs, fj_get(cfg, "errors")) < 0) {
        rc = NVML_ERROR_UNKNOWN;
        goto out;
    }
    if ((v = fj_get(cfg, "init_error")) && v->type != FJ_NULL) {
        if ((code = error_code(v)) < 0) {
            fprintf(stderr, "fake-nvml: unknown init_error in scenario\n");
            rc = NVML_ERROR_UNKNOWN;
        } else {
            rc = code;
        }
        goto out;
    }

    /* The kernel module: the real library asks the loaded RM for its version. */
    v = fj_get(cfg, "kernel_module_version");
    if (v) {
        if (v->type != FJ_STR) {
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
            goto out;
        }
        snprintf(kver, sizeof(kver), "%s", v->str);
    } else if ((path = fj_get_str(cfg, "kernel_module_version_file", NULL))) {
        char *proc = read_all(path, 1 << 16);
        if (!proc) {
            fake_log("kernel module version file %s: %s", path, strerror(errno));
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
            goto out;
        }
        if (parse_nvrm(proc, kver, sizeof(kver)) < 0) {
            free(proc);
            fake_log("no NVRM version line in %s", path);
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
            goto out;
        }
        free(proc);
    } else {
        snprintf(kver, sizeof(kver), "%s", G.version);
    }
    if (strcmp(kver, G.version) != 0) {
        fake_log("API mismatch: kernel module %s, library %s", kver, G.version);
        rc = NVML_ERROR_LIB_RM_VERSION_MISMATCH;
        goto out;
    }

    gpus = fj_get(cfg, "gpus");
    if (gpus && gpus->type == FJ_ARR) {
        for (size_t i = 0; i < gpus->n && i < FAKE_MAX_GPUS; i++) {
            if (load_gpu(&G.gpus[i], (unsigned)i, gpus->items[i]) < 0) {
                rc = NVML_ERROR_UNKNOWN;
                goto out;
            }
        }
        G.ngpus = gpus->n < FAKE_MAX_GPUS ? (unsigned)gpus->n : FAKE_MAX_GPUS;
    }
    if (load_groups(fj_get(cfg, "reset_groups")) < 0) {
        rc = NVML_ERROR_UNKNOWN;
        goto out;
    }
    apply_reset_record();

    hang = fj_get(cfg, "hang");
    if (hang && !(hang->type == FJ_BOOL && !hang->boolean) && hang->type != FJ_NULL) {
        G.hang_set = 1;
        G.hang_gpu = -1;
        snprintf(G.hang_fn, sizeof(G.hang_fn), "nvmlInit");
        if (hang->type == FJ_STR) {
            base_name(hang->str, G.hang_fn, sizeof(G.hang_fn));
        } else if (hang->type == FJ_OBJ) {
            base_name(fj_get_str(hang, "function", "nvmlInit"), G.hang_fn, sizeof(G.hang_fn));
            G.hang_gpu = (long)fj_get_int(hang, "gpu", -1);
            snprintf(G.freeze_cg, sizeof(G.freeze_cg), "%s", fj_get_str(hang, "freeze_cgroup", ""));
        }
    }

    if (fj_get_bool(cfg, "emulate_r570_mig_hang", 1) && r570_affected(G.version) && mig_mixed()) {
        fj_free(cfg);
        hang_forever("nvmlInit (R570 NVML regression on a MIG-mixed node)", G.freeze_cg);
    }
    fj_free(cfg);
    maybe_hang("nvmlInit", -1);
    return NVML_SUCCESS;
out:
    fj_free(cfg);
    return rc;
}

/* ------------------------------------------------------------------------ API glue */

#define LOCK() pthread_mutex_lock(&G.lock)
#define UNLOCK() pthread_mutex_unlock(&G.lock)

static int valid_handle(const struct nvmlDevice_st *d)
{
    const char *p = (const char *)d;
    const char *g0 = (const char *)&G.gpus[0], *g1 = (const char *)&G.gpus[G.ngpus];
    const char *m0 = (const char *)&G.migs[0][0], *m1 = (const char *)G.migs + sizeof(G.migs);
    if (!d)
        return 0;
    if (!((p >= g0 && p < g1) || (p >= m0 && p < m1)))
        return 0;
    if (d->magic != FAKE_DEV_MAGIC)
        return 0;
    if (d->is_mig && (d->parent->mig_current != 1 || d->index >= d->parent->nmig))
        return 0;
    return 1;
}

/* Common entry of every per-device call; returns with the lock held on success. */
static int enter(const char *fn, nvmlDevice_t d)
{
    int rc;
    const struct nvmlDevice_st *gpu;
    LOCK();
    if (!G.refcount) {
        UNLOCK();
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!valid_handle(d)) {
        UNLOCK();
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    gpu = d->is_mig ? d->parent : d;
    maybe_hang(fn, (long)gpu->index);
    if (gpu->lost) {
        UNLOCK();
        return NVML_ERROR_GPU_IS_LOST;
    }
    if ((rc = injected(fn, d)) != NVML_SUCCESS) {
        UNLOCK();
        return rc;
    }
    return NVML_SUCCESS;
}

static int enter_system(const char *fn)
{
    int rc;
    LOCK();
    if (!G.refcount) {
        UNLOCK();
        return NVML_ERROR_UNINITIALIZED;
    }
    maybe_hang(fn, -1);
    if ((rc = injected(fn, NULL)) != NVML_SUCCESS) {
        UNLOCK();
        return rc;
    }
    return NVML_SUCCESS;
}

static int copy_out(char *dst, unsigned len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

#define RETURN(rc) do { int rc_ = (rc); UNLOCK(); return rc_; } while (0)

/* -------------------------------------------------------------------- init/shutdown */

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    int rc;
    (void)flags;
    LOCK();
    if (G.refcount > 0) {
        G.refcount++;
        UNLOCK();
        return NVML_SUCCESS;
    }
    rc = fake_init();
    if (rc == NVML_SUCCESS)
        G.refcount = 1;
    else
        G.ngpus = 0;
    UNLOCK();
    return rc;
}

API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
API nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

API nvmlReturn_t nvmlShutdown(void)
{
    LOCK();
    if (G.refcount == 0)
        RETURN(NVML_ERROR_UNINITIALIZED);
    G.refcount--;
    RETURN(NVML_SUCCESS);
}

API const char *nvmlErrorString(nvmlReturn_t result)
{
    for (size_t i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++)
        if (ERRORS[i].code == result)
            return ERRORS[i].text;
    return "Unknown Error";
}

/* -------------------------------------------------------------------------- system */

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    int rc = enter_system("nvmlSystemGetDriverVersion");
    if (rc)
        return rc;
    RETURN(copy_out(version, length, G.version));
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    int rc = enter_system("nvmlSystemGetNVMLVersion");
    if (rc)
        return rc;
    RETURN(copy_out(version, length, G.nvml_version));
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    int rc = enter_system("nvmlSystemGetCudaDriverVersion");
    if (rc)
        return rc;
    if (!cudaDriverVersion)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *cudaDriverVersion = G.cuda;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    int rc = enter_system("nvmlDeviceGetCount");
    if (rc)
        return rc;
    if (!deviceCount)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = G.ngpus;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

/* ------------------------------------------------------------------------- handles */

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    int rc;
    LOCK();
    if (!G.refcount)
        RETURN(NVML_ERROR_UNINITIALIZED);
    if (!device || index >= G.ngpus)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    maybe_hang("nvmlDeviceGetHandleByIndex", (long)index);
    if (G.gpus[index].lost)
        RETURN(NVML_ERROR_GPU_IS_LOST);
    if ((rc = injected("nvmlDeviceGetHandleByIndex", &G.gpus[index])) != NVML_SUCCESS)
        RETURN(rc);
    *device = &G.gpus[index];
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    int rc = enter_system("nvmlDeviceGetHandleByUUID");
    if (rc)
        return rc;
    if (!uuid || !device)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < G.ngpus; i++) {
        if (strcmp(G.gpus[i].uuid, uuid) == 0) {
            if (G.gpus[i].lost)
                RETURN(NVML_ERROR_GPU_IS_LOST);
            *device = &G.gpus[i];
            RETURN(NVML_SUCCESS);
        }
        for (unsigned j = 0; j < G.gpus[i].nmig; j++) {
            if (strcmp(G.migs[i][j].uuid, uuid) == 0) {
                *device = &G.migs[i][j];
                RETURN(NVML_SUCCESS);
            }
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND);
}

static int same_busid(const struct nvmlDevice_st *d, const char *busid)
{
    unsigned dom, bus, dev;
    if (parse_busid(busid, &dom, &bus, &dev) < 0)
        return 0;
    return dom == d->domain && bus == d->bus && dev == d->device;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    int rc = enter_system("nvmlDeviceGetHandleByPciBusId");
    if (rc)
        return rc;
    if (!pciBusId || !device)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < G.ngpus; i++) {
        if (same_busid(&G.gpus[i], pciBusId)) {
            if (G.gpus[i].lost)
                RETURN(NVML_ERROR_GPU_IS_LOST);
            *device = &G.gpus[i];
            RETURN(NVML_SUCCESS);
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND);
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ----------------------------------------------------------------- device queries */

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    int rc = enter("nvmlDeviceGetUUID", device);
    if (rc)
        return rc;
    RETURN(copy_out(uuid, length, device->uuid));
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    int rc = enter("nvmlDeviceGetName", device);
    if (rc)
        return rc;
    RETURN(copy_out(name, length, device->name));
}

API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    int rc = enter("nvmlDeviceGetSerial", device);
    if (rc)
        return rc;
    RETURN(copy_out(serial, length, device->is_mig ? device->parent->serial : device->serial));
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    int rc = enter("nvmlDeviceGetIndex", device);
    if (rc)
        return rc;
    if (!index)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *index = device->index;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    int rc = enter("nvmlDeviceGetMinorNumber", device);
    if (rc)
        return rc;
    if (!minorNumber)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->is_mig)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *minorNumber = device->minor;
    RETURN(NVML_SUCCESS);
}

static void fill_pci(const struct nvmlDevice_st *d, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->device;
    pci->pciDeviceId = d->pci_device_id;
    pci->pciSubSystemId = d->pci_subsys_id;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", d->domain, d->bus, d->device);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", d->domain, d->bus, d->device);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    int rc = enter("nvmlDeviceGetPciInfo", device);
    if (rc)
        return rc;
    if (!pci)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    fill_pci(device->is_mig ? device->parent : device, pci);
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }
API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    int rc = enter("nvmlDeviceGetMemoryInfo", device);
    if (rc)
        return rc;
    if (!memory)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = device->mem_total;
    memory->used = device->mem_used + device->mem_reserved;
    memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    int rc = enter("nvmlDeviceGetMemoryInfo", device);
    if (rc)
        return rc;
    if (!memory)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory->total = device->mem_total;
    memory->reserved = device->mem_reserved;
    memory->used = device->mem_used;
    memory->free = memory->total > memory->used + memory->reserved
                       ? memory->total - memory->used - memory->reserved : 0;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    int rc = enter("nvmlDeviceGetCudaComputeCapability", device);
    const struct nvmlDevice_st *gpu;
    if (rc)
        return rc;
    if (!major || !minor)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    gpu = device->is_mig ? device->parent : device;
    *major = gpu->cc_major;
    *minor = gpu->cc_minor;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    int rc = enter("nvmlDeviceGetArchitecture", device);
    if (rc)
        return rc;
    if (!arch)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *arch = device->is_mig ? device->parent->arch : device->arch;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    int rc = enter("nvmlDeviceGetVirtualizationMode", device);
    if (rc)
        return rc;
    if (!pVirtualMode)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->is_mig)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *pVirtualMode = (nvmlGpuVirtualizationMode_t)device->virt_mode;
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------------ MIG */

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    int rc = enter("nvmlDeviceGetMigMode", device);
    if (rc)
        return rc;
    if (!currentMode || !pendingMode)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->is_mig || !device->mig_supported)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *currentMode = device->mig_current == 1 ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = device->mig_pending == 1 ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    int rc = enter("nvmlDeviceGetMaxMigDeviceCount", device);
    if (rc)
        return rc;
    if (!count)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->is_mig || !device->mig_supported)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *count = device->max_mig;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    int rc = enter("nvmlDeviceGetMigDeviceHandleByIndex", device);
    if (rc)
        return rc;
    if (!migDevice || device->is_mig)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!device->mig_supported)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    if (index >= device->max_mig)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->mig_current != 1 || index >= device->nmig)
        RETURN(NVML_ERROR_NOT_FOUND);
    if ((rc = injected("nvmlDeviceGetMigDeviceHandleByIndex", &G.migs[device->index][index])) != NVML_SUCCESS)
        RETURN(rc);
    *migDevice = &G.migs[device->index][index];
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    int rc = enter("nvmlDeviceIsMigDeviceHandle", device);
    if (rc)
        return rc;
    if (!isMigDevice)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = device->is_mig ? 1 : 0;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    int rc = enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice);
    if (rc)
        return rc;
    if (!device || !migDevice->is_mig)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *device = migDevice->parent;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    int rc = enter("nvmlDeviceGetGpuInstanceId", device);
    if (rc)
        return rc;
    if (!id)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!device->is_mig)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *id = device->gi;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    int rc = enter("nvmlDeviceGetComputeInstanceId", device);
    if (rc)
        return rc;
    if (!id)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!device->is_mig)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *id = device->ci;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    int rc = enter("nvmlDeviceGetAttributes", device);
    if (rc)
        return rc;
    if (!attributes)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!device->is_mig) /* the API only supports MIG device handles */
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *attributes = device->attrs;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

/* ------------------------------------------------------------------- memory health */

#define NVML_MEMORY_ERROR_TYPE_CORRECTED   0
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC  0
#define NVML_AGGREGATE_ECC 1
#define NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS 0
#define NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR           1

/* Per-device health calls answer for the physical GPU; MIG handles are not supported. */
static int health_enter(const char *fn, nvmlDevice_t d)
{
    int rc = enter(fn, d);
    if (rc)
        return rc;
    if (d->is_mig || !d->health_supported) {
        UNLOCK();
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                           unsigned int *uncRows, unsigned int *isPending,
                                           unsigned int *failureOccurred)
{
    int rc = health_enter("nvmlDeviceGetRemappedRows", device);
    if (rc)
        return rc;
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *corrRows = device->remap_corr;
    *uncRows = device->remap_unc;
    *isPending = device->remap_pending;
    *failureOccurred = device->remap_failure;
    RETURN(NVML_SUCCESS);
}

static int retired_pages(const char *fn, nvmlDevice_t device, int cause, unsigned int *pageCount,
                         unsigned long long *addresses, unsigned long long *timestamps)
{
    unsigned n;
    int rc = health_enter(fn, device);
    if (rc)
        return rc;
    if (!pageCount || (cause != NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS &&
                       cause != NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    n = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? device->retired_dbe : device->retired_sbe;
    /* The API: a too-small buffer gets INSUFFICIENT_SIZE with the needed count. */
    if (*pageCount < n || (n && !addresses)) {
        *pageCount = n;
        RETURN(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    for (unsigned k = 0; k < n; k++) {
        addresses[k] = 0x100000ULL * (device->index + 1) + 0x1000ULL * k + (unsigned)cause;
        if (timestamps)
            timestamps[k] = 1700000000ULL + k;
    }
    *pageCount = n;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                           unsigned long long *addresses)
{
    return retired_pages("nvmlDeviceGetRetiredPages", device, cause, pageCount, addresses, NULL);
}

API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                              unsigned long long *addresses, unsigned long long *timestamps)
{
    return retired_pages("nvmlDeviceGetRetiredPages", device, cause, pageCount, addresses, timestamps);
}

API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending)
{
    int rc = health_enter("nvmlDeviceGetRetiredPagesPendingStatus", device);
    if (rc)
        return rc;
    if (!isPending)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *isPending = device->retired_pending ? 1 : 0;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                             unsigned long long *eccCounts)
{
    int rc = health_enter("nvmlDeviceGetTotalEccErrors", device);
    if (rc)
        return rc;
    if (!eccCounts || (errorType != NVML_MEMORY_ERROR_TYPE_CORRECTED && errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED) ||
        (counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC))
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    /* The total covers every memory location: DRAM plus SRAM. */
    if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *eccCounts = counterType == NVML_VOLATILE_ECC
                         ? device->ecc_unc_volatile + device->sram_vol_parity + device->sram_vol_secded
                         : device->ecc_unc_aggregate + device->sram_agg_parity + device->sram_agg_secded;
    else
        *eccCounts = counterType == NVML_VOLATILE_ECC ? device->ecc_cor_volatile : device->ecc_cor_aggregate;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status)
{
    int rc = health_enter("nvmlDeviceGetSramEccErrorStatus", device);
    if (rc)
        return rc;
    if (!status)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (status->version != nvmlEccSramErrorStatus_v1)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memset((char *)status + sizeof(status->version), 0, sizeof(*status) - sizeof(status->version));
    status->volatileUncParity = device->sram_vol_parity;
    status->volatileUncSecDed = device->sram_vol_secded;
    status->aggregateUncParity = device->sram_agg_parity;
    status->aggregateUncSecDed = device->sram_agg_secded;
    status->bThresholdExceeded = device->sram_threshold;
    RETURN(NVML_SUCCESS);
}

/* ---------------------------------------------------------------------------- NVLink */

static int nvlink_enter(const char *fn, nvmlDevice_t d, unsigned link)
{
    int rc = enter(fn, d);
    if (rc)
        return rc;
    if (d->is_mig || d->nvlinks == 0) {
        UNLOCK();
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (link >= d->nvlinks) {
        UNLOCK();
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive)
{
    int rc = nvlink_enter("nvmlDeviceGetNvLinkState", device, link);
    if (rc)
        return rc;
    if (!isActive)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *isActive = device->nvlink_active[link] ? 1 : 0;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter,
                                                 unsigned long long *counterValue)
{
    int rc = nvlink_enter("nvmlDeviceGetNvLinkErrorCounter", device, link);
    if (rc)
        return rc;
    if (!counterValue || counter < 0 || counter >= FAKE_NVLINK_COUNTERS)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *counterValue = device->nvlink_err[link][counter];
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------ R570+ health, PCIe, clocks */

API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    int rc = enter("nvmlDeviceGetFieldValues", device);
    if (rc)
        return rc;
    if (!values || valuesCount < 0)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        const struct nvmlDevice_st *d = device->is_mig ? device->parent : device;
        long long val = 0;
        int frc = NVML_SUCCESS;
        switch (v->fieldId) {
        case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            frc = d->pcie_supported ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
            val = d->pcie_replay;
            break;
        case NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER:
            frc = d->pcie_supported ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
            val = d->pcie_rollover;
            break;
        case NVML_FI_DEV_RESET_STATUS:
            frc = d->reset_required < 0 ? NVML_ERROR_DEPRECATED : NVML_SUCCESS;
            val = d->reset_required;
            break;
        case NVML_FI_DEV_DRAIN_AND_RESET_STATUS:
            frc = d->drain_reset < 0 ? NVML_ERROR_DEPRECATED : NVML_SUCCESS;
            val = d->drain_reset;
            break;
        case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
            frc = d->recovery_action < 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
            val = d->recovery_action;
            break;
        default:
            frc = NVML_ERROR_NOT_SUPPORTED;
        }
        v->nvmlReturn = (unsigned)frc;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->timestamp = 0;
        v->latencyUsec = 0;
        v->value.ullVal = 0;
        v->value.uiVal = (unsigned)val;
    }
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, nvmlRepairStatus_t *status)
{
    int rc = health_enter("nvmlDeviceGetRepairStatus", device);
    if (rc)
        return rc;
    if (!status)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (status->version != nvmlRepairStatus_v1)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!device->repair_supported)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    status->bChannelRepairPending = device->channel_repair;
    status->bTpcRepairPending = device->tpc_repair;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device, nvmlUnrepairableMemory_t *flag)
{
    int rc = health_enter("nvmlDeviceGetUnrepairableMemoryFlag", device);
    if (rc)
        return rc;
    if (!flag)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (flag->version != nvmlUnrepairableMemory_v1)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!device->repair_supported)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    flag->unrepairableMemory = device->unrepairable;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values)
{
    int rc = health_enter("nvmlDeviceGetRowRemapperHistogram", device);
    if (rc)
        return rc;
    if (!values)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!device->hist_supported)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    values->max = device->hist[0];
    values->high = device->hist[1];
    values->partial = device->hist[2];
    values->low = device->hist[3];
    values->none = device->hist[4];
    RETURN(NVML_SUCCESS);
}

static int pcie_value(const char *fn, nvmlDevice_t device, unsigned int *out, int which)
{
    int rc = enter(fn, device);
    if (rc)
        return rc;
    if (!out)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->is_mig || !device->pcie_supported)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *out = which == 0 ? device->pcie_gen : which == 1 ? device->pcie_max_gen :
           which == 2 ? device->pcie_width : which == 3 ? device->pcie_max_width : device->pcie_replay;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *v)
{
    return pcie_value("nvmlDeviceGetCurrPcieLinkGeneration", device, v, 0);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *v)
{
    return pcie_value("nvmlDeviceGetMaxPcieLinkGeneration", device, v, 1);
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *v)
{
    return pcie_value("nvmlDeviceGetCurrPcieLinkWidth", device, v, 2);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *v)
{
    return pcie_value("nvmlDeviceGetMaxPcieLinkWidth", device, v, 3);
}

API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *v)
{
    return pcie_value("nvmlDeviceGetPcieReplayCounter", device, v, 4);
}

API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    int rc = enter("nvmlDeviceGetCurrentClocksEventReasons", device);
    if (rc)
        return rc;
    if (!reasons)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->is_mig)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *reasons = device->clock_reasons;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
    int rc = enter("nvmlDeviceGetGpuFabricInfo", device);
    if (rc)
        return rc;
    if (!info)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (device->is_mig || !device->fabric_state)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    memset(info, 0, sizeof(*info));
    info->status = (unsigned)device->fabric_status;
    info->state = (unsigned)device->fabric_state;
    RETURN(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                         nvmlProcessInfo_t *infos)
{
    unsigned n;
    int rc = enter("nvmlDeviceGetComputeRunningProcesses", device);
    if (rc)
        return rc;
    if (!infoCount)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    n = device->is_mig ? 0 : device->nprocs;
    if (*infoCount < n || (n && !infos)) {
        *infoCount = n;
        RETURN(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    for (unsigned k = 0; k < n; k++) {
        infos[k].pid = device->procs[k];
        infos[k].usedGpuMemory = 1024ULL << 20;
        infos[k].gpuInstanceId = 0xFFFFFFFFu;
        infos[k].computeInstanceId = 0xFFFFFFFFu;
    }
    *infoCount = n;
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- GPU reset */

/* The fake's stand-in for the driver's reset path that nvidia-smi -r takes (not an NVML API:
 * the real tool resets through the driver). busIds: comma-separated PCI bus ids. Refuses as
 * the tool documents: a GPU with compute processes (In use), one the scenario refuses
 * ("reset": {"refuse": ...}), one of a reset group named without the rest of its group.
 * On success it appends the GPUs' UUIDs to <scenario>.reset; the next nvmlInit reads them
 * (apply_reset_record). msg receives the line nvidia-smi prints. */
API nvmlReturn_t kubegpu_fake_reset(const char *busIds, char *msg, unsigned int len)
{
    struct nvmlDevice_st *targets[FAKE_MAX_GPUS];
    unsigned nt = 0;
    char buf[512], rec[sizeof(G.path) + 8];
    char *save = NULL, *tok;
    FILE *f;
    LOCK();
    if (!G.refcount)
        RETURN(NVML_ERROR_UNINITIALIZED);
    if (!busIds || !msg || !len)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    msg[0] = '\0';
    snprintf(buf, sizeof(buf), "%s", busIds);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct nvmlDevice_st *d = gpu_by_bus(tok);
        if (!d) {
            snprintf(msg, len, "No GPU with bus id %s", tok);
            RETURN(NVML_ERROR_NOT_FOUND);
        }
        if (nt < FAKE_MAX_GPUS)
            targets[nt++] = d;
    }
    for (unsigned k = 0; k < nt; k++) {
        struct nvmlDevice_st *d = targets[k];
        char bus[32];
        snprintf(bus, sizeof(bus), "%08X:%02X:%02X.0", d->domain, d->bus, d->device);
        if (d->lost) {
            snprintf(msg, len, "Unable to reset GPU %s: GPU is lost", bus);
            RETURN(NVML_ERROR_GPU_IS_LOST);
        }
        if (d->reset_refuse) {
            snprintf(msg, len, "Resetting GPU %s is not supported: %s", bus, err_name(d->reset_refuse));
            RETURN(d->reset_refuse);
        }
        if (d->nprocs) {
            snprintf(msg, len, "GPU %s is currently in use by another process.", bus);
            RETURN(NVML_ERROR_IN_USE);
        }
        for (unsigned g = 0; g < G.ngroups; g++) {
            int in = 0;
            for (unsigned m = 0; m < G.group_n[g]; m++)
                in |= G.group_gpu[g][m] == d->index;
            if (!in)
                continue;
            for (unsigned m = 0; m < G.group_n[g]; m++) {
                int named_too = 0;
                const struct nvmlDevice_st *o = &G.gpus[G.group_gpu[g][m]];
                for (unsigned t = 0; t < nt; t++)
                    named_too |= targets[t] == o;
                if (!named_too) {
                    snprintf(msg, len, "GPU %s is connected to GPU %08X:%02X:%02X.0 by NVLink: both "
                             "must be reset in the same command", bus, o->domain, o->bus, o->device);
                    RETURN(NVML_ERROR_INVALID_ARGUMENT);
                }
            }
        }
    }
    snprintf(rec, sizeof(rec), "%s%s", G.path, FAKE_RESET_SUFFIX);
    if (!(f = fopen(rec, "a"))) {
        snprintf(msg, len, "cannot record the reset in %s: %s", rec, strerror(errno));
        RETURN(NVML_ERROR_UNKNOWN);
    }
    for (unsigned k = 0; k < nt; k++)
        fprintf(f, "%s\n", targets[k]->uuid);
    fclose(f);
    RETURN(NVML_SUCCESS);
}
