/*
 * Fake nvidia-smi for kubegpu.fleet tests and the GPU lab.
 * Copyright: kubegpu.fleet contributors
 * GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
 *
 * Like the real tool it dlopen()s libnvidia-ml.so.1 and answers from the NVML API, so it shares
 * the library's failure mechanics: a version mismatch makes it print "Failed to initialize NVML:
 * Driver/library version mismatch" and exit non-zero, a hung nvmlInit hangs it. Exit statuses are
 * the NVML return codes, as documented for the real tool (9 driver not loaded, 12 library not
 * found, 15 GPU lost, 18 version mismatch...).
 *
 * Supported: nvidia-smi (summary table), -L/--list-gpus, -q -x (XML, nvsmi_device_v12 shape),
 * -q (text), --version, -h.
 */
#define _GNU_SOURCE
#include "nvml_fake.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define NVML_FN(ret, name, args) typedef ret(*name##_fn) args; static name##_fn p_##name;
NVML_FN(nvmlReturn_t, nvmlInitWithFlags, (unsigned int))
NVML_FN(nvmlReturn_t, nvmlShutdown, (void))
NVML_FN(const char *, nvmlErrorString, (nvmlReturn_t))
NVML_FN(nvmlReturn_t, nvmlSystemGetDriverVersion, (char *, unsigned int))
NVML_FN(nvmlReturn_t, nvmlSystemGetNVMLVersion, (char *, unsigned int))
NVML_FN(nvmlReturn_t, nvmlSystemGetCudaDriverVersion, (int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetCount_v2, (unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2, (unsigned int, nvmlDevice_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t, char *, unsigned int))
NVML_FN(nvmlReturn_t, nvmlDeviceGetName, (nvmlDevice_t, char *, unsigned int))
NVML_FN(nvmlReturn_t, nvmlDeviceGetSerial, (nvmlDevice_t, char *, unsigned int))
NVML_FN(nvmlReturn_t, nvmlDeviceGetMinorNumber, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetPciInfo_v3, (nvmlDevice_t, nvmlPciInfo_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t, nvmlMemory_v2_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetArchitecture, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetMigMode, (nvmlDevice_t, unsigned int *, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetVirtualizationMode, (nvmlDevice_t, nvmlGpuVirtualizationMode_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetMigDeviceHandleByIndex, (nvmlDevice_t, unsigned int, nvmlDevice_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetGpuInstanceId, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetComputeInstanceId, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetAttributes_v2, (nvmlDevice_t, nvmlDeviceAttributes_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetRemappedRows, (nvmlDevice_t, unsigned int *, unsigned int *, unsigned int *, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetRetiredPages, (nvmlDevice_t, int, unsigned int *, unsigned long long *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetRetiredPagesPendingStatus, (nvmlDevice_t, int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetTotalEccErrors, (nvmlDevice_t, int, int, unsigned long long *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetSramEccErrorStatus, (nvmlDevice_t, nvmlEccSramErrorStatus_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetFieldValues, (nvmlDevice_t, int, nvmlFieldValue_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetRepairStatus, (nvmlDevice_t, nvmlRepairStatus_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetUnrepairableMemoryFlag_v1, (nvmlDevice_t, nvmlUnrepairableMemory_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetRowRemapperHistogram, (nvmlDevice_t, nvmlRowRemapperHistogramValues_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetCurrPcieLinkGeneration, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetMaxPcieLinkGeneration, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetCurrPcieLinkWidth, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetMaxPcieLinkWidth, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetPcieReplayCounter, (nvmlDevice_t, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetCurrentClocksEventReasons, (nvmlDevice_t, unsigned long long *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetGpuFabricInfo, (nvmlDevice_t, nvmlGpuFabricInfo_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetNvLinkState, (nvmlDevice_t, unsigned int, unsigned int *))
NVML_FN(nvmlReturn_t, nvmlDeviceGetNvLinkErrorCounter, (nvmlDevice_t, unsigned int, int, unsigned long long *))
NVML_FN(nvmlReturn_t, kubegpu_fake_reset, (const char *, char *, unsigned int))

static void *lib;

static void *sym(const char *name)
{
    return dlsym(lib, name);
}

static void load_symbols(void)
{
#define LOAD(name) p_##name = (name##_fn)sym(#name)
    LOAD(nvmlInitWithFlags);
    LOAD(nvmlShutdown);
    LOAD(nvmlErrorString);
    LOAD(nvmlSystemGetDriverVersion);
    LOAD(nvmlSystemGetNVMLVersion);
    LOAD(nvmlSystemGetCudaDriverVersion);
    LOAD(nvmlDeviceGetCount_v2);
    LOAD(nvmlDeviceGetHandleByIndex_v2);
    LOAD(nvmlDeviceGetUUID);
    LOAD(nvmlDeviceGetName);
    LOAD(nvmlDeviceGetSerial);
    LOAD(nvmlDeviceGetMinorNumber);
    LOAD(nvmlDeviceGetPciInfo_v3);
    LOAD(nvmlDeviceGetMemoryInfo_v2);
    LOAD(nvmlDeviceGetArchitecture);
    LOAD(nvmlDeviceGetMigMode);
    LOAD(nvmlDeviceGetVirtualizationMode);
    LOAD(nvmlDeviceGetMaxMigDeviceCount);
    LOAD(nvmlDeviceGetMigDeviceHandleByIndex);
    LOAD(nvmlDeviceGetGpuInstanceId);
    LOAD(nvmlDeviceGetComputeInstanceId);
    LOAD(nvmlDeviceGetAttributes_v2);
    LOAD(nvmlDeviceGetRemappedRows);
    LOAD(nvmlDeviceGetRetiredPages);
    LOAD(nvmlDeviceGetRetiredPagesPendingStatus);
    LOAD(nvmlDeviceGetTotalEccErrors);
    LOAD(nvmlDeviceGetSramEccErrorStatus);
    LOAD(nvmlDeviceGetFieldValues);
    LOAD(nvmlDeviceGetRepairStatus);
    LOAD(nvmlDeviceGetUnrepairableMemoryFlag_v1);
    LOAD(nvmlDeviceGetRowRemapperHistogram);
    LOAD(nvmlDeviceGetCurrPcieLinkGeneration);
    LOAD(nvmlDeviceGetMaxPcieLinkGeneration);
    LOAD(nvmlDeviceGetCurrPcieLinkWidth);
    LOAD(nvmlDeviceGetMaxPcieLinkWidth);
    LOAD(nvmlDeviceGetPcieReplayCounter);
    LOAD(nvmlDeviceGetCurrentClocksEventReasons);
    LOAD(nvmlDeviceGetGpuFabricInfo);
    LOAD(nvmlDeviceGetComputeRunningProcesses_v3);
    LOAD(nvmlDeviceGetNvLinkState);
    LOAD(nvmlDeviceGetNvLinkErrorCounter);
    LOAD(kubegpu_fake_reset);
#undef LOAD
}

/* Call through a pointer that may be missing from an older library. */
#define CALL(name, ...) (p_##name ? p_##name(__VA_ARGS__) : NVML_ERROR_FUNCTION_NOT_FOUND)

static const char *errstr(nvmlReturn_t rc)
{
    if (rc == NVML_ERROR_FUNCTION_NOT_FOUND || !p_nvmlErrorString)
        return rc == NVML_ERROR_FUNCTION_NOT_FOUND ? "Function Not Found" : "Unknown Error";
    return p_nvmlErrorString(rc);
}

/* Field text for a failed query: N/A for unsupported, else the NVML error string. */
static const char *fail_text(nvmlReturn_t rc)
{
    return rc == NVML_ERROR_NOT_SUPPORTED ? "N/A" : errstr(rc);
}

static void xml_escape(const char *s, char *out, size_t len)
{
    size_t n = 0;
    for (; *s && n + 7 < len; s++) {
        const char *rep = NULL;
        switch (*s) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        }
        if (rep) {
            memcpy(out + n, rep, strlen(rep));
            n += strlen(rep);
        } else {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

static int exit_code;

/* Exit status for an NVML return code: the code itself; 255 ("other error") when it does not
 * fit, e.g. NVML_ERROR_UNKNOWN (999). */
static int exit_status(int rc)
{
    return (rc < 0 || rc > 254) ? 255 : rc;
}

static void note_error(nvmlReturn_t rc)
{
    if (rc != NVML_SUCCESS && exit_code == 0)
        exit_code = rc;
}

/* ------------------------------------------------------------------------- init */

static int start(void)
{
    nvmlReturn_t rc;
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that "
               "the NVIDIA Display Driver is properly installed and present in your system.\n"
               "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n");
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    load_symbols();
    if (!p_nvmlInitWithFlags) {
        printf("Failed to initialize NVML: Function Not Found\n");
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    }
    rc = p_nvmlInitWithFlags(0);
    if (rc == NVML_SUCCESS)
        return 0;
    if (rc == NVML_ERROR_DRIVER_NOT_LOADED) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
    } else {
        printf("Failed to initialize NVML: %s\n", errstr(rc));
        if (rc == NVML_ERROR_LIB_RM_VERSION_MISMATCH) {
            /* The real tool names the library's version; it comes from the file name. */
            Dl_info info;
            const char *so;
            if (dladdr((void *)p_nvmlInitWithFlags, &info) && info.dli_fname &&
                (so = strstr(info.dli_fname, "libnvidia-ml.so.")) != NULL) {
                char real[4096];
                if (realpath(info.dli_fname, real) && (so = strstr(real, "libnvidia-ml.so.")))
                    printf("NVML library version: %s\n", so + 16);
            }
        }
    }
    return rc;
}

/* ------------------------------------------------------------------------ helpers */

struct gpu {
    nvmlDevice_t h;
    nvmlReturn_t hrc;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlReturn_t uuid_rc, name_rc;
};

static void get_gpu(unsigned i, struct gpu *g)
{
    memset(g, 0, sizeof(*g));
    g->hrc = CALL(nvmlDeviceGetHandleByIndex_v2, i, &g->h);
    if (g->hrc != NVML_SUCCESS)
        return;
    g->uuid_rc = CALL(nvmlDeviceGetUUID, g->h, g->uuid, sizeof(g->uuid));
    if (g->uuid_rc)
        snprintf(g->uuid, sizeof(g->uuid), "%s", fail_text(g->uuid_rc));
    g->name_rc = CALL(nvmlDeviceGetName, g->h, g->name, sizeof(g->name));
    if (g->name_rc)
        snprintf(g->name, sizeof(g->name), "%s", fail_text(g->name_rc));
}

static void handle_error(unsigned i, nvmlReturn_t rc)
{
    fprintf(stderr, "Unable to determine the device handle for GPU%u: %s\n", i, errstr(rc));
    note_error(rc);
}

/* "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb" */
static const char *profile_of(const char *mig_name)
{
    const char *p = strstr(mig_name, " MIG ");
    return p ? p + 5 : mig_name;
}

static const char *arch_name(unsigned a)
{
    switch (a) {
    case NVML_DEVICE_ARCH_KEPLER: return "Kepler";
    case NVML_DEVICE_ARCH_MAXWELL: return "Maxwell";
    case NVML_DEVICE_ARCH_PASCAL: return "Pascal";
    case NVML_DEVICE_ARCH_VOLTA: return "Volta";
    case NVML_DEVICE_ARCH_TURING: return "Turing";
    case NVML_DEVICE_ARCH_AMPERE: return "Ampere";
    case NVML_DEVICE_ARCH_ADA: return "Ada Lovelace";
    case NVML_DEVICE_ARCH_HOPPER: return "Hopper";
    case NVML_DEVICE_ARCH_BLACKWELL: return "Blackwell";
    }
    return "Unknown";
}

static const char *mode_text(unsigned m)
{
    return m == NVML_DEVICE_MIG_ENABLE ? "Enabled" : "Disabled";
}

/* ---------------------------------------------------------------------- -L listing */

static int list_gpus(void)
{
    unsigned count = 0;
    nvmlReturn_t rc = CALL(nvmlDeviceGetCount_v2, &count);
    if (rc) {
        printf("Failed to get GPU count: %s\n", errstr(rc));
        return rc;
    }
    for (unsigned i = 0; i < count; i++) {
        struct gpu g;
        unsigned cur, pend, max = 0;
        get_gpu(i, &g);
        if (g.hrc) {
            handle_error(i, g.hrc);
            continue;
        }
        note_error(g.uuid_rc);
        note_error(g.name_rc);
        printf("GPU %u: %s (UUID: %s)\n", i, g.name, g.uuid);
        if (CALL(nvmlDeviceGetMigMode, g.h, &cur, &pend) != NVML_SUCCESS || cur != NVML_DEVICE_MIG_ENABLE)
            continue;
        if (CALL(nvmlDeviceGetMaxMigDeviceCount, g.h, &max) != NVML_SUCCESS)
            continue;
        for (unsigned j = 0; j < max; j++) {
            nvmlDevice_t m;
            char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
            nvmlReturn_t r = CALL(nvmlDeviceGetMigDeviceHandleByIndex, g.h, j, &m);
            if (r == NVML_ERROR_NOT_FOUND)
                continue;
            if (r) {
                note_error(r);
                continue;
            }
            if ((r = CALL(nvmlDeviceGetUUID, m, uuid, sizeof(uuid))))
                snprintf(uuid, sizeof(uuid), "%s", fail_text(r));
            if ((r = CALL(nvmlDeviceGetName, m, name, sizeof(name))))
                snprintf(name, sizeof(name), "%s", fail_text(r));
            printf("  MIG %-11s Device %2u: (UUID: %s)\n", profile_of(name), j, uuid);
        }
    }
    return exit_code;
}

/* ------------------------------------------------------------------------- -q -x */

static void xml_text(int depth, const char *tag, const char *value)
{
    char esc[512];
    xml_escape(value, esc, sizeof(esc));
    printf("%.*s<%s>%s</%s>\n", depth, "\t\t\t\t\t\t\t\t", tag, esc, tag);
}

static void xml_open(int depth, const char *tag)
{
    printf("%.*s<%s>\n", depth, "\t\t\t\t\t\t\t\t", tag);
}

static void xml_close(int depth, const char *tag)
{
    printf("%.*s</%s>\n", depth, "\t\t\t\t\t\t\t\t", tag);
}

static void xml_uint(int depth, const char *tag, nvmlReturn_t rc, unsigned long long v, const char *unit)
{
    char buf[64];
    if (rc)
        snprintf(buf, sizeof(buf), "%s", fail_text(rc));
    else
        snprintf(buf, sizeof(buf), "%llu%s", v, unit ? unit : "");
    xml_text(depth, tag, buf);
}

static void xml_memory(int depth, const char *tag, nvmlDevice_t h)
{
    nvmlMemory_v2_t mem;
    nvmlReturn_t rc;
    memset(&mem, 0, sizeof(mem));
    mem.version = nvmlMemory_v2;
    rc = CALL(nvmlDeviceGetMemoryInfo_v2, h, &mem);
    xml_open(depth, tag);
    xml_uint(depth + 1, "total", rc, mem.total >> 20, " MiB");
    xml_uint(depth + 1, "reserved", rc, mem.reserved >> 20, " MiB");
    xml_uint(depth + 1, "used", rc, mem.used >> 20, " MiB");
    xml_uint(depth + 1, "free", rc, mem.free >> 20, " MiB");
    xml_close(depth, tag);
    note_error(rc == NVML_ERROR_NOT_SUPPORTED ? NVML_SUCCESS : rc);
}

static void xml_mig_devices(nvmlDevice_t h, unsigned cur)
{
    unsigned max = 0;
    int any = 0;
    if (cur != NVML_DEVICE_MIG_ENABLE || CALL(nvmlDeviceGetMaxMigDeviceCount, h, &max) != NVML_SUCCESS) {
        printf("\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>\n");
        return;
    }
    for (unsigned j = 0; j < max; j++) {
        nvmlDevice_t m;
        unsigned gi = 0, ci = 0;
        nvmlDeviceAttributes_t a;
        nvmlReturn_t rc = CALL(nvmlDeviceGetMigDeviceHandleByIndex, h, j, &m), grc, crc, arc;
        if (rc == NVML_ERROR_NOT_FOUND)
            continue;
        if (rc) {
            note_error(rc);
            continue;
        }
        if (!any)
            xml_open(2, "mig_devices");
        any = 1;
        memset(&a, 0, sizeof(a));
        grc = CALL(nvmlDeviceGetGpuInstanceId, m, &gi);
        crc = CALL(nvmlDeviceGetComputeInstanceId, m, &ci);
        arc = CALL(nvmlDeviceGetAttributes_v2, m, &a);
        note_error(grc);
        note_error(crc);
        xml_open(3, "mig_device");
        xml_uint(4, "index", NVML_SUCCESS, j, NULL);
        xml_uint(4, "gpu_instance_id", grc, gi, NULL);
        xml_uint(4, "compute_instance_id", crc, ci, NULL);
        xml_open(4, "device_attributes");
        xml_open(5, "shared");
        xml_uint(6, "multiprocessor_count", arc, a.multiprocessorCount, NULL);
        xml_uint(6, "copy_engine_count", arc, a.sharedCopyEngineCount, NULL);
        xml_uint(6, "encoder_count", arc, a.sharedEncoderCount, NULL);
        xml_uint(6, "decoder_count", arc, a.sharedDecoderCount, NULL);
        xml_uint(6, "ofa_count", arc, a.sharedOfaCount, NULL);
        xml_uint(6, "jpg_count", arc, a.sharedJpegCount, NULL);
        xml_close(5, "shared");
        xml_close(4, "device_attributes");
        xml_open(4, "ecc_error_count");
        xml_open(5, "volatile_count");
        xml_text(6, "sram_uncorrectable", "0");
        xml_close(5, "volatile_count");
        xml_close(4, "ecc_error_count");
        xml_memory(4, "fb_memory_usage", m);
        xml_close(3, "mig_device");
    }
    if (any)
        xml_close(2, "mig_devices");
    else
        printf("\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>\n");
}

static void xml_repair(nvmlDevice_t h);
static void xml_histogram(nvmlDevice_t h);

static const char *yes_no(unsigned v)
{
    return v ? "Yes" : "No";
}

/* ECC counters in the R570+ layout (nvsmi_device_v12): SRAM from nvmlDeviceGetSramEccErrorStatus,
 * DRAM = the location-independent total minus SRAM (the fake's NVML keeps no DRAM-only counter). */
static void xml_ecc_section(int depth, const char *tag, nvmlDevice_t h, int counter, int aggregate)
{
    unsigned long long unc = 0, cor = 0, parity = 0, secded = 0;
    nvmlEccSramErrorStatus_t sram;
    nvmlReturn_t urc = CALL(nvmlDeviceGetTotalEccErrors, h, 1, counter, &unc);
    nvmlReturn_t crc = CALL(nvmlDeviceGetTotalEccErrors, h, 0, counter, &cor);
    nvmlReturn_t src;
    memset(&sram, 0, sizeof(sram));
    sram.version = nvmlEccSramErrorStatus_v1;
    src = CALL(nvmlDeviceGetSramEccErrorStatus, h, &sram);
    if (!src) {
        parity = aggregate ? sram.aggregateUncParity : sram.volatileUncParity;
        secded = aggregate ? sram.aggregateUncSecDed : sram.volatileUncSecDed;
    }
    xml_open(depth, tag);
    xml_uint(depth + 1, "sram_correctable", crc, 0, NULL);
    xml_uint(depth + 1, "sram_uncorrectable_parity", src ? src : urc, parity, NULL);
    xml_uint(depth + 1, "sram_uncorrectable_secded", src ? src : urc, secded, NULL);
    xml_uint(depth + 1, "dram_correctable", crc, cor, NULL);
    xml_uint(depth + 1, "dram_uncorrectable", urc, unc >= parity + secded ? unc - parity - secded : 0, NULL);
    if (aggregate)
        xml_text(depth + 1, "sram_threshold_exceeded", src ? fail_text(src) : yes_no(sram.bThresholdExceeded));
    xml_close(depth, tag);
}

static void xml_health(nvmlDevice_t h)
{
    unsigned corr = 0, unc = 0, pending = 0, failure = 0, sbe = 0, dbe = 0;
    int pend_pages = 0;
    nvmlReturn_t rc, src, drc, prc;
    unsigned long long probe = 0;
    rc = CALL(nvmlDeviceGetTotalEccErrors, h, 1, 0, &probe);
    xml_open(2, "ecc_mode");
    xml_text(3, "current_ecc", rc ? "N/A" : "Enabled");
    xml_text(3, "pending_ecc", rc ? "N/A" : "Enabled");
    xml_close(2, "ecc_mode");
    xml_open(2, "ecc_errors");
    xml_ecc_section(3, "volatile", h, 0, 0);
    xml_ecc_section(3, "aggregate", h, 1, 1);
    xml_repair(h);
    xml_close(2, "ecc_errors");
    /* count only: a NULL buffer answers INSUFFICIENT_SIZE with the count, or SUCCESS for 0 */
    src = CALL(nvmlDeviceGetRetiredPages, h, 0, &sbe, NULL);
    drc = CALL(nvmlDeviceGetRetiredPages, h, 1, &dbe, NULL);
    prc = CALL(nvmlDeviceGetRetiredPagesPendingStatus, h, &pend_pages);
    if (src == NVML_ERROR_INSUFFICIENT_SIZE)
        src = NVML_SUCCESS;
    if (drc == NVML_ERROR_INSUFFICIENT_SIZE)
        drc = NVML_SUCCESS;
    xml_open(2, "retired_pages");
    xml_open(3, "multiple_single_bit_retirement");
    xml_uint(4, "retired_count", src, sbe, NULL);
    xml_text(4, "retired_pagelist", "N/A");
    xml_close(3, "multiple_single_bit_retirement");
    xml_open(3, "double_bit_retirement");
    xml_uint(4, "retired_count", drc, dbe, NULL);
    xml_text(4, "retired_pagelist", "N/A");
    xml_close(3, "double_bit_retirement");
    xml_text(3, "pending_blacklist", prc ? fail_text(prc) : yes_no((unsigned)pend_pages));
    xml_text(3, "pending_retirement", prc ? fail_text(prc) : yes_no((unsigned)pend_pages));
    xml_close(2, "retired_pages");
    rc = CALL(nvmlDeviceGetRemappedRows, h, &corr, &unc, &pending, &failure);
    if (rc) {
        /* the real tool prints the section as N/A on GPUs without a row remapper */
        xml_text(2, "remapped_rows", fail_text(rc));
        return;
    }
    xml_open(2, "remapped_rows");
    xml_uint(3, "remapped_row_corr", NVML_SUCCESS, corr, NULL);
    xml_uint(3, "remapped_row_unc", NVML_SUCCESS, unc, NULL);
    xml_text(3, "remapped_row_pending", yes_no(pending));
    xml_text(3, "remapped_row_failure", yes_no(failure));
    xml_histogram(h);
    xml_close(2, "remapped_rows");
}

/* R570+ elements, in the shape of a real R580 document (tests/fixtures/real-gpu): */

static const char *const RECOVERY_TEXT[] = { "None", "GPU Reset", "Node Reboot", "Drain P2P",
                                             "Drain and Reset", "Recover IMEX Domain", "Bus Reset",
                                             "System Reboot" };

static void xml_recovery(nvmlDevice_t h)
{
    nvmlFieldValue_t v[3];
    nvmlReturn_t rc;
    memset(v, 0, sizeof(v));
    v[0].fieldId = NVML_FI_DEV_RESET_STATUS;
    v[1].fieldId = NVML_FI_DEV_DRAIN_AND_RESET_STATUS;
    v[2].fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
    rc = CALL(nvmlDeviceGetFieldValues, h, 3, v);
    if (rc)
        return;
    /* R580 leaves out the deprecated reset status; the R570 document prints it */
    if (v[0].nvmlReturn != NVML_ERROR_DEPRECATED || v[1].nvmlReturn != NVML_ERROR_DEPRECATED) {
        xml_open(2, "gpu_reset_status");
        xml_text(3, "reset_required", v[0].nvmlReturn ? fail_text(v[0].nvmlReturn) : yes_no(v[0].value.uiVal));
        xml_text(3, "drain_and_reset_recommended",
                 v[1].nvmlReturn ? fail_text(v[1].nvmlReturn) : yes_no(v[1].value.uiVal));
        xml_close(2, "gpu_reset_status");
    }
    xml_text(2, "gpu_recovery_action", v[2].nvmlReturn ? fail_text(v[2].nvmlReturn) :
             v[2].value.uiVal < 8 ? RECOVERY_TEXT[v[2].value.uiVal] : "Unknown");
}

static void xml_repair(nvmlDevice_t h)
{
    nvmlRepairStatus_t st;
    nvmlUnrepairableMemory_t um;
    nvmlReturn_t rc, urc;
    memset(&st, 0, sizeof(st));
    st.version = nvmlRepairStatus_v1;
    memset(&um, 0, sizeof(um));
    um.version = nvmlUnrepairableMemory_v1;
    rc = CALL(nvmlDeviceGetRepairStatus, h, &st);
    urc = CALL(nvmlDeviceGetUnrepairableMemoryFlag_v1, h, &um);
    xml_text(3, "channel_repair_pending", rc ? fail_text(rc) : yes_no(st.bChannelRepairPending));
    xml_text(3, "tpc_repair_pending", rc ? fail_text(rc) : yes_no(st.bTpcRepairPending));
    xml_text(3, "unrepairable_memory", urc ? fail_text(urc) : yes_no(um.unrepairableMemory));
}

static void xml_histogram(nvmlDevice_t h)
{
    nvmlRowRemapperHistogramValues_t v;
    nvmlReturn_t rc;
    memset(&v, 0, sizeof(v));
    if ((rc = CALL(nvmlDeviceGetRowRemapperHistogram, h, &v)))
        return;
    xml_open(3, "row_remapper_histogram");
    xml_uint(4, "row_remapper_histogram_max", rc, v.max, " bank(s)");
    xml_uint(4, "row_remapper_histogram_high", rc, v.high, " bank(s)");
    xml_uint(4, "row_remapper_histogram_partial", rc, v.partial, " bank(s)");
    xml_uint(4, "row_remapper_histogram_low", rc, v.low, " bank(s)");
    xml_uint(4, "row_remapper_histogram_none", rc, v.none, " bank(s)");
    xml_close(3, "row_remapper_histogram");
}

static void xml_pcie(nvmlDevice_t h)
{
    unsigned gen = 0, mgen = 0, width = 0, mwidth = 0, replay = 0;
    nvmlReturn_t grc = CALL(nvmlDeviceGetCurrPcieLinkGeneration, h, &gen);
    nvmlReturn_t mgrc = CALL(nvmlDeviceGetMaxPcieLinkGeneration, h, &mgen);
    nvmlReturn_t wrc = CALL(nvmlDeviceGetCurrPcieLinkWidth, h, &width);
    nvmlReturn_t mwrc = CALL(nvmlDeviceGetMaxPcieLinkWidth, h, &mwidth);
    nvmlReturn_t rrc = CALL(nvmlDeviceGetPcieReplayCounter, h, &replay);
    nvmlFieldValue_t v;
    memset(&v, 0, sizeof(v));
    v.fieldId = NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER;
    if (CALL(nvmlDeviceGetFieldValues, h, 1, &v))
        v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    xml_open(3, "pci_gpu_link_info");
    xml_open(4, "pcie_gen");
    xml_uint(5, "max_link_gen", mgrc, mgen, NULL);
    xml_uint(5, "current_link_gen", grc, gen, NULL);
    xml_close(4, "pcie_gen");
    xml_open(4, "link_widths");
    xml_uint(5, "max_link_width", mwrc, mwidth, "x");
    xml_uint(5, "current_link_width", wrc, width, "x");
    xml_close(4, "link_widths");
    xml_close(3, "pci_gpu_link_info");
    xml_uint(3, "replay_counter", rrc, replay, NULL);
    xml_uint(3, "replay_rollover_counter", v.nvmlReturn, v.value.uiVal, NULL);
}

static const char *const CLOCK_NAMES[] = {
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting" };

static void xml_clocks(nvmlDevice_t h)
{
    unsigned long long reasons = 0;
    char tag[80];
    nvmlReturn_t rc = CALL(nvmlDeviceGetCurrentClocksEventReasons, h, &reasons);
    xml_open(2, "clocks_event_reasons");
    for (unsigned i = 0; i < 9; i++) {
        snprintf(tag, sizeof(tag), "clocks_event_reason_%s", CLOCK_NAMES[i]);
        xml_text(3, tag, rc ? fail_text(rc) : (reasons >> i) & 1 ? "Active" : "Not Active");
    }
    xml_close(2, "clocks_event_reasons");
}

static void xml_fabric(nvmlDevice_t h)
{
    static const char *const STATES[] = { "N/A", "Not Started", "In Progress", "Completed" };
    nvmlGpuFabricInfo_t info;
    nvmlReturn_t rc;
    memset(&info, 0, sizeof(info));
    rc = CALL(nvmlDeviceGetGpuFabricInfo, h, &info);
    xml_open(2, "fabric");
    xml_text(3, "state", rc || info.state > 3 ? "N/A" : STATES[info.state]);
    xml_text(3, "status", rc ? "N/A" : info.status ? errstr(info.status) : "Success");
    xml_close(2, "fabric");
}

static void xml_processes(nvmlDevice_t h)
{
    nvmlProcessInfo_t procs[16];
    unsigned n = 16;
    char buf[32];
    nvmlReturn_t rc = CALL(nvmlDeviceGetComputeRunningProcesses_v3, h, &n, procs);
    xml_open(2, "processes");
    for (unsigned k = 0; !rc && k < n; k++) {
        xml_open(3, "process_info");
        xml_text(4, "gpu_instance_id", "N/A");
        xml_text(4, "compute_instance_id", "N/A");
        snprintf(buf, sizeof(buf), "%u", procs[k].pid);
        xml_text(4, "pid", buf);
        xml_text(4, "type", "C");
        xml_text(4, "process_name", "python3");
        xml_uint(4, "used_memory", NVML_SUCCESS, procs[k].usedGpuMemory >> 20, " MiB");
        xml_close(3, "process_info");
    }
    xml_close(2, "processes");
}

/* nvidia-smi's words for nvmlGpuVirtualizationMode_t, as its -q output prints them */
static const char *virt_text(nvmlGpuVirtualizationMode_t mode)
{
    static const char *const names[] = { "None", "Pass-Through", "VGPU", "Host VGPU", "Host VSGA" };
    return mode < 5 ? names[mode] : "Unknown Error";
}

static void xml_virtualization(nvmlDevice_t h)
{
    nvmlGpuVirtualizationMode_t mode = 0;
    nvmlReturn_t rc = CALL(nvmlDeviceGetVirtualizationMode, h, &mode);
    if (rc != NVML_ERROR_NOT_SUPPORTED)
        note_error(rc);
    xml_open(2, "gpu_virtualization_mode");
    xml_text(3, "virtualization_mode", rc ? fail_text(rc) : virt_text(mode));
    xml_text(3, "host_vgpu_mode", "N/A");
    xml_close(2, "gpu_virtualization_mode");
}

static void xml_gpu(unsigned i)
{
    struct gpu g;
    nvmlPciInfo_t pci;
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE + 8], buf[64];
    unsigned minor = 0, arch = 0, cur = 0, pend = 0;
    nvmlReturn_t prc, rc, mrc;
    get_gpu(i, &g);
    if (g.hrc) {
        handle_error(i, g.hrc);
        return;
    }
    note_error(g.uuid_rc);
    note_error(g.name_rc);
    memset(&pci, 0, sizeof(pci));
    prc = CALL(nvmlDeviceGetPciInfo_v3, g.h, &pci);
    note_error(prc);
    printf("\t<gpu id=\"%s\">\n", prc ? fail_text(prc) : pci.busId);
    xml_text(2, "product_name", g.name);
    xml_text(2, "product_brand", "NVIDIA");
    rc = CALL(nvmlDeviceGetArchitecture, g.h, &arch);
    xml_text(2, "product_architecture", rc ? fail_text(rc) : arch_name(arch));
    xml_text(2, "display_mode", "Disabled");
    xml_text(2, "display_active", "Disabled");
    xml_text(2, "persistence_mode", "Enabled");
    xml_text(2, "addressing_mode", "None");
    mrc = CALL(nvmlDeviceGetMigMode, g.h, &cur, &pend);
    if (mrc != NVML_ERROR_NOT_SUPPORTED)
        note_error(mrc);
    xml_open(2, "mig_mode");
    xml_text(3, "current_mig", mrc ? fail_text(mrc) : mode_text(cur));
    xml_text(3, "pending_mig", mrc ? fail_text(mrc) : mode_text(pend));
    xml_close(2, "mig_mode");
    xml_mig_devices(g.h, mrc ? NVML_DEVICE_MIG_DISABLE : cur);
    xml_virtualization(g.h);
    xml_text(2, "accounting_mode", "Disabled");
    xml_text(2, "accounting_mode_buffer_size", "4000");
    xml_open(2, "driver_model");
    xml_text(3, "current_dm", "N/A");
    xml_text(3, "pending_dm", "N/A");
    xml_close(2, "driver_model");
    xml_recovery(g.h);
    rc = CALL(nvmlDeviceGetSerial, g.h, serial, sizeof(serial));
    xml_text(2, "serial", rc ? fail_text(rc) : serial);
    xml_text(2, "uuid", g.uuid);
    rc = CALL(nvmlDeviceGetMinorNumber, g.h, &minor);
    note_error(rc == NVML_ERROR_NOT_SUPPORTED ? NVML_SUCCESS : rc);
    xml_uint(2, "minor_number", rc, minor, NULL);
    xml_text(2, "vbios_version", "96.00.99.00.01");
    xml_text(2, "multigpu_board", "No");
    snprintf(buf, sizeof(buf), "0x%x", pci.bus << 8);
    xml_text(2, "board_id", buf);
    xml_uint(2, "gpu_module_id", NVML_SUCCESS, i + 1, NULL);
    xml_open(2, "pci");
    snprintf(buf, sizeof(buf), "%02X", pci.bus);
    xml_text(3, "pci_bus", prc ? fail_text(prc) : buf);
    snprintf(buf, sizeof(buf), "%02X", pci.device);
    xml_text(3, "pci_device", prc ? fail_text(prc) : buf);
    snprintf(buf, sizeof(buf), "%04X", pci.domain);
    xml_text(3, "pci_domain", prc ? fail_text(prc) : buf);
    xml_text(3, "pci_base_class", "3");
    xml_text(3, "pci_sub_class", "2");
    snprintf(buf, sizeof(buf), "%08X", pci.pciDeviceId);
    xml_text(3, "pci_device_id", prc ? fail_text(prc) : buf);
    xml_text(3, "pci_bus_id", prc ? fail_text(prc) : pci.busId);
    snprintf(buf, sizeof(buf), "%08X", pci.pciSubSystemId);
    xml_text(3, "pci_sub_system_id", prc ? fail_text(prc) : buf);
    xml_pcie(g.h);
    xml_close(2, "pci");
    xml_clocks(g.h);
    xml_memory(2, "fb_memory_usage", g.h);
    xml_text(2, "compute_mode", "Default");
    xml_health(g.h);
    xml_fabric(g.h);
    xml_processes(g.h);
    xml_close(1, "gpu");
}

static int query_xml(void)
{
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], cuda[32], ts[64];
    unsigned count = 0;
    int cv = 0;
    time_t now = time(NULL);
    nvmlReturn_t rc = CALL(nvmlDeviceGetCount_v2, &count);
    if (rc) {
        printf("Failed to get GPU count: %s\n", errstr(rc));
        return rc;
    }
    if ((rc = CALL(nvmlSystemGetDriverVersion, version, sizeof(version))))
        snprintf(version, sizeof(version), "%s", fail_text(rc));
    if ((rc = CALL(nvmlSystemGetCudaDriverVersion, &cv)))
        snprintf(cuda, sizeof(cuda), "%s", fail_text(rc));
    else
        snprintf(cuda, sizeof(cuda), "%d.%d", cv / 1000, (cv % 1000) / 10);
    strftime(ts, sizeof(ts), "%a %b %e %H:%M:%S %Y", localtime(&now));
    printf("<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v12.dtd\">\n");
    printf("<nvidia_smi_log>\n");
    xml_text(1, "timestamp", ts);
    xml_text(1, "driver_version", version);
    xml_text(1, "cuda_version", cuda);
    xml_uint(1, "attached_gpus", NVML_SUCCESS, count, NULL);
    for (unsigned i = 0; i < count; i++)
        xml_gpu(i);
    printf("</nvidia_smi_log>\n");
    return exit_code;
}

/* ------------------------------------------------------------------------- -q text */

static int query_text(void)
{
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], cuda[32], ts[64];
    unsigned count = 0;
    int cv = 0;
    time_t now = time(NULL);
    nvmlReturn_t rc = CALL(nvmlDeviceGetCount_v2, &count);
    if (rc) {
        printf("Failed to get GPU count: %s\n", errstr(rc));
        return rc;
    }
    if ((rc = CALL(nvmlSystemGetDriverVersion, version, sizeof(version))))
        snprintf(version, sizeof(version), "%s", fail_text(rc));
    if ((rc = CALL(nvmlSystemGetCudaDriverVersion, &cv)))
        snprintf(cuda, sizeof(cuda), "%s", fail_text(rc));
    else
        snprintf(cuda, sizeof(cuda), "%d.%d", cv / 1000, (cv % 1000) / 10);
    strftime(ts, sizeof(ts), "%a %b %e %H:%M:%S %Y", localtime(&now));
    printf("\n==============NVSMI LOG==============\n\n");
    printf("%-38s: %s\n%-38s: %s\n%-38s: %s\n\n%-38s: %u\n", "Timestamp", ts, "Driver Version", version,
           "CUDA Version", cuda, "Attached GPUs", count);
    for (unsigned i = 0; i < count; i++) {
        struct gpu g;
        nvmlPciInfo_t pci;
        unsigned minor = 0, cur = 0, pend = 0;
        get_gpu(i, &g);
        if (g.hrc) {
            handle_error(i, g.hrc);
            continue;
        }
        memset(&pci, 0, sizeof(pci));
        rc = CALL(nvmlDeviceGetPciInfo_v3, g.h, &pci);
        printf("GPU %s\n", rc ? fail_text(rc) : pci.busId);
        printf("    %-34s: %s\n", "Product Name", g.name);
        rc = CALL(nvmlDeviceGetMigMode, g.h, &cur, &pend);
        printf("    MIG Mode\n        %-30s: %s\n        %-30s: %s\n", "Current",
               rc ? fail_text(rc) : mode_text(cur), "Pending", rc ? fail_text(rc) : mode_text(pend));
        printf("    %-34s: %s\n", "GPU UUID", g.uuid);
        rc = CALL(nvmlDeviceGetMinorNumber, g.h, &minor);
        if (rc)
            printf("    %-34s: %s\n", "Minor Number", fail_text(rc));
        else
            printf("    %-34s: %u\n", "Minor Number", minor);
        printf("\n");
    }
    return exit_code;
}

/* --------------------------------------------------------------------- summary table */

static int summary(void)
{
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], cuda[32], ts[64];
    unsigned count = 0;
    int cv = 0;
    time_t now = time(NULL);
    nvmlReturn_t rc = CALL(nvmlDeviceGetCount_v2, &count);
    if (rc) {
        printf("Failed to get GPU count: %s\n", errstr(rc));
        return rc;
    }
    if ((rc = CALL(nvmlSystemGetDriverVersion, version, sizeof(version))))
        snprintf(version, sizeof(version), "%s", fail_text(rc));
    if ((rc = CALL(nvmlSystemGetCudaDriverVersion, &cv)))
        snprintf(cuda, sizeof(cuda), "%s", fail_text(rc));
    else
        snprintf(cuda, sizeof(cuda), "%d.%d", cv / 1000, (cv % 1000) / 10);
    strftime(ts, sizeof(ts), "%a %b %e %H:%M:%S %Y", localtime(&now));
    printf("%s\n", ts);
    printf("+-----------------------------------------------------------------------------------------+\n");
    printf("| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|\n", version, version, cuda);
    printf("|-----------------------------------------+------------------------+----------------------+\n");
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    printf("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n");
    printf("|                                         |                        |               MIG M. |\n");
    printf("|=========================================+========================+======================|\n");
    for (unsigned i = 0; i < count; i++) {
        struct gpu g;
        nvmlPciInfo_t pci;
        nvmlMemory_v2_t mem;
        unsigned cur = 0, pend = 0;
        nvmlReturn_t mrc;
        get_gpu(i, &g);
        if (g.hrc) {
            handle_error(i, g.hrc);
            continue;
        }
        memset(&pci, 0, sizeof(pci));
        memset(&mem, 0, sizeof(mem));
        mem.version = nvmlMemory_v2;
        rc = CALL(nvmlDeviceGetPciInfo_v3, g.h, &pci);
        note_error(rc);
        CALL(nvmlDeviceGetMemoryInfo_v2, g.h, &mem);
        mrc = CALL(nvmlDeviceGetMigMode, g.h, &cur, &pend);
        printf("| %3u  %-31.31sOn  |%19s Off |                    0 |\n", i, g.name,
               rc ? "ERR!" : pci.busId);
        printf("| N/A   35C    P0             70W /  700W |%8lluMiB / %6lluMiB |      0%%      Default |\n",
               (mem.used + mem.reserved) >> 20, mem.total >> 20);
        printf("|                                         |                        |%21s |\n",
               mrc ? "N/A" : mode_text(cur));
        printf("+-----------------------------------------+------------------------+----------------------+\n");
    }
    printf("\n+-----------------------------------------------------------------------------------------+\n");
    printf("| Processes:                                                                              |\n");
    printf("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n");
    printf("|        ID   ID                                                               Usage      |\n");
    printf("|=========================================================================================|\n");
    printf("|  No running processes found                                                             |\n");
    printf("+-----------------------------------------------------------------------------------------+\n");
    return exit_code;
}

static int version_info(void)
{
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "N/A", nvml[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "N/A";
    int cv = 0;
    CALL(nvmlSystemGetDriverVersion, version, sizeof(version));
    CALL(nvmlSystemGetNVMLVersion, nvml, sizeof(nvml));
    CALL(nvmlSystemGetCudaDriverVersion, &cv);
    printf("NVIDIA-SMI version  : %s\n", version);
    printf("NVML version        : %s\n", strchr(nvml, '.') ? strchr(nvml, '.') + 1 : nvml);
    printf("DRIVER version      : %s\n", version);
    printf("CUDA Version        : %d.%d\n", cv / 1000, (cv % 1000) / 10);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "NVIDIA System Management Interface -- kubegpu.fleet fake\n\n"
               "    nvidia-smi [OPTION]\n\n"
               "    -L,  --list-gpus      Display a list of GPUs connected to the system.\n"
               "    -q,  --query          Display GPU or Unit info.\n"
               "    -x,  --xml-format     Produce XML output (with -q).\n"
               "    -r,  --gpu-reset      Reset the GPUs named by -i (all without -i).\n"
               "    -i,  --id=            Target GPUs: indices, PCI bus ids or UUIDs, comma-separated.\n"
               "    nvlink -s | -e        NVLink status / error counters.\n"
               "         --version        Print version information.\n"
               "    -h,  --help           Print usage information and exit.\n");
}

/* nvidia-smi nvlink -s / -e: per GPU, "\t Link N: <state>" and "\t Link N: Replay Errors: n"... */
static const char *const NVLINK_COUNTER_TEXT[] = { "Replay Errors", "Recovery Errors", "CRC Flit Errors",
                                                   "CRC Data Errors", "ECC Data Errors" };

static int nvlink_cmd(int errors)
{
    unsigned count = 0;
    nvmlReturn_t rc = CALL(nvmlDeviceGetCount_v2, &count);
    if (rc) {
        printf("Failed to get GPU count: %s\n", errstr(rc));
        return rc;
    }
    for (unsigned i = 0; i < count; i++) {
        struct gpu g;
        get_gpu(i, &g);
        if (g.hrc) {
            handle_error(i, g.hrc);
            continue;
        }
        printf("GPU %u: %s (UUID: %s)\n", i, g.name, g.uuid);
        for (unsigned link = 0; link < 64; link++) {
            unsigned active = 0;
            rc = CALL(nvmlDeviceGetNvLinkState, g.h, link, &active);
            if (rc)
                break;  /* NOT_SUPPORTED on link 0: no NVLink; INVALID_ARGUMENT: past the last */
            if (!errors) {
                printf("\t Link %u: %s\n", link, active ? "26.562 GB/s" : "<inactive>");
                continue;
            }
            if (!active)
                continue;
            for (int c = 0; c < 5; c++) {
                unsigned long long v = 0;
                if (CALL(nvmlDeviceGetNvLinkErrorCounter, g.h, link, c, &v) == NVML_SUCCESS)
                    printf("\t Link %u: %s: %llu\n", link, NVLINK_COUNTER_TEXT[c], v);
            }
        }
    }
    return exit_code;
}

/* nvidia-smi -r [-i id[,id...]]: ids are indices or bus ids; without -i every GPU. */
static int reset_cmd(const char *ids)
{
    char buses[1024] = "", msg[512] = "", tmp[256];
    unsigned count = 0;
    nvmlReturn_t rc;
    if (geteuid() != 0 && !getenv("KUBEGPU_FAKE_NVML_ALLOW_USER_RESET")) {
        printf("Unable to reset GPU: Insufficient Permissions\n");
        return NVML_ERROR_NO_PERMISSION;
    }
    if ((rc = CALL(nvmlDeviceGetCount_v2, &count))) {
        printf("Failed to get GPU count: %s\n", errstr(rc));
        return rc;
    }
    for (unsigned i = 0; i < count; i++) {
        struct gpu g;
        nvmlPciInfo_t pci;
        int wanted = ids == NULL;
        get_gpu(i, &g);
        if (g.hrc)
            continue;
        memset(&pci, 0, sizeof(pci));
        if (CALL(nvmlDeviceGetPciInfo_v3, g.h, &pci))
            continue;
        if (ids) {
            char list[1024], *save = NULL;
            snprintf(list, sizeof(list), "%s", ids);
            for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                char idx[16];
                snprintf(idx, sizeof(idx), "%u", i);
                if (!strcasecmp(tok, idx) || !strcasecmp(tok, pci.busId) || !strcasecmp(tok, g.uuid) ||
                    (strlen(tok) < strlen(pci.busId) && !strcasecmp(tok, pci.busId + strlen(pci.busId) - strlen(tok))))
                    wanted = 1;
            }
        }
        if (!wanted)
            continue;
        snprintf(tmp, sizeof(tmp), "%s%s", buses[0] ? "," : "", pci.busId);
        strncat(buses, tmp, sizeof(buses) - strlen(buses) - 1);
    }
    if (!buses[0]) {
        printf("No devices were found\n");
        return NVML_ERROR_NOT_FOUND;
    }
    if (!p_kubegpu_fake_reset) {
        printf("Resetting GPUs is not supported by this libnvidia-ml\n");
        return NVML_ERROR_NOT_SUPPORTED;
    }
    rc = p_kubegpu_fake_reset(buses, msg, sizeof(msg));
    if (rc) {
        printf("%s\n", msg);
        if (rc == NVML_ERROR_IN_USE)
            printf("\n1 device is currently being used by one or more other processes (e.g., Fabric Manager, "
                   "CUDA application, graphics application such as an X server, or a monitoring application "
                   "such as another instance of nvidia-smi). Please first kill all processes using this "
                   "device and all compute applications running in the system.\n");
        return rc;
    }
    {
        char list[1024], *save = NULL;
        snprintf(list, sizeof(list), "%s", buses);
        for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            printf("GPU %s was successfully reset.\n", tok);
    }
    printf("All done.\n");
    return 0;
}

int main(int argc, char **argv)
{
    int list = 0, query = 0, xml = 0, version = 0, rc, nvlink = 0, nvlink_errors = 0, reset = 0;
    const char *ids = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "nvlink") && i == 1)
            nvlink = 1;
        else if (nvlink && (!strcmp(a, "-e") || !strcmp(a, "--errorcounters")))
            nvlink_errors = 1;
        else if (nvlink && (!strcmp(a, "-s") || !strcmp(a, "--status")))
            nvlink_errors = 0;
        else if (!strcmp(a, "-r") || !strcmp(a, "--gpu-reset"))
            reset = 1;
        else if ((!strcmp(a, "-i") || !strcmp(a, "--id")) && i + 1 < argc)
            ids = argv[++i];
        else if (!strncmp(a, "--id=", 5))
            ids = a + 5;
        else if (!strcmp(a, "-L") || !strcmp(a, "--list-gpus"))
            list = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--query"))
            query = 1;
        else if (!strcmp(a, "-x") || !strcmp(a, "--xml-format"))
            xml = 1;
        else if (!strcmp(a, "-qx") || !strcmp(a, "-xq"))
            query = xml = 1;
        else if (!strcmp(a, "--version"))
            version = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
            return NVML_ERROR_INVALID_ARGUMENT;
        }
    }
    if (xml && !query) {
        fprintf(stderr, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if ((rc = start()) != 0)
        return exit_status(rc);
    if (nvlink)
        rc = nvlink_cmd(nvlink_errors);
    else if (reset)
        rc = reset_cmd(ids);
    else if (version)
        rc = version_info();
    else if (list)
        rc = list_gpus();
    else if (query)
        rc = xml ? query_xml() : query_text();
    else
        rc = summary();
    fflush(stdout);
    CALL(nvmlShutdown);
    return exit_status(rc);
}
