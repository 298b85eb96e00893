/* A fake NVIDIA driver for repro's tests: the CUDA driver API functions and the NVML
 * functions repro calls, answering from environment variables the test sets, so that the
 * fingerprint's GPU probes run on a machine without a GPU. tests/fakegpu_cli.rs builds this
 * file twice with `cc -shared -fPIC`, as libcuda.so.VERSION (soname libcuda.so.1) and as
 * libnvidia-ml.so.VERSION (soname libnvidia-ml.so.1), and puts them first on LD_LIBRARY_PATH.
 *
 * Both builds hold both APIs; each process uses the CUDA half of the one and the NVML half
 * of the other. They share no state: every answer is read from the environment at the
 * call, so a device's UUID is the same through CUDA and NVML:
 *
 *   FAKEGPU_COUNT            devices CUDA sees (default 1)
 *   FAKEGPU_CUDA_VERSION     cuDriverGetVersion (default 13000)
 *   FAKEGPU_NAME             model (default "NVIDIA Fake GPU")
 *   FAKEGPU_CC               compute capability "major.minor" (default "9.0")
 *   FAKEGPU_SMS, FAKEGPU_MEM_MIB, FAKEGPU_L2_KIB, FAKEGPU_SMEM_KIB
 *   FAKEGPU_UUID             32 hex digits, dashes and a "GPU-" prefix allowed
 *                            (default fa ce 00 .. 00 <index>)
 *   FAKEGPU_PCI              PCI bus id (default 0000:<index + 1>:00.0)
 *   FAKEGPU_ECC, FAKEGPU_PERSISTENCE, FAKEGPU_MIG   0 or 1
 *   FAKEGPU_POWER_W, FAKEGPU_MAX_SM_MHZ, FAKEGPU_MAX_MEM_MHZ, FAKEGPU_SM_MHZ,
 *   FAKEGPU_MEM_MHZ, FAKEGPU_TEMP_C, FAKEGPU_VBIOS, FAKEGPU_OTHER_PROCS
 *   FAKEGPU_NVML_COUNT       devices NVML lists (default FAKEGPU_COUNT)
 *   FAKEGPU_NVML_REVERSE=1   NVML lists the devices in the reverse of CUDA's order
 *
 * A per-device variable FAKEGPU_<KEY>_<index> overrides FAKEGPU_<KEY> for that device, so
 * two devices can differ.
 *
 *   FAKEGPU_FAIL             comma-separated functions that fail: `name`, `name=code`,
 *                            `name@index` (only for that device), `name@index=code`;
 *                            the code defaults to 999 (CUDA_ERROR_UNKNOWN, NVML_ERROR_UNKNOWN)
 *   FAKEGPU_LOG              a file each call appends its function's name to
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------- configuration */

static void log_call(const char *name) {
    const char *path = getenv("FAKEGPU_LOG");
    if (!path || !*path)
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        return;
    char line[128];
    int n = snprintf(line, sizeof line, "%s\n", name);
    if (n > 0 && write(fd, line, (size_t)n) < 0) {
        /* a log that cannot be written changes no answer */
    }
    close(fd);
}

/* FAKEGPU_<key>_<dev>, else FAKEGPU_<key>, else NULL. dev < 0: only FAKEGPU_<key>. */
static const char *setting(const char *key, int dev) {
    char name[96];
    if (dev >= 0) {
        snprintf(name, sizeof name, "FAKEGPU_%s_%d", key, dev);
        const char *v = getenv(name);
        if (v)
            return v;
    }
    snprintf(name, sizeof name, "FAKEGPU_%s", key);
    return getenv(name);
}

static long number(const char *key, int dev, long dflt) {
    const char *v = setting(key, dev);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

static const char *text(const char *key, int dev, const char *dflt) {
    const char *v = setting(key, dev);
    return v ? v : dflt;
}

/* The code `name` must fail with for device `dev` (-1: no device), or 0. */
static int failure(const char *name, int dev) {
    const char *list = getenv("FAKEGPU_FAIL");
    if (!list)
        return 0;
    size_t len = strlen(name);
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if ((size_t)(end - p) >= len && strncmp(p, name, len) == 0) {
            const char *q = p + len;
            int ok = 1;
            if (q < end && *q == '@') {
                long only = strtol(q + 1, (char **)&q, 10);
                ok = only == dev;
            }
            int code = 999;
            if (q < end && *q == '=')
                code = (int)strtol(q + 1, (char **)&q, 10);
            if (q == end && ok)
                return code;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

static int device_count(void) {
    long n = number("COUNT", -1, 1);
    return n < 0 ? 0 : (int)n;
}

static void uuid_bytes(int dev, unsigned char out[16]) {
    memset(out, 0, 16);
    out[0] = 0xfa;
    out[1] = 0xce;
    out[15] = (unsigned char)dev;
    const char *v = setting("UUID", dev);
    if (!v)
        return;
    if (strncmp(v, "GPU-", 4) == 0)
        v += 4;
    int i = 0;
    while (*v && i < 32) {
        if (*v == '-') {
            v++;
            continue;
        }
        char c = (char)tolower((unsigned char)*v++);
        int d = isdigit((unsigned char)c) ? c - '0' : c - 'a' + 10;
        if (i % 2 == 0)
            out[i / 2] = (unsigned char)(d << 4);
        else
            out[i / 2] |= (unsigned char)d;
        i++;
    }
}

static void uuid_text(int dev, char *out, size_t len) {
    unsigned char b[16];
    uuid_bytes(dev, b);
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* ---------------------------------------------------------------- CUDA driver API */

typedef int CUresult;
typedef int CUdevice;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
};

static int cuda_initialised;

#define CU_FAIL(name, dev)                                                                  \
    do {                                                                                    \
        log_call(name);                                                                     \
        int code_ = failure(name, dev);                                                     \
        if (code_)                                                                          \
            return code_;                                                                   \
    } while (0)

#define CU_DEVICE(dev)                                                                      \
    do {                                                                                    \
        if (!cuda_initialised)                                                              \
            return CUDA_ERROR_NOT_INITIALIZED;                                              \
        if ((dev) < 0 || (dev) >= device_count())                                           \
            return CUDA_ERROR_INVALID_DEVICE;                                               \
    } while (0)

EXPORT CUresult cuDriverGetVersion(int *version) {
    CU_FAIL("cuDriverGetVersion", -1);
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = (int)number("CUDA_VERSION", -1, 13000);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned flags) {
    CU_FAIL("cuInit", -1);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (device_count() == 0)
        return 100; /* CUDA_ERROR_NO_DEVICE, as the real driver answers */
    cuda_initialised = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    CU_FAIL("cuDeviceGetCount", -1);
    if (!cuda_initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = device_count();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    CU_FAIL("cuDeviceGet", ordinal);
    CU_DEVICE(ordinal);
    *dev = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    CU_FAIL("cuDeviceGetName", dev);
    CU_DEVICE(dev);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", text("NAME", dev, "NVIDIA Fake GPU"));
    return CUDA_SUCCESS;
}

static long attribute(int attr, int dev, int *known) {
    const char *cc = text("CC", dev, "9.0");
    *known = 1;
    switch (attr) {
    case 75: /* COMPUTE_CAPABILITY_MAJOR */
        return strtol(cc, NULL, 10);
    case 76: { /* COMPUTE_CAPABILITY_MINOR */
        const char *dot = strchr(cc, '.');
        return dot ? strtol(dot + 1, NULL, 10) : 0;
    }
    case 16: /* MULTIPROCESSOR_COUNT */
        return number("SMS", dev, 132);
    case 38: /* L2_CACHE_SIZE, bytes */
        return number("L2_KIB", dev, 61440) << 10;
    case 97: /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, bytes */
        return number("SMEM_KIB", dev, 227) << 10;
    default:
        *known = 0;
        return 0;
    }
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev) {
    CU_FAIL("cuDeviceGetAttribute", dev);
    CU_DEVICE(dev);
    int known;
    long v = attribute(attr, dev, &known);
    if (!known)
        return CUDA_ERROR_INVALID_VALUE;
    *value = (int)v;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CU_FAIL("cuDeviceTotalMem_v2", dev);
    CU_DEVICE(dev);
    *bytes = (size_t)number("MEM_MIB", dev, 143155) << 20;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice dev) {
    CU_FAIL("cuDeviceGetUuid_v2", dev);
    CU_DEVICE(dev);
    uuid_bytes(dev, uuid);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev) {
    CU_FAIL("cuDeviceGetPCIBusId", dev);
    CU_DEVICE(dev);
    char dflt[32];
    snprintf(dflt, sizeof dflt, "0000:%02x:00.0", dev + 1);
    snprintf(id, (size_t)len, "%s", text("PCI", dev, dflt));
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- NVML */

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId;
    unsigned computeInstanceId;
} nvmlProcessInfo_t;

static int nvml_initialised;

static int nvml_count(void) {
    long n = number("NVML_COUNT", -1, device_count());
    return n < 0 ? 0 : (int)n;
}

/* The CUDA ordinal of NVML's index-th device. */
static int nvml_device_of(unsigned index) {
    const char *rev = getenv("FAKEGPU_NVML_REVERSE");
    if (rev && strcmp(rev, "1") == 0)
        return nvml_count() - 1 - (int)index;
    return (int)index;
}

/* Handles are the CUDA ordinal plus one, never dereferenced. */
static int handle_device(nvmlDevice_t h) { return (int)(uintptr_t)h - 1; }

#define NVML_DEVICE(name, h)                                                                \
    int dev = handle_device(h);                                                             \
    do {                                                                                    \
        log_call(name);                                                                     \
        if (!nvml_initialised)                                                              \
            return NVML_ERROR_UNINITIALIZED;                                                \
        if (dev < 0 || dev >= device_count())                                               \
            return NVML_ERROR_INVALID_ARGUMENT;                                             \
        int code_ = failure(name, dev);                                                     \
        if (code_)                                                                          \
            return code_;                                                                   \
    } while (0)

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    log_call("nvmlInit_v2");
    int code = failure("nvmlInit_v2", -1);
    if (code)
        return code;
    nvml_initialised = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    return nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    log_call("nvmlShutdown");
    nvml_initialised = 0;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    return r == NVML_SUCCESS ? "Success" : "Fake error";
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    log_call("nvmlDeviceGetCount_v2");
    if (!nvml_initialised)
        return NVML_ERROR_UNINITIALIZED;
    int code = failure("nvmlDeviceGetCount_v2", -1);
    if (code)
        return code;
    *count = (unsigned)nvml_count();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *h) {
    log_call("nvmlDeviceGetHandleByIndex_v2");
    if (!nvml_initialised)
        return NVML_ERROR_UNINITIALIZED;
    if ((int)index >= nvml_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    int dev = nvml_device_of(index);
    int code = failure("nvmlDeviceGetHandleByIndex_v2", dev);
    if (code)
        return code;
    *h = (nvmlDevice_t)(uintptr_t)(dev + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h) {
    log_call("nvmlDeviceGetHandleByUUID");
    if (!nvml_initialised)
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned i = 0; i < (unsigned)nvml_count(); i++) {
        int dev = nvml_device_of(i);
        char text_[64];
        uuid_text(dev, text_, sizeof text_);
        if (strcmp(text_, uuid) == 0) {
            int code = failure("nvmlDeviceGetHandleByUUID", dev);
            if (code)
                return code;
            *h = (nvmlDevice_t)(uintptr_t)(dev + 1);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned len) {
    NVML_DEVICE("nvmlDeviceGetUUID", h);
    char t[64];
    uuid_text(dev, t, sizeof t);
    if (strlen(t) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, t, strlen(t) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t h, int *current, int *pending) {
    NVML_DEVICE("nvmlDeviceGetEccMode", h);
    *current = *pending = number("ECC", dev, 1) != 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *mode) {
    NVML_DEVICE("nvmlDeviceGetPersistenceMode", h);
    *mode = number("PERSISTENCE", dev, 1) != 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned *current, unsigned *pending) {
    NVML_DEVICE("nvmlDeviceGetMigMode", h);
    *current = *pending = number("MIG", dev, 0) != 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned *milliwatts) {
    NVML_DEVICE("nvmlDeviceGetEnforcedPowerLimit", h);
    *milliwatts = (unsigned)number("POWER_W", dev, 700) * 1000u;
    return NVML_SUCCESS;
}

/* nvmlClockType_t: 0 graphics, 1 SM, 2 memory, 3 video. */
static nvmlReturn_t clock_of(int dev, int type, int max, unsigned *mhz) {
    if (type == 1)
        *mhz = (unsigned)(max ? number("MAX_SM_MHZ", dev, 1980) : number("SM_MHZ", dev, 1980));
    else if (type == 2)
        *mhz = (unsigned)(max ? number("MAX_MEM_MHZ", dev, 3201) : number("MEM_MHZ", dev, 3201));
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, int type, unsigned *mhz) {
    NVML_DEVICE("nvmlDeviceGetMaxClockInfo", h);
    return clock_of(dev, type, 1, mhz);
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *mhz) {
    NVML_DEVICE("nvmlDeviceGetClockInfo", h);
    return clock_of(dev, type, 0, mhz);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t h, char *version, unsigned len) {
    NVML_DEVICE("nvmlDeviceGetVbiosVersion", h);
    const char *v = text("VBIOS", dev, "96.00.FA.CE.00");
    if (strlen(v) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(version, v, strlen(v) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *celsius) {
    NVML_DEVICE("nvmlDeviceGetTemperature", h);
    if (sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *celsius = (unsigned)number("TEMP_C", dev, 31);
    return NVML_SUCCESS;
}

/* Other processes get pids 4000000 + k: never this process. The caller's own process is
 * listed too when FAKEGPU_OWN_PROC=1, which repro must not count. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *count,
                                                          nvmlProcessInfo_t *infos) {
    NVML_DEVICE("nvmlDeviceGetComputeRunningProcesses_v3", h);
    unsigned others = (unsigned)number("OTHER_PROCS", dev, 0);
    unsigned own = number("OWN_PROC", dev, 0) != 0;
    unsigned n = others + own;
    if (!infos || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned k = 0; k < n; k++) {
        memset(&infos[k], 0, sizeof infos[k]);
        infos[k].pid = k < others ? 4000000u + k : (unsigned)getpid();
        infos[k].usedGpuMemory = 1u << 20;
    }
    *count = n;
    return NVML_SUCCESS;
}
